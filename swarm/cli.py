"""The `swarm` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from agents.brain_groups import total_of
from agents.llm_setup import LlmSetupError
from bus.embedded_server import NatsServerError
from bus.messages import RunStatus
from bus.nats_bus import BusSettings, BusUnavailable, connect
from bus.roles import Role
from ledger.duckdb_store import LedgerLocked
from ledger.sql_protocol import SqlError
from swarm import config_files, event_loop, people
from swarm.cli_args import build_parser, parse
from swarm.config import (
    ConfigError,
    SwarmConfig,
    dump_config,
    parse_config,
    with_overrides,
)
from swarm.corpus_choice import corpus_said
from swarm.errors import SwarmError
from swarm.follow_up import swarm_program
from swarm.ladder_process import make_ladder, run_ladder
from swarm.ledger_process import SwarmNotRunning, run_ledger
from swarm.output import FORMATS, check_parquet_out, write_parquet
from swarm.sql_client import LedgerUnavailable, query, read_file
from swarm.status import COUNTS_SQL, counts_from, live_status
from swarm.workspace import Workspace

# Errors a user can fix: printed as one line, exit code 2. Anything else is a bug and raises.
USER_ERRORS = (
    ConfigError,
    LlmSetupError,
    SwarmError,
    SwarmNotRunning,
    LedgerUnavailable,
    SqlError,
    LedgerLocked,
    NatsServerError,
    BusUnavailable,
    people.ControlRefused,
    ValueError,
    config_files.InitRefused,
)


def configure(args: argparse.Namespace) -> tuple[SwarmConfig, Workspace]:
    """The config file, then the flags a subcommand was given (flags it lacks count as unset)."""

    def flag(name: str) -> Any:
        return getattr(args, name, None)

    cwd = Path.cwd()
    config, config_file = config_files.load(args.config, cwd)
    config = with_overrides(config, "workspace", path=_opt_str(args.workspace))
    config = with_overrides(
        config,
        "bus",
        url=flag("nats"),
        user=flag("nats_user"),
        creds_file=flag("nats_creds"),
        tls_ca=flag("tls_ca"),
        tls_cert=flag("tls_cert"),
        tls_key=flag("tls_key"),
        # Secrets from the environment only: a command line is visible to every user.
        token=os.environ.get("SWARM_NATS_TOKEN"),
        password=os.environ.get("SWARM_NATS_PASSWORD"),
    )
    config = with_overrides(config, "target", kind=flag("target"), **_target_values(args))
    config = with_overrides(config, "trainers", count=flag("trainers"))
    brain, count = flag("brain"), flag("agents") if args.command == "start" else flag("count")
    if brain is not None and count is None:
        count = total_of(brain)  # `--brain anthropic:6,heuristic:2` says how many
    screen = flag("screen")
    if screen is not None and screen < 1:
        raise ConfigError(f"the command line: --screen must be 1 or more, got {screen}")
    config = with_overrides(config, "agents", count=count, brain=brain, screen=screen)
    config = with_overrides(config, "llm", max_usd=flag("max_llm_usd"))
    config = with_overrides(config, "limits", max_experiments=flag("max_experiments"))
    config = with_overrides(config, "web", host=flag("host"), port=flag("web_port"))
    if flag("no_web"):
        config = with_overrides(config, "web", enabled=False)
    if args.command == "worker":
        config = with_overrides(config, "trainers", device=flag("device"))
    if flag("unsafe_no_sandbox"):
        config = with_overrides(config, "trainers", unsafe_no_sandbox=True)
    # Paths from flags are relative to this folder (the file's are absolute already), and
    # absolute, so child processes and later reads agree whatever their directory.
    config = config_files.absolute_paths(config, cwd)
    config = config_files.with_defaults(config, config_file, cwd)
    # The children read the config back from the TOML the supervisor writes, checking every
    # value: check it here the same way, so a bad flag (`--max-experiments -1`) stops the
    # command with the reason instead of every child failing and restarting forever.
    parse_config(tomllib.loads(dump_config(config)), "the command line")
    workspace = Path(config.workspace.path).resolve()
    if config.target.kind == "command" and workspace == Path(config.target.project).resolve():
        raise ConfigError(
            f"the workspace {workspace} is the project folder itself: every experiment copies "
            "the project, so it would copy its own runs; use a folder inside it or elsewhere "
            "(--workspace, workspace.path)"
        )
    return config, Workspace(workspace)


def _no_swarm(workspace: Workspace) -> str:
    return (
        f"no swarm has run in {workspace.root} (another workspace: --workspace; a swarm "
        "running elsewhere: --nats)"
    )


def _opt_str(value: Path | None) -> str | None:
    return None if value is None else str(value)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    terminal = logging.StreamHandler(sys.stderr)
    if args.command == "start" and not args.verbose:
        # The terminal is the live view's: what the supervisor logs goes to the workspace's
        # start.log (start.log_to_file); a warning still shows here.
        terminal.setLevel(logging.WARNING)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[terminal],
    )
    try:
        if args.command == "init":
            print(_init(args, Path.cwd()))
            return 0
        config, workspace = configure(args)
        return event_loop.run(_dispatch(args, config, workspace))
    except USER_ERRORS as exc:
        print(f"swarm: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `swarm sql ... | head`: the reader has all it wanted
        # Python would report the failed flush of stdout at exit; point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell tool that was cut off


def _init(args: argparse.Namespace, folder: Path) -> str:
    """`swarm init`: the files, the target flags given written into swarm.toml, and whether
    that config works (a mistake is named now, not after the first experiment)."""
    target = args.target or "bytelm"
    written = config_files.init_folder(folder, target, args.force, _target_values(args))
    files = ", ".join(p.name for p in written)
    swarm = swarm_program(folder)
    lines = [f"wrote {files} in {folder}"]
    try:
        make_ladder(configure(build_parser().parse_args(["status"]))[0])
    except (ConfigError, ValueError) as exc:
        lines.append(f"swarm: warning: {exc}\nfix it in swarm.toml or ladder.toml, then run:")
    else:
        lines.append("edit them as you like; try one experiment, then start the swarm:")
    project = folder / (getattr(args, "project", None) or ".")  # where the command runs
    for name in config_files.missing_scripts(getattr(args, "run_command", None) or "", project):
        lines.insert(1, f"swarm: warning: the run command names {name}, which is not in {project}")
    lines += [f"  {swarm} run --tier 0 --seed 1", f"  {swarm} start"]
    return "\n".join(lines)


def _what_it_runs(args: argparse.Namespace, config: SwarmConfig) -> str:
    """The target and the config file a start uses: a folder without a config of its own runs
    the built-in bytelm, which should not come as a surprise."""
    cwd = Path.cwd()
    found = config_files.find_config(args.config, cwd)
    own = args.config is not None or any((cwd / n).is_file() for n in config_files.FOLDER_CONFIGS)
    source = found if own else f"{found} (built in: no swarm.toml here)"
    t = config.target
    if t.kind == "command":
        what = f"command target: {t.run!r} on {t.edit}, metric {t.metric} ({t.direction})"
    elif t.kind == "bytelm":
        what = f"target bytelm on {corpus_said(config)}"
    else:
        what = f"target {t.kind}"
    return f"swarm: {what}; config {source}; ladder {config_files.ladder_path(config)}"


def _target_values(args: argparse.Namespace) -> dict[str, str]:
    """The [target] keys the command line gave (a subcommand without target flags gives none),
    for `configure` to override and `swarm init` to write."""

    def flag(name: str) -> Any:
        return getattr(args, name, None)

    given = {
        "data": flag("data"),
        "project": flag("project"),
        "edit": flag("edit"),
        "run": flag("run_command"),
        "metric": flag("metric"),
        "metric_regex": flag("metric_regex"),
        "metric_from": "regex" if flag("metric_regex") else "json" if flag("metric_json") else None,
        "direction": "maximize" if flag("maximize") else None,
        "fixed": flag("fixed"),
        "eval": flag("eval_command"),
        "held_out": flag("held_out"),
    }
    return {key: value for key, value in given.items() if value is not None}


async def _dispatch(args: argparse.Namespace, config: SwarmConfig, workspace: Workspace) -> int:
    # What starts a swarm is imported only for the commands that do: it imports torch and the
    # researchers' models (~2 s), which `swarm sql`, `swarm status` and the ledger and ladder
    # processes should not pay at every call.
    if args.command == "start":
        from swarm.start import start_swarm

        print(_what_it_runs(args, config), flush=True)
        await start_swarm(config, workspace, args.minutes)
    elif args.command == "ledger":
        await run_ledger(config, workspace)
    elif args.command == "ladder":
        await run_ladder(config, workspace)
    elif args.command == "agents":
        settings = _bus_to_join(config, workspace, Role.RESEARCHER)
        from swarm.agents_process import run_agents  # autogen-core and the SDKs: slow imports

        await run_agents(config, workspace, settings, config.agents.count, args.name)
    elif args.command in ("review", "approve", "reject", "champion", "report"):
        print(await _people(args, config, workspace))
    elif args.command == "status":
        await _status(config, workspace)
    elif args.command == "audit":
        return _audit(_as_it_ran(args, config, workspace), workspace, args.drained)
    elif args.command == "sql":
        await _sql(args, config, workspace)
    elif args.command == "web":
        from swarm.start import bus_settings
        from swarm.web_command import serve  # starlette and uvicorn: not every command's

        remote = bus_settings(config) if config.bus.url else None
        if not (remote or workspace.ledger_path.exists() or workspace.is_running()):
            raise SwarmError(_no_swarm(workspace))
        ran = config if remote else _as_it_ran(args, config, workspace)
        await serve(ran, workspace, remote, config.web.host, config.web.port, args.of_start)
    elif args.command in ("whatif", "calibrate"):
        await _whatif(args, config, workspace)
    elif args.command == "run":
        # Imported here: torch costs ~2 s at import, and `swarm sql` should not pay it.
        from swarm.training_setup import run_once, summary

        try:
            patch = args.patch.read_text() if args.patch else ""
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not a text file"
            raise ValueError(f"--patch {args.patch}: {why}") from None
        if args.patch and not patch.strip():  # it would run the champion, as if no patch
            raise ValueError(f"--patch {args.patch}: the file is empty (it changes nothing)")
        result = await run_once(config, workspace, args.tier, args.seed, patch, args.device)
        print(summary(result, result.metric_name, measured=config.target.kind != "command"))
        print(f"log: {workspace.logs_dir / 'runs' / f'{result.run_id}.log'}")
        evaluated = workspace.logs_dir / "runs" / f"{result.run_id}.eval.log"
        if evaluated.exists():  # a two-stage target's evaluation ran
            print(f"evaluation log: {evaluated}")
        return 0 if result.status == RunStatus.OK else 1
    elif args.command == "worker":
        settings = _bus_to_join(config, workspace, Role.TRAINER)
        from swarm.training_setup import run_worker

        await run_worker(config, workspace, settings, args.tiers)
    return 0


def _bus_to_join(config: SwarmConfig, workspace: Workspace, role: Role) -> BusSettings:
    """--nats URL, or the swarm running in this workspace (worker and agents join either, as
    their role where the swarm runs its embedded server)."""
    from swarm.start import bus_settings

    settings = bus_settings(config) if config.bus.url else workspace.read_bus_settings(role)
    if settings is None:
        raise SwarmNotRunning(f"no swarm running in {workspace.root}; pass --nats URL")
    return settings


async def _people(args: argparse.Namespace, config: SwarmConfig, workspace: Workspace) -> str:
    if args.command == "review":
        return await people.review(config, workspace)
    if args.command in ("approve", "reject"):
        return await people.control(config, workspace, action=args.command, idea_id=args.idea_id)
    if args.command == "report":
        from swarm.swarm_report import write_swarm_report  # matplotlib: a slow import

        files = await write_swarm_report(config, workspace, args.out)
        return f"wrote {files.png} and {files.html}"
    if args.action == "show":
        if args.version is None:
            return await people.champion_history(config, workspace)
        return await people.champion_source(config, workspace, args.version)
    if args.action == "diff":
        return await people.champion_diff(config, workspace, args.version, args.other)
    if args.action == "export":
        return await people.champion_export(config, workspace, args.version, args.out)
    if args.version is None:
        raise ConfigError("swarm champion revert needs a VERSION")
    return await people.control(config, workspace, action="revert", version=args.version)


async def _status(config: SwarmConfig, workspace: Workspace) -> None:
    settings = workspace.read_bus_settings()
    if settings is not None and workspace.is_running():
        nc = await connect(settings, "swarm-status", config.bus.connect_timeout_s)
        try:
            status = await live_status(nc)
        finally:
            await nc.close()
        print(f"swarm: running, workspace {workspace.root}, bus {settings.redacted_url()}")
        if workspace.web_url_file.exists():
            print(f"web view {workspace.web_url_file.read_text().strip()}")
        print(status.line())
        return
    if not workspace.ledger_path.exists():  # an error, as for sql, web and whatif: scripts see it
        raise SwarmError(_no_swarm(workspace))
    counts = counts_from(read_file(workspace, config, COUNTS_SQL))
    print(f"swarm: stopped, workspace {workspace.root}")
    print(" ".join(f"{name}={n}" for name, n in counts.items()))


def _audit(config: SwarmConfig, workspace: Workspace, drained: bool) -> int:
    from swarm.audit import audit_ledger

    if workspace.is_running():
        raise SwarmError(f"a swarm is running on {workspace.root}: stop it, then audit")
    if not workspace.ledger_path.exists():
        raise SwarmError(f"no ledger in {workspace.root}: no swarm has run there")
    report = audit_ledger(workspace.ledger_path, make_ladder(config, workspace.seed_secret()))
    print(report.summary())
    problems = report.problems(drained)
    for problem in problems:
        print(f"  {problem}")
    for note in report.unsent:
        print(f"  note: {note}")
    return 1 if problems else 0


def _as_it_ran(args: argparse.Namespace, config: SwarmConfig, workspace: Workspace) -> SwarmConfig:
    """The config the workspace's swarm last ran with, unless --config names one: what its
    history was made under (target, ladder, recipe), whatever this folder's swarm.toml says."""
    recorded = workspace.run_dir / "swarm.toml"
    if args.config is None and recorded.exists():
        config = config_files.recorded_config(recorded)
        ladder = workspace.run_dir / "ladder.toml"  # its ladder as it ran (a copy made at start)
        if ladder.exists():
            config = with_overrides(config, "ladder", path=str(ladder))
    return config


async def _whatif(args: argparse.Namespace, config: SwarmConfig, workspace: Workspace) -> None:
    from swarm import whatif_command as w

    config = _as_it_ran(args, config, workspace)
    if args.command == "calibrate":
        from swarm.calibrate_command import calibrate

        w.check_out(args.out, ".toml", workspace, config)
        print(await calibrate(config, workspace, args.out))
        return
    if args.out is not None:
        w.check_out(args.out, ".parquet", workspace, config)
    answer = await w.whatif(config, workspace, args.ladder, args.sweep)
    print(w.render(answer))
    if args.out is not None:
        print(f"wrote {w.write_parquet(answer, args.out)} rows to {args.out}")


async def _sql(args: argparse.Namespace, config: SwarmConfig, workspace: Workspace) -> None:
    if args.out is not None:
        check_parquet_out(args.out)
    answer = await query(workspace, config, args.query)
    if args.out is not None:
        write_parquet(answer.table, args.out)
        print(f"wrote {answer.table.num_rows} rows to {args.out}")
    else:
        print(FORMATS[args.format](answer.table))
    if answer.truncated:
        print(
            f"swarm: result truncated to {answer.table.num_rows} rows "
            "(add LIMIT, or raise ledger.sql_row_cap)",
            file=sys.stderr,
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
