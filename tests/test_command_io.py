"""A command target as real projects need it: placeholders and SWARM_* variables in, the metric
out (line, regular expression, JSON), free-form dials per tier, the swarm's own python, every
run's log kept, and a workspace inside the project never copied into its runs."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from bus.messages import BudgetKind, RunResult, RunSpec, RunStatus
from scale_ladder.tiers import LadderConfigError, load_ladder
from training.command_io import (
    CommandError,
    MetricReader,
    check_placeholders,
    environment,
    placeholders,
    render,
)
from training.runner import RunLimits
from training.targets import CommandTarget

COMMAND_LADDER = """
[[tier]]
name = "small"
budget = 300
time_limit_s = 60
seeds = 2
[tier.dials]
n_layer = 2
dataset = "shakespeare char"
compile = false
lr_scale = 0.5
"""


def spec(dials: dict[str, object] | None = None, seed: int = 7, budget: float = 300) -> RunSpec:
    return RunSpec(
        run_id="run-1",
        tier=1,
        seed=seed,
        champion_version=1,
        budget_kind=BudgetKind.UNITS,
        budget=budget,
        dials=dials or {},  # type: ignore[arg-type]
    )


def test_placeholders_are_filled_and_quoted_for_the_shell() -> None:
    run = spec({"dataset": "a b; rm -rf /", "compile": False, "n_layer": 4})
    command = "python t.py --seed={seed} --iters={budget} --data={dataset} --compile={compile}"
    rendered = render(command, run)
    assert shlex.split(rendered) == [
        "python",
        "t.py",
        "--seed=7",
        "--iters=300",  # a whole budget is written as an int
        "--data=a b; rm -rf /",  # one word: the shell never sees the `;`
        "--compile=false",
    ]


def test_shell_variables_and_doubled_braces_are_left_to_the_shell() -> None:
    command = "echo ${HOME} {{seed}} $HOME {seed} {x-y}"
    assert placeholders(command) == {"seed"}
    assert render(command, spec()) == "echo ${HOME} {seed} $HOME 7 {x-y}"


def test_an_unknown_placeholder_is_refused_naming_it_and_the_tier() -> None:
    tiers = [("small", {"n_layer": 2}), ("large", {})]
    check_placeholders("python t.py --seed={seed} --n_layer={n_layer}", tiers[:1])
    with pytest.raises(CommandError, match=r"\{n_layer\} is neither .* tier 'large'"):
        check_placeholders("python t.py --n_layer={n_layer}", tiers)
    with pytest.raises(CommandError, match=r"\{sed\}"):
        check_placeholders("python t.py --seed={sed}", tiers[:1])


def test_the_environment_carries_seed_budget_and_each_dial() -> None:
    env = environment(spec({"n_layer": 4, "dataset": "x"}), "cpu")
    assert env["SWARM_SEED"] == "7" and env["SWARM_BUDGET"] == "300"
    assert env["SWARM_BUDGET_KIND"] == "units" and env["SWARM_TIER"] == "1"
    assert env["SWARM_DIAL_N_LAYER"] == "4" and env["SWARM_DIAL_DATASET"] == "x"
    assert json.loads(env["SWARM_DIALS"]) == {"n_layer": 4, "dataset": "x"}


OUTPUT = """step 0: train loss 4.8676, val loss 4.8637
{"val_loss": 9.5, "step": 0}
step 300: train loss 2.4950, val loss 2.4336
{"val_loss": 2.5, "step": 300}
val_loss: 2.75
done
"""


@pytest.mark.parametrize(
    ("reader", "value"),
    [
        (MetricReader("val_loss"), 2.75),
        (MetricReader("val_loss", "regex", r"val loss ([0-9.]+)"), 2.4336),
        (MetricReader("val_loss", "json"), 2.5),
        (MetricReader("step", "json"), 300.0),
    ],
)
def test_the_metric_is_read_the_last_one_winning(reader: MetricReader, value: float) -> None:
    reader.check()
    assert reader.read(OUTPUT) == value


@pytest.mark.parametrize(
    ("reader", "output"),
    [
        (MetricReader("val_loss", "regex", r"val loss ([0-9.a-z]+)"), "val loss nan\n"),
        (MetricReader("val_loss", "json"), '{"val_loss": 2.5}\n{"other": 1}\n'),
        (MetricReader("val_loss", "json"), '{"val_loss": true}\n'),
        (MetricReader("val_loss", "json"), '{"val_loss": "2.5"}\n{not json}\n'),
        (MetricReader("val_loss"), "val_loss: inf\n"),
    ],
)
def test_no_usable_metric_is_none(reader: MetricReader, output: str) -> None:
    assert reader.read(output) is None
    assert reader.expected()


@pytest.mark.parametrize(
    ("reader", "reason"),
    [
        (MetricReader("m", "regex", "val (loss"), "not a regular expression"),
        (MetricReader("m", "regex", r"val loss [0-9.]+"), "exactly one group"),
        (MetricReader("m", "regex", r"(val) loss ([0-9.]+)"), "exactly one group.*has 2"),
        (MetricReader("m", "line", r"val loss ([0-9.]+)"), 'metric_from = "regex"'),
        (MetricReader(""), "needs a name"),
    ],
)
def test_a_bad_metric_setting_names_the_key(reader: MetricReader, reason: str) -> None:
    with pytest.raises(CommandError, match=reason):
        reader.check()


def test_a_command_ladder_takes_free_form_dials_and_its_own_unit(tmp_path: Path) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(COMMAND_LADDER)
    (tier,) = load_ladder(path, "command").tiers
    assert tier.budget_kind is BudgetKind.UNITS and tier.budget == 300
    assert dict(tier.dials) == {
        "n_layer": 2,
        "dataset": "shakespeare char",
        "compile": False,
        "lr_scale": 0.5,
    }
    assert tier.run_spec("r", 0, target="command").dials == tier.dials


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("depth = 2\n[tier.dials]\ndepth = 3\n", "depth is given twice"),
        ("width = 2.5\n", "width must be int"),
        ('budget_kind = "epochs"\n', "budget_kind must be 'tokens' or 'seconds' or 'units'"),
        ("[tier.dials]\nseed = 3\n", "'seed' cannot be a dial name"),
        ('[tier.dials]\n"n-layer" = 3\n', "'n-layer' cannot be a dial name"),
        ("[tier.dials]\nsizes = [1, 2]\n", "dials.sizes must be a number"),
    ],
)
def test_command_ladder_mistakes_are_named(tmp_path: Path, change: str, reason: str) -> None:
    path = tmp_path / "ladder.toml"
    head = '[[tier]]\nname = "t"\nbudget = 1\ntime_limit_s = 60\nseeds = 2\n'
    path.write_text(head + change)
    with pytest.raises(LadderConfigError, match=reason):
        load_ladder(path, "command")


def test_a_command_ladder_written_with_bytelms_keys_still_loads(tmp_path: Path) -> None:
    """Ladders written before free-form dials: depth, width and context become dials."""
    path = tmp_path / "ladder.toml"
    path.write_text(
        '[[tier]]\nname = "t"\ndepth = 2\nwidth = 64\ncontext = 64\nbudget_kind = "tokens"\n'
        "budget = 1000\ntime_limit_s = 60\neval_tokens = 4096\nseeds = 2\n"
    )
    (tier,) = load_ladder(path, "command").tiers
    assert dict(tier.dials) == {"depth": 2, "width": 64, "context": 64}
    assert tier.budget_kind is BudgetKind.TOKENS


def test_the_bytelm_ladder_still_demands_its_dials(tmp_path: Path) -> None:
    path = tmp_path / "ladder.toml"
    path.write_text(COMMAND_LADDER)
    with pytest.raises(LadderConfigError, match=r"\[tier.dials\] is for a command target"):
        load_ladder(path, "bytelm")


def run_in(project: Path, command: str, workspace: Path, own_python: bool = True) -> RunResult:
    target = CommandTarget(
        project,
        "train.py",
        command,
        MetricReader("val_loss"),
        own_python=own_python,
        skip=(workspace.resolve(),),
    )
    return target.run(
        spec({"n_layer": 3}),
        target.initial_source(),
        RunLimits(time_limit_s=60),
        workspace / "scratch",
        "cpu",
        "test",
        workspace / "logs" / "runs",
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text("import sys\nprint(sys.executable)\nprint('val_loss: 1.5')\n")
    return folder


def test_python_is_the_swarms_own_interpreter(project: Path, tmp_path: Path) -> None:
    result = run_in(project, "python train.py", tmp_path / "ws")
    assert result.status == RunStatus.OK, result.reason
    # the same interpreter, found in swarm's own folder (python or python3: whichever ran pytest)
    ran = Path(result.log_tail.splitlines()[0])
    assert ran.parent == Path(sys.executable).absolute().parent
    assert ran.resolve() == Path(sys.executable).resolve()


def test_every_run_keeps_its_log(project: Path, tmp_path: Path) -> None:
    result = run_in(project, "python train.py; echo --n_layer={n_layer}", tmp_path / "ws")
    log = (tmp_path / "ws" / "logs" / "runs" / f"{result.run_id}.log").read_text()
    assert "val_loss: 1.5" in log and "--n_layer=3" in log


def test_a_workspace_inside_the_project_is_never_copied(project: Path) -> None:
    workspace = project / "my-runs"  # not a name the copy ignores by itself
    (workspace / "ledger").mkdir(parents=True)
    (workspace / "ledger" / "big.bin").write_bytes(b"x" * 1000)
    (project / "data").mkdir()
    listing = "find . -print | sort; python train.py"
    result = run_in(project, listing, workspace)
    assert result.status == RunStatus.OK, result.reason
    copied = result.log_tail.splitlines()
    assert "./data" in copied and "./train.py" in copied
    assert not any(line.startswith("./my-runs") for line in copied)


# --- what a red team found ----------------------------------------------------------------


def test_a_metric_line_never_spans_lines() -> None:
    """`\\s` spans newlines: the line pattern matched `val_loss:` and a number lines below it,
    and went quadratic on blank lines."""
    assert MetricReader("val_loss").read("val_loss:\n\n\n 2.5\n") is None
    assert MetricReader("val_loss").read("\n" * 100_000 + "val_loss: 2.5\r\n" + "\n" * 10) == 2.5


@pytest.mark.parametrize(
    "line",
    ['{"val_loss": 1' + "0" * 400 + "}", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"],
)
def test_an_unreadable_json_object_is_no_metric_not_a_crash(line: str) -> None:
    assert MetricReader("val_loss", "json").read(f'{{"val_loss": 2.0}}\n{line}\n') in (None, 2.0)


def test_the_project_copy_keeps_links_as_links(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "big-data"
    outside.mkdir()
    (outside / "train.bin").write_bytes(b"x" * 1000)
    (project / "data").symlink_to(outside)
    (project / "loop").symlink_to(project / "loop")  # a loop: copied as what it is
    result = run_in(
        project, "test -L data && cat data/train.bin | wc -c; python train.py", tmp_path / "ws"
    )
    assert result.status == RunStatus.OK, result.reason
    assert result.log_tail.splitlines()[0].strip() == "1000"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("time_limit_s = nan\n", "time_limit_s must be a finite number"),
        ("budget = inf\n", "budget must be a finite number"),
        ('[tier.dials]\nname = "a\\u0000b"\n', "control characters"),
        ("[tier.dials]\nscale = nan\n", "dials.scale must be a finite number"),
    ],
)
def test_a_ladder_refuses_numbers_and_text_a_run_cannot_use(
    tmp_path: Path, change: str, reason: str
) -> None:
    head = '[[tier]]\nname = "t"\nseeds = 2\n'
    rest = {"time_limit_s": "time_limit_s = 60\n", "budget": "budget = 1\n"}
    body = "".join(v for k, v in rest.items() if not change.startswith(k))
    path = tmp_path / "ladder.toml"
    path.write_text(head + body + change)
    with pytest.raises(LadderConfigError, match=reason):
        load_ladder(path, "command")
