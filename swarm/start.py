"""`swarm start`: bring up the bus (embedded or joined), the ledger, and show live status.

One shutdown path: SIGINT/SIGTERM (or --minutes) set `stop`; then children stop in order
(ledger first, so it commits and snapshots), the bus connection closes, the embedded server
stops, and the workspace lock is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from nats.aio.client import Client
from nats.errors import Error as NatsError
from rich.console import Console

from bus.champion_store import champion_bucket
from bus.embedded_server import (
    LOOPBACK_HOSTS,
    EmbeddedNatsServer,
    NatsServerError,
    ServerTls,
    write_private,
)
from bus.nats_bus import BusSettings, connect
from bus.roles import Role, authorization_block
from bus.subjects import ensure_streams
from recipes.store import recipe_bucket
from swarm.champion_health import broken_champion
from swarm.config import SwarmConfig, dump_config, listen_address, with_overrides
from swarm.config_files import ladder_path
from swarm.errors import SwarmError
from swarm.event_loop import stop_on_signals
from swarm.follow_up import swarm_command
from swarm.ladder_process import make_ladder, target_info
from swarm.live_snapshot import gather_snapshot
from swarm.live_view import LiveView
from swarm.preflight import check_confinement, check_limit_left, check_llm, check_web
from swarm.supervisor import ManagedProcess
from swarm.trainer_plan import gpu_count, trainer_envs, visible_gpus
from swarm.workspace import Workspace

log = logging.getLogger(__name__)


def bus_settings(config: SwarmConfig) -> BusSettings:
    b = config.bus
    return BusSettings(
        b.url, b.token, b.user, b.password, b.creds_file, b.tls_ca, b.tls_cert, b.tls_key
    )


async def start_swarm(
    config: SwarmConfig,
    workspace: Workspace,
    minutes: float | None = None,
    out: TextIO = sys.stdout,
) -> None:
    make_ladder(config)  # a bad ladder or target stops the start here, naming the key
    check_web(config)
    check_llm(config, workspace, config.agents.count)  # a missing key or price, likewise
    trainers = trainer_plan(config)
    if trainers and (warning := check_confinement(config)):  # or refuses here
        print(warning, file=out)
    check_limit_left(config, workspace)
    workspace.create()
    workspace.seed_secret()  # made now, or read: a damaged one stops the start, named
    lock = workspace.acquire_lock()
    if lock is None:
        raise SwarmError(
            f"a swarm is already running on {workspace.root} (pid in {workspace.lock_file}); "
            "stop it or pass another --workspace"
        )
    stop = asyncio.Event()
    stop_on_signals(stop, lambda signum: _stopping(out, f"signal {signum}"))
    server: EmbeddedNatsServer | None = None
    children: list[ManagedProcess] = []
    failures: list[str] = []  # why the swarm stopped by itself, if it had to (champion_health)
    since = time.time()  # before any process starts: a champion's run may fail at once
    logged = log_to_file(workspace.logs_dir / "start.log")
    try:
        if config.bus.url:
            settings = bus_settings(config)
            workspace.write_bus_settings(settings)
        else:
            server = embedded_server(config, workspace)
            b = config.bus  # this machine's processes: TLS as clients, credentials per role
            local = BusSettings(
                server.start(), tls_ca=b.tls_ca, tls_cert=b.tls_cert, tls_key=b.tls_key
            )
            workspace.write_bus_settings(local, per_role=True)
            settings = workspace.read_bus_settings(Role.SUPERVISOR) or local
        nc = await connect(settings, "swarm-supervisor", config.bus.connect_timeout_s)
        try:
            await ensure_streams(nc.jetstream(), config.bus.max_payload_bytes)
            await champion_bucket(nc.jetstream())  # here, so no other role may create streams
            await recipe_bucket(nc.jetstream())
            delay = config.ledger.restart_delay_s
            effective = workspace.run_dir / "swarm.toml"  # children run with exactly this config
            # The embedded server has per-role users: a token or password from the environment
            # is of no use to the children there, so it is not written to disk.
            quiet = (
                config if config.bus.url else with_overrides(config, "bus", token="", password="")
            )
            write_private(effective, dump_config(quiet))
            # The ladder as it ran: what `swarm whatif`, `calibrate` and `audit` replay, even if
            # the file is edited later (cli._as_it_ran).
            _keep_ladder(workspace, ladder_path(config).read_text())
            # Only the agents need the LLM keys: no other process ever sees them.
            keys = (config.llm.anthropic_api_key_env, config.llm.openai_api_key_env)
            for name in ("ledger", "ladder"):
                children.append(
                    ManagedProcess(
                        name,
                        _swarm_argv(workspace, effective, name),
                        workspace.logs_dir / f"{name}.log",
                        delay,
                        withhold=keys,
                    )
                )
            for i, env in enumerate(trainers):
                children.append(
                    ManagedProcess(
                        f"trainer-{i}",
                        _swarm_argv(workspace, effective, "worker"),
                        workspace.logs_dir / f"trainer-{i}.log",
                        delay,
                        withhold=keys,
                        env=env,
                    )
                )
            if config.agents.count:
                children.append(
                    ManagedProcess(
                        "agents",
                        _swarm_argv(
                            workspace,
                            effective,
                            "agents",
                            f"--count={config.agents.count}",
                            "--name=local",
                        ),
                        workspace.logs_dir / "agents.log",
                        delay,
                        grace_s=30.0,  # LLM calls in flight finish and are recorded
                    )
                )
            web = _web_child(config, workspace, effective, keys)
            children += [web] if web else []
            for child in children:
                await child.start()
            print(
                f"swarm: bus {settings.redacted_url()} "
                f"({'embedded' if server else 'external'}), workspace {workspace.root}",
                file=out,
                flush=True,
            )
            if web:
                print(f"swarm: web view {await _web_url(workspace)}", file=out, flush=True)
            async with asyncio.TaskGroup() as group:
                keepers = [group.create_task(child.keep_alive()) for child in children]
                if server is not None:
                    keepers.append(group.create_task(_keep_server_alive(server)))
                swarm = swarm_command(workspace.root)  # how a hint names this program
                report = _report(nc, config, out, stop, minutes, failures, since, swarm)
                reporter = group.create_task(report)
                deadline = None if minutes is None else time.monotonic() + minutes * 60
                await _wait(stop, deadline, out)
                # Trainers first (they hand unfinished jobs back), the ledger last (it commits).
                for child in reversed(children):
                    await child.stop()
                for task in [*keepers, reporter]:
                    task.cancel()
        finally:
            await nc.close()
    finally:
        for child in reversed(children):
            await child.stop()
        if server is not None:
            server.stop()
        workspace.clear_bus_settings()
        lock.close()
        logging.getLogger().removeHandler(logged)
        logged.close()
        print("swarm: stopped", file=out, flush=True)
    await _farewell(config, workspace, out)
    if failures:
        raise SwarmError(failures[0])


def embedded_server(config: SwarmConfig, workspace: Workspace) -> EmbeddedNatsServer:
    """The swarm's own nats-server: one user per role (passwords kept in the workspace), where
    `bus.listen` says, with TLS when `bus.server_tls_cert` is set."""
    b = config.bus
    host, port = listen_address(b.listen)
    tls = ServerTls(b.server_tls_cert, b.server_tls_key, b.server_tls_client_ca)
    if host not in (*LOOPBACK_HOSTS, "::1") and not b.server_tls_cert:
        log.warning(
            "bus.listen %s reaches beyond this machine without TLS: passwords and messages "
            "cross the network in clear; set bus.server_tls_cert and bus.server_tls_key",
            b.listen,
        )
    return EmbeddedNatsServer(
        workspace.run_dir,
        workspace.jetstream_dir,
        b.max_payload_bytes,
        host=host,
        port=port,
        authorization=authorization_block(workspace.role_passwords()),
        tls=tls if b.server_tls_cert else None,
    )


async def _farewell(config: SwarmConfig, workspace: Workspace, out: TextIO) -> None:
    """The summary and the report, from the ledger file the swarm left behind."""
    from swarm.summary import summary_text
    from swarm.swarm_report import write_swarm_report

    try:
        print(summary_text(config, workspace), file=out, flush=True)
        files = await write_swarm_report(config, workspace)
        print(f"report: {files.html}\nplot:   {files.png}", file=out, flush=True)
    except Exception as exc:  # the swarm itself stopped cleanly; say what the summary lacks
        log.exception("summary failed")
        print(f"swarm: could not write the summary or report: {exc}", file=out, flush=True)


async def _keep_server_alive(server: EmbeddedNatsServer, poll_s: float = 0.5) -> None:
    """Restart the embedded nats-server whenever it dies (same port, token and store), as the
    children are: every client reconnects by itself, and JetStream recovers from its store."""
    while True:
        await asyncio.sleep(poll_s)
        if server.alive:
            continue
        log.warning("nats-server died; restarting it on port %d", server.port)
        try:
            await asyncio.to_thread(server.restart)
        except NatsServerError as exc:  # e.g. its port was taken meanwhile: try again
            log.error("could not restart nats-server: %s", exc)


def trainer_plan(config: SwarmConfig) -> list[dict[str, str]]:
    """The environment each trainer adds (swarm/trainer_plan.py): how many, and which GPU."""
    if config.trainers.count == 0:
        return []
    device = config.trainers.device
    if device == "auto":  # torch is imported only where a GPU driver is loaded
        from swarm.training_setup import resolve_device

        device = resolve_device(device)
    gpus = visible_gpus(os.environ, gpu_count(device))
    return trainer_envs(config.trainers.count, device, os.cpu_count() or 1, gpus)


def _keep_ladder(workspace: Workspace, text: str) -> None:
    """The ladder this start runs with, in run/ladder.toml; the one an earlier start ran with,
    if another, kept beside it (run/ladder.N.toml): `swarm whatif` says the history ran under
    more than one."""
    kept = workspace.run_dir / "ladder.toml"
    if kept.exists() and kept.read_text() != text:
        n = 1 + len(list(workspace.run_dir.glob("ladder.*.toml")))
        kept.rename(workspace.run_dir / f"ladder.{n}.toml")
    write_private(kept, text)


def _web_child(
    config: SwarmConfig, workspace: Workspace, effective: Path, keys: tuple[str, ...]
) -> ManagedProcess | None:
    """The web view's process (web.enabled): on web.port or, taken, a free one."""
    if not config.web.enabled:
        return None
    workspace.web_url_file.unlink(missing_ok=True)  # the child writes where it listens
    return ManagedProcess(
        "web",
        _swarm_argv(workspace, effective, "web", "--of-start"),
        workspace.logs_dir / "web.log",
        config.ledger.restart_delay_s,
        withhold=keys,
    )


async def _web_url(workspace: Workspace, timeout_s: float = 15.0) -> str:
    """Where the web view listens, once its process says (it may take another port)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if url := workspace.web_url_file.read_text().strip():
                return url
        await asyncio.sleep(0.1)
    return f"starting (see {workspace.logs_dir / 'web.log'})"


def _swarm_argv(workspace: Workspace, config_path: Path, *command: str) -> list[str]:
    """How a child runs a `swarm` subcommand on the same workspace and config."""
    root = str(workspace.root)
    return [
        sys.executable,
        "-m",
        "swarm",
        "--workspace",
        root,
        "--config",
        str(config_path),
        *command,
    ]


def log_to_file(path: Path) -> logging.Handler:
    """Everything the supervisor logs goes to the workspace's start.log; the terminal shows
    only warnings (a child that exits, restarts), among the live view's lines (cli.main)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler


def _stopping(out: TextIO, why: str) -> None:
    log.info("%s: stopping", why)
    print(f"swarm: {why}: stopping", file=out, flush=True)


async def _wait(stop: asyncio.Event, deadline: float | None, out: TextIO) -> None:
    if deadline is None:
        await stop.wait()
        return
    try:
        await asyncio.wait_for(stop.wait(), max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        _stopping(out, "time limit reached")


async def _report(
    nc: Client,
    config: SwarmConfig,
    out: TextIO,
    stop: asyncio.Event,
    minutes: float | None,
    failures: list[str],
    since: float,
    swarm: str,
) -> None:
    """The live view (a rich screen on a terminal, one line per update in a log), and the
    experiment limit: the swarm stops once the ledger holds that many results."""
    limit = config.limits.max_experiments
    lower_is_better = target_info(config).lower_is_better  # the leaderboard shows the best first
    started = time.monotonic()
    view = LiveView(Console(file=out))
    try:
        while True:
            await asyncio.sleep(config.status.interval_s)
            timeout = min(5.0, config.status.interval_s)
            try:
                snapshot = await gather_snapshot(
                    nc, started, minutes, limit, timeout, lower_is_better
                )
                broken = await broken_champion(nc, timeout, since, swarm)
            except (NatsError, TimeoutError) as exc:  # the bus is busy or reconnecting: say so
                print(f"swarm: bus not answering ({exc or type(exc).__name__})", file=out)
                continue
            view.update(snapshot)
            if broken:
                log.info("stopping: %s", broken)  # start.log keeps why (the terminal: at exit)
                failures.append(broken)
                stop.set()
            if limit and not snapshot.error and snapshot.experiments_run >= limit:
                _stopping(out, f"{snapshot.experiments_run} experiments run")
                stop.set()
    finally:
        view.close()
