"""The `swarm` command as users run it: start, status, sql while running and after a stop."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bus.messages import DeadLetter
from bus.nats_bus import BusSettings, connect
from bus.roles import Role
from bus.subjects import EVENTS_STREAM
from tests.conftest import RunningSwarm, make_idea, make_result, run_swarm, wait_for
from tests.helpers_process import alive, pids_matching, publish_all

RESULTS = "swarm.events.run_result"
LEADERBOARD = "select idea_id, n_runs from leaderboard where tier = 0 order by idea_id limit 3"


def test_help_shows_examples() -> None:
    done = run_swarm(Path("unused"), "--help")
    assert done.returncode == 0
    assert "swarm sql" in done.stdout and "examples:" in done.stdout


def test_a_misspelled_flag_is_named_with_its_command_s_usage_and_the_nearest_flag() -> None:
    done = run_swarm(Path("unused"), "start", "--agents", "2", "--minuts", "3")
    assert done.returncode == 2
    assert "usage: swarm start" in done.stderr
    assert "unrecognized arguments: --minuts 3 (did you mean --minutes?)" in done.stderr
    done = run_swarm(Path("unused"), "status", "now")
    assert done.returncode == 2
    assert "swarm status: error: unrecognized arguments: now" in done.stderr


# What only starting, training and proposing need: a query that imported them would take ~3 s
# of CPU instead of ~0.3 s, at every `swarm sql`, every `swarm status` and in the ledger and
# ladder processes.
HEAVY = ("torch", "scipy", "sklearn", "optuna", "autogen_core", "anthropic", "matplotlib")


def test_queries_import_nothing_that_trains_or_proposes(running_swarm: RunningSwarm) -> None:
    root = str(running_swarm.workspace.root)
    calls = [["status"], ["sql", "select count(*) from runs"], ["champion", "show"]]
    script = (
        "import sys\nfrom swarm.cli import main\n"
        f"codes = [main(['--workspace', {root!r}, *args]) for args in {calls!r}]\n"
        f"print(codes, sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[0, 0, 0] []", done.stdout + done.stderr


def test_sql_while_running_and_after_stop(running_swarm: RunningSwarm) -> None:
    root = running_swarm.workspace.root
    researcher = running_swarm.workspace.read_bus_settings(Role.RESEARCHER)
    trainer = running_swarm.workspace.read_bus_settings(Role.TRAINER)
    assert researcher is not None and trainer is not None
    asyncio.run(publish_all(researcher, [make_idea(i) for i in range(5)]))
    asyncio.run(publish_all(trainer, [make_result(i) for i in range(60)]))
    wait_for(lambda: "60" in run_swarm(root, "sql", "select count(*) from runs").stdout, 20)

    table = run_swarm(root, "sql", LEADERBOARD)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["idea_id", "n_runs"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["idea-000", "1"]
    assert lines[-1] == "(3 rows)"

    as_csv = run_swarm(root, "sql", LEADERBOARD, "--format", "csv")
    assert as_csv.stdout.splitlines()[:2] == ["idea_id,n_runs", "idea-000,1"]
    as_json = json.loads(run_swarm(root, "sql", LEADERBOARD, "--format", "json").stdout)
    assert as_json[0] == {"idea_id": "idea-000", "n_runs": 1}

    out = root.parent / "runs.parquet"
    written = run_swarm(root, "sql", "select * from runs", "--out", str(out))
    assert written.returncode == 0 and "wrote 60 rows" in written.stdout
    parquet = pq.read_table(out)
    assert parquet.num_rows == 60
    assert str(parquet.schema.field("finished_at").type).startswith("timestamp")

    refused = run_swarm(root, "sql", "drop table runs")
    assert refused.returncode == 2
    assert "only read-only queries (SELECT) are allowed, got DROP" in refused.stderr

    status = run_swarm(root, "status")
    assert "swarm: running" in status.stdout and "runs=60" in status.stdout
    assert "researchers=0" in status.stdout  # as the live view counts them: no agents here

    output = running_swarm.stop()
    assert "swarm: stopped" in output
    assert "| runs 60 |" in output  # the live view's line (stdout is not a terminal)
    assert "experiments run: 60" in output  # the summary at exit

    after = run_swarm(root, "sql", LEADERBOARD, "--format", "csv")
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines()[1] == "idea-000,1"
    status = run_swarm(root, "status")
    assert "swarm: stopped" in status.stdout and "runs=60" in status.stdout
    assert (root / "snapshots" / "runs.parquet").exists()


def test_restart_resumes_with_ledger_and_stream_intact(tmp_path: Path, swarm_config: Path) -> None:
    swarm = RunningSwarm(tmp_path / "ws", swarm_config)
    settings = swarm.wait_ready(role=Role.TRAINER)
    asyncio.run(publish_all(settings, [make_result(i) for i in range(10)]))
    wait_for(
        lambda: "10" in run_swarm(swarm.workspace.root, "sql", "from runs select count(*)").stdout
    )
    swarm.stop()
    again = RunningSwarm(tmp_path / "ws", swarm_config)
    try:
        settings = again.wait_ready(role=Role.TRAINER)
        asyncio.run(publish_all(settings, [make_result(i) for i in range(5, 20)]))
        wait_for(
            lambda: (
                "20" in run_swarm(again.workspace.root, "sql", "from runs select count(*)").stdout
            )
        )
        # The store kept the first run's 10 results, and its duplicate window (kept across the
        # restart) dropped the 5 re-published ones: 10 + 10 new.
        assert asyncio.run(results_in_stream(again.wait_ready())) == 20
    finally:
        again.stop()


async def results_in_stream(settings: BusSettings) -> int:
    nc = await connect(settings, "test")
    try:
        info = await nc.jetstream().stream_info(EVENTS_STREAM, subjects_filter=RESULTS)
        return (info.state.subjects or {}).get(RESULTS, 0)
    finally:
        await nc.close()


def test_second_swarm_on_the_same_workspace_is_refused(running_swarm: RunningSwarm) -> None:
    done = run_swarm(running_swarm.workspace.root, "start")
    assert done.returncode == 2
    assert "a swarm is already running on" in done.stderr


def test_sql_without_any_ledger_says_what_to_do(tmp_path: Path) -> None:
    done = run_swarm(tmp_path / "nothing-here", "sql", "select 1")
    assert done.returncode == 2
    assert "no ledger at" in done.stderr and "swarm start" in done.stderr
    status = run_swarm(tmp_path / "nothing-here", "status")
    assert status.returncode == 2 and "no swarm has run" in status.stderr


def test_an_out_file_in_no_folder_and_a_missing_patch_are_named_not_a_traceback(
    tmp_path: Path,
) -> None:
    out = tmp_path / "no-such-folder" / "runs.parquet"
    done = run_swarm(tmp_path / "ws", "sql", "select 1", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert f"--out {out}: no folder {out.parent}" in done.stderr  # before the query: no ledger
    patch = tmp_path / "nosuch.diff"
    done = run_swarm(tmp_path / "ws", "run", "--tier", "0", "--patch", str(patch))
    assert done.returncode == 2, done.stderr
    assert f"--patch {patch}: No such file or directory" in done.stderr
    assert "Traceback" not in done.stderr
    patch.write_text("\n")  # it would run the champion as if it were the patch's
    done = run_swarm(tmp_path / "ws", "run", "--tier", "0", "--patch", str(patch))
    assert done.returncode == 2, done.stderr
    assert f"--patch {patch}: the file is empty (it changes nothing)" in done.stderr


def test_bad_config_stops_start_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[ledger]\nbatch_sise = 10\n")
    done = run_swarm(tmp_path / "ws", "--config", str(config), "start")
    assert done.returncode == 2
    assert "unknown key ledger.batch_sise" in done.stderr
    config.write_text("[ledger]\nbatch_size = -1\n")
    done = run_swarm(tmp_path / "ws", "--config", str(config), "start")
    assert "ledger.batch_size must be positive" in done.stderr
    ladder = tmp_path / "ladder.toml"
    ladder.write_text('[[tier]]\nname = "t0"\nseeds = 2\n')
    config.write_text(f'[ladder]\npath = "{ladder}"\n')
    done = run_swarm(tmp_path / "ws", "--config", str(config), "start")
    assert done.returncode == 2 and 'tier[0] ("t0"): missing key depth' in done.stderr
    assert not (tmp_path / "ws").exists()  # nothing ran


def test_sigkill_of_swarm_leaves_no_server_and_restart_works(
    tmp_path: Path, swarm_config: Path
) -> None:
    swarm = RunningSwarm(tmp_path / "ws", swarm_config)
    settings = swarm.wait_ready(role=Role.TRAINER)
    asyncio.run(publish_all(settings, [make_result(1), make_result(2)]))
    root = str(swarm.workspace.root)
    children = pids_matching(root, "nats-server") + pids_matching(root, last_arg="ledger")
    assert len(children) == 2
    swarm.stop(signal.SIGKILL)
    wait_for(lambda: not any(alive(p) for p in children), 10)
    again = RunningSwarm(tmp_path / "ws", swarm_config)
    try:
        again.wait_ready()
        wait_for(
            lambda: "2" in run_swarm(tmp_path / "ws", "sql", "from runs select count(*)").stdout
        )
    finally:
        again.stop()


def test_dead_letters_published_by_any_consumer_are_kept(running_swarm: RunningSwarm) -> None:
    settings = running_swarm.workspace.read_bus_settings(Role.TRAINER)
    assert settings is not None
    letter = DeadLetter("dl-x-1", "swarm.jobs.tier0", "not JSON", "{", 1, "trainer")
    asyncio.run(publish_all(settings, [letter]))
    wait_for(
        lambda: (
            "trainer"
            in run_swarm(
                running_swarm.workspace.root, "sql", "select consumer from dead_letters"
            ).stdout
        )
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--max-experiments", "-1"), "limits.max_experiments must be 0 or more, got -1"),
        (("--max-llm-usd", "-5"), "llm.max_usd must be 0 or more, got -5.0"),
        (
            ("--brain", "portfolio:0"),
            "agents.brain: count of 'portfolio' in 'portfolio:0' must be 1 or more",
        ),
    ],
)
def test_a_bad_flag_stops_start_before_anything_runs(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    """The children read the supervisor's config back and refuse a bad value; checked only
    there, every child failed and was restarted forever (or no researcher ran, for a brain
    group of 0)."""
    done = run_swarm(tmp_path / "ws", "start", "--target", "synthetic", *flags, timeout=30)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"the command line: {message}" in done.stderr
    assert not (tmp_path / "ws").exists()
