"""The command line's grammar: `swarm`'s subcommands and their flags (cli.py acts on them)."""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from swarm.output import FORMATS
from training.sandbox import UNSAFE_FLAG

EXAMPLES = """\
examples:
  swarm init                                    editable swarm.toml, ladder.toml, program.md here
  swarm init --target command --edit train.py --run "python train.py --seed={seed}" \\
             --metric val_loss                  the same for your own project
  swarm start                                   bus + ledger on this machine, live status
  swarm start --agents 4 --minutes 30           4 researchers, stop by itself after 30 minutes
  swarm start --agents 3 --max-experiments 200  stop after 200 experiments
  swarm start --nats nats://hub:4222            join an existing NATS server instead
  swarm status                                  what the swarm in ./swarm-workspace is doing
  swarm sql "select * from leaderboard limit 10"
  swarm sql "select status, count(*) from runs group by all" --format csv
  swarm sql "select * from runs" --out runs.parquet
  swarm run --tier 0                            train and evaluate the champion at tier 0
  swarm run --tier 1 --patch idea.diff --seed 3 the champion plus a patch, by hand
  swarm worker --nats nats://hub:4222 --tiers 2 add a trainer to a running swarm
  swarm agents --nats nats://hub:4222 --count 4 add researchers to a running swarm
  swarm review                                  ideas waiting for approval (require_approval)
  swarm approve idea-3f2a…                      stack it into the champion
  swarm champion show                           the champion's lineage (show 3: v3's recipe)
  swarm champion diff 2 3                       what changed from v2 to v3
  swarm champion export --out best.py           the current champion recipe
  swarm champion revert 2                       make v2's recipe the champion again
  swarm report                                  progress.png and report.html in the workspace
  swarm audit                                   check a stopped swarm's ledger: lost, duplicated
  swarm web                                     the web view of this workspace (start serves it)
  swarm whatif --sweep sigmas=1,2,3             the same history under other promotion settings
  swarm calibrate                               a ladder file from the measured noise, checked
  swarm run --tier 0 --target command --edit train.py --run "python train.py --seed={seed}" \\
            --metric val_loss --metric-regex "val loss ([0-9.]+)"

The ledger's tables and views are documented in README.md (section "The ledger").
Bus credentials can also come from the environment: SWARM_NATS_TOKEN, SWARM_NATS_PASSWORD.
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line. A flag its subcommand does not have is named with that subcommand's
    usage and the nearest flag it has (argparse names it with the top level's usage: a
    newcomer's `swarm start --minuts 3` got `usage: swarm [-h] [--config CONFIG] …`)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = next(
            a.choices[args.command]
            for a in parser._actions  # argparse keeps its subparsers only there
            if isinstance(a, argparse._SubParsersAction)
        )
        known = [flag for action in sub._actions for flag in action.option_strings]
        near = difflib.get_close_matches(extra[0].split("=")[0], known, n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near and extra[0].startswith("-") else ""
        sub.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm",
        description="research-swarm: agents propose changes to one training recipe, test them on "
        "small proxy models, share every result in a DuckDB ledger and promote what helps.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="TOML config (default: ./swarm.toml, else ./configs/swarm.toml, else built in)",
    )
    parser.add_argument(
        "--workspace", type=Path, help="workspace folder (default: ./swarm-workspace)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser(
        "init", help="write editable swarm.toml, ladder.toml and program.md into this folder"
    )
    init.add_argument("--force", action="store_true", help="overwrite files already there")
    _add_target_flags(init)

    start = commands.add_parser("start", help="start the swarm and show live status")
    start.add_argument("--minutes", type=float, help="stop after this many minutes")
    start.add_argument("--trainers", type=int, help="trainer processes (default: one per core)")
    start.add_argument("--agents", type=int, help="researcher agents (default: agents.count)")
    start.add_argument("--max-experiments", type=int, help="stop after this many results")
    start.add_argument("--no-web", action="store_true", help="serve no web view (web.enabled)")
    start.add_argument("--web-port", type=int, help="the web view's port (web.port)")
    _add_brain_flags(start)
    _add_bus_flags(start)
    _add_target_flags(start)
    _add_unsafe_flag(start)

    commands.add_parser("status", help="show what the swarm in the workspace is doing")

    sql = commands.add_parser("sql", help="query the ledger with one read-only SQL statement")
    sql.add_argument("query", help='e.g. "select * from leaderboard"')
    sql.add_argument("--format", choices=sorted(FORMATS), default="table")
    sql.add_argument("--out", type=Path, help="write the result to a .parquet file instead")

    run = commands.add_parser("run", help="run the champion (or champion + patch) at a tier")
    run.add_argument("--tier", type=int, required=True)
    run.add_argument(
        "--patch",
        type=Path,
        help="a unified diff against the editable file, under its name (recipe.py for "
        "bytelm): export the champion to a/recipe.py and b/recipe.py, edit b/recipe.py, then "
        "`diff -u a/recipe.py b/recipe.py > idea.diff`",
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    _add_target_flags(run)
    _add_unsafe_flag(run)

    worker = commands.add_parser("worker", help="run a trainer for a running swarm")
    worker.add_argument("--tiers", default="", help="tiers to serve, e.g. 2,3 (default: all)")
    worker.add_argument("--device", choices=["auto", "cpu", "cuda"])
    _add_bus_flags(worker)
    _add_target_flags(worker)
    _add_unsafe_flag(worker)

    agents = commands.add_parser("agents", help="run researcher agents for a running swarm")
    agents.add_argument("--count", type=int, help="researchers to host (default: agents.count)")
    agents.add_argument("--name", default="", help="name prefix (default: this host's name)")
    _add_brain_flags(agents)
    _add_bus_flags(agents)
    _add_target_flags(agents)

    commands.add_parser("review", help="ideas that passed the top tier and wait for approval")
    for verb in ("approve", "reject"):
        person = commands.add_parser(verb, help=f"{verb} an idea held at the top tier")
        person.add_argument("idea_id")

    champion = commands.add_parser("champion", help="the champion recipe and its history")
    champion.add_argument("action", choices=["show", "diff", "export", "revert"])
    champion.add_argument("version", type=int, nargs="?", help="a champion version")
    champion.add_argument("other", type=int, nargs="?", help="diff: the newer version")
    champion.add_argument("--out", type=Path, help="export: the file to write")

    report = commands.add_parser("report", help="write the progress plot and the HTML report")
    report.add_argument("--out", type=Path, help="folder (default: <workspace>/reports)")

    audit = commands.add_parser(
        "audit", help="check a stopped swarm's ledger for lost or duplicated records"
    )
    audit.add_argument(
        "--drained",
        action="store_true",
        help="it stopped with nothing in flight: count unfinished runs and work a replayed "
        "ladder would still do as problems",
    )

    web = commands.add_parser(
        "web", help="serve the read-only web view of this workspace's swarm, or of --nats URL"
    )
    web.add_argument("--host", help="address to listen on (web.host, loopback by default)")
    web.add_argument("--port", dest="web_port", type=int, help="port (web.port)")
    # `swarm start`'s own web view: says where it listens in the workspace (run/web.url)
    web.add_argument("--of-start", action="store_true", help=argparse.SUPPRESS)
    _add_bus_flags(web)

    whatif = commands.add_parser(
        "whatif", help="decide the recorded history again under other promotion settings"
    )
    whatif.add_argument("--ladder", type=Path, action="append", default=[], help="another file")
    whatif.add_argument("--sweep", help="KEY=V1,V2,... or TIER.KEY=...: one setting per value")
    whatif.add_argument("--out", type=Path, help="also write the answer as a .parquet file")

    calibrate = commands.add_parser(
        "calibrate", help="propose a ladder file from what the swarm measured, checked by whatif"
    )
    calibrate.add_argument("--out", type=Path, default=Path("ladder.calibrated.toml"))

    commands.add_parser("ledger", help="(internal) run the ledger process; started by `start`")
    commands.add_parser("ladder", help="(internal) run the ladder process; started by `start`")
    return parser


def _add_unsafe_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        UNSAFE_FLAG,
        action="store_true",
        default=None,
        help="run experiments even where Landlock or seccomp cannot confine them (they could "
        "then reach anything the trainer can; every result says `unconfined`)",
    )


def _add_target_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("what to optimise (default: target.kind in the config)")
    group.add_argument("--target", choices=["bytelm", "command", "synthetic"])
    group.add_argument(
        "--data",
        help="bytelm: 'secret' (a language drawn from this swarm's secret, of which no experiment "
        "can read a copy), 'stdlib' (the Python stdlib's sources), 'auto' (the default: "
        "secret where a researcher writes code, stdlib where all move constants) or your own "
        "text file or folder",
    )
    group.add_argument("--project", help="command: project folder (default: .)")
    group.add_argument("--edit", help="command: the editable file")
    group.add_argument("--run", dest="run_command", help='command: e.g. "python train.py"')
    group.add_argument("--metric", help="command: the metric's name (read as `name: value`)")
    group.add_argument(
        "--metric-regex",
        metavar="PATTERN",
        help="command: read the metric with this regular expression (one group: the number)",
    )
    group.add_argument(
        "--metric-json", action="store_true", help="command: read it from the last JSON object"
    )
    group.add_argument("--maximize", action="store_true", help="command: higher is better")
    group.add_argument(
        "--fixed",
        metavar="NAMES",
        help='command: constants researchers leave alone, names or globs ("out_dir, eval_*")',
    )
    group.add_argument(
        "--eval",
        dest="eval_command",
        metavar="COMMAND",
        help="command: a second stage that reads the checkpoint in {train_dir} and prints the "
        "metric, from the unpatched project",
    )
    group.add_argument(
        "--held-out",
        metavar="GLOBS",
        help='command: files only --eval may read, e.g. "data/*/test.bin"',
    )


def _add_bus_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("joining an external NATS server")
    group.add_argument("--nats", metavar="URL", help="e.g. nats://host:4222 or tls://host:4222")
    group.add_argument("--nats-user")
    group.add_argument("--nats-creds", metavar="FILE", help="NATS .creds file (JWT + NKey)")
    group.add_argument("--tls-ca", metavar="FILE")
    group.add_argument("--tls-cert", metavar="FILE")
    group.add_argument("--tls-key", metavar="FILE")


def _add_brain_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--brain",
        help="tpe | gp | heuristic | portfolio | anthropic | openai, or groups like "
        "anthropic:6,tpe:2 (default: agents.brain, tpe)",
    )
    parser.add_argument(
        "--max-llm-usd", type=float, help="stop LLM proposals once they cost this much in all"
    )
    parser.add_argument(
        "--screen",
        type=int,
        metavar="N",
        help="heuristic and LLM researchers draw N candidates per idea and send the one a "
        "Gaussian process rates best (default: agents.screen, 1 = off)",
    )
