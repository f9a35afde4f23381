"""Adversarial patches through a real trainer (`swarm worker`) on a real bus: every attack comes
back as a RunResult with the right status and a reason that names it, no metric is ever better
than the champion's, nothing is left outside the scratch directory, and the same trainer process
(and its fork server) goes on serving: the champion run after the attacks scores exactly what it
scored before them."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg

from bus.codec import decode_as
from bus.embedded_server import EmbeddedNatsServer
from bus.messages import RunResult, RunSpec, RunStatus
from bus.nats_bus import enqueue_run
from bus.subjects import PREFIX, ensure_trainer_consumer
from tests.conftest import MAX_PAYLOAD, swarm_cmd, wait_for_async
from tests.helpers_process import descendants, pids_matching
from tests.training_helpers import ATTACKS, CHEATS, TINY_LADDER, inject, tiny_spec
from training.process_outcome import LOG_KEEP_BYTES

API_KEY = "sk-ant-adversarial-test-key"
FILE_SECRET = "TRAINER-FILE-SECRET"
# Hit the same limits as disk-fill, each for up to a GiB of writes at the trainer's default
# limits: the runner's tests run them with small ones.
RUNNER_TESTS_ONLY = {"disk-fill-hidden", "many-files", "big-file", "log-spam"}


@dataclass(frozen=True)
class Case:
    name: str
    spec: RunSpec
    status: RunStatus
    reason: str  # words the reason must hold ("" for OK)


def cases(bus_port: int, outside: list[Path], secret: Path) -> list[Case]:
    """The champion, every attack and cheat, a few aimed at this trainer, the champion again."""
    found = [Case("champion", tiny_spec(seed=7), RunStatus.OK, "")]
    for name, (patch, status, reason) in ATTACKS.items():
        if name not in RUNNER_TESTS_ONLY:
            found.append(Case(name, tiny_spec(patch, seed=7), status, reason))
    for name, (patch, status) in CHEATS.items():
        found.append(Case(name, tiny_spec(patch, seed=7), status, ""))
    connect = f"import socket\nsocket.create_connection(('127.0.0.1', {bus_port}), 2)"
    found.append(Case("bus-connect", tiny_spec(inject(connect)), RunStatus.CRASH, "Permission"))
    secrets = f"""
import os
print("ENV", dict(os.environ))
paths = ["/proc/self/environ", f"/proc/{{os.getppid()}}/environ", "/proc/1/environ"]
for path in [*paths, {str(secret)!r}]:
    try:
        print("LEAKED", open(path, "rb").read())
    except OSError as exc:
        print("DENIED", path, exc)
"""
    found.append(Case("secrets", tiny_spec(inject(secrets), seed=7), RunStatus.OK, ""))
    writes = f"""
for path in {[str(p) for p in outside]!r}:
    try:
        open(path, "w").write("x")
        print("ESCAPED", path)
    except OSError as exc:
        print("DENIED", path, exc)
"""
    found.append(Case("write-outside-trainer", tiny_spec(inject(writes), seed=7), RunStatus.OK, ""))
    rewrite = "import os\ntry:\n    os.ftruncate(1, 0)\nexcept OSError:\n    pass\n"
    rewrite += "print('status: OK')"
    found.append(Case("log-rewritten", tiny_spec(inject(rewrite), seed=7), RunStatus.OK, ""))
    found.append(Case("champion-again", tiny_spec(seed=7), RunStatus.OK, ""))
    # Hangs get 2 s, not the tier's 60.
    return [
        replace(c, spec=replace(c.spec, time_limit_s=2)) if c.status == RunStatus.TIMEOUT else c
        for c in found
    ]


async def test_attacks_through_a_trainer_leave_it_serving_and_the_champion_unchanged(
    nc: Client, nats_server: EmbeddedNatsServer, tmp_path: Path
) -> None:
    js = nc.jetstream()
    await ensure_trainer_consumer(js, 0)
    workspace, cwd = tmp_path / "ws", tmp_path / "cwd"
    cwd.mkdir()
    secret = tmp_path / "trainer-secret.txt"  # readable by the trainer, never by experiments
    secret.write_text(FILE_SECRET)
    outside = [
        workspace / "escape.txt",
        workspace / "logs" / "escape.txt",
        cwd / "escape.txt",
        Path(f"/tmp/swarm-escape-{uuid.uuid4().hex}"),
    ]
    bus_port = int(nats_server.url.rpartition(":")[2])
    plan = cases(bus_port, outside, secret)

    results: dict[str, RunResult] = {}

    async def collect(msg: Msg) -> None:
        result = decode_as(msg.data, RunResult, MAX_PAYLOAD)
        results[result.run_id] = result

    await nc.subscribe(f"{PREFIX}.events.{RunResult.KIND}", cb=collect)
    for case in plan:
        await enqueue_run(js, case.spec)

    (tmp_path / "ladder.toml").write_text(TINY_LADDER)
    config = tmp_path / "worker.toml"
    config.write_text(
        f'[ladder]\npath = "{tmp_path / "ladder.toml"}"\n[trainers]\ndevice = "cpu"\n'
    )
    env = {**os.environ, "SWARM_NATS_TOKEN": nats_server.token, "ANTHROPIC_API_KEY": API_KEY}
    command = swarm_cmd(workspace, "--config", str(config), "worker", "--nats", nats_server.url)
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        first = plan[0].spec.run_id

        async def started() -> bool:
            return first in results

        await wait_for_async(started, 60, 0.1)
        zygotes = zygotes_of(worker.pid)
        assert len(zygotes) == 1, zygotes

        async def finished() -> bool:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            return len(results) == len(plan)

        await wait_for_async(finished, 90, 0.2)
        assert worker.poll() is None  # the same trainer process served every job...
        assert zygotes_of(worker.pid) == zygotes  # ...with the same fork server
        assert set(descendants(worker.pid)) == zygotes  # and no experiment is left running
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert worker.returncode == 0

    baseline = results[first].metric
    assert baseline is not None
    assert len({r.trainer for r in results.values()}) == 1
    for case in plan:
        result = results[case.spec.run_id]
        why = (case.name, result.status, result.reason, result.log_tail[-1500:])
        assert result.status == case.status, why
        assert case.reason in result.reason, why
        # Never a better metric: exactly the champion's (one thread, a fixed seed) or none.
        assert result.metric == (baseline if case.status == RunStatus.OK else None), why
        for leak in (API_KEY, nats_server.token, FILE_SECRET, "LEAKED", "ESCAPED"):
            assert leak not in result.log_tail, why
    tails = {case.name: results[case.spec.run_id].log_tail for case in plan}
    assert tails["secrets"].count("DENIED") == 4
    assert tails["write-outside-trainer"].count("DENIED") == len(outside)

    assert not any(path.exists() for path in outside)
    assert not Path("/tmp/swarm-escape.txt").exists()
    assert list(cwd.iterdir()) == []
    assert list((workspace / "scratch").iterdir()) == []  # every run's scratch is removed
    kept = {path.name: path for path in (workspace / "logs" / "runs").iterdir()}
    assert set(kept) == {f"{case.spec.run_id}.log" for case in plan}
    for path in kept.values():
        assert path.stat().st_size <= LOG_KEEP_BYTES
        assert FILE_SECRET not in path.read_text(errors="replace")


def zygotes_of(worker: int) -> set[int]:
    """The worker's fork servers: its children (the experiments they fork share their command
    line, one level further down)."""
    return {
        pid for pid in pids_matching("training.harness_child", "--zygote") if parent(pid) == worker
    }


def parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])
