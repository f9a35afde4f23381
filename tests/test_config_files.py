"""Which config file `swarm` reads from a folder, what its paths are relative to, the built-in
defaults it falls back on, `swarm init`, and follow-up commands that work as typed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scale_ladder.tiers import load_ladder
from swarm import config_files
from swarm.cli import configure
from swarm.cli_args import build_parser
from swarm.config import ConfigError, SwarmConfig, load_config
from swarm.config_files import BUILT_IN, InitRefused, init_folder
from swarm.follow_up import swarm_command, swarm_program
from swarm.ladder_process import make_ladder
from tests.nanogpt_project import write_project


def configured(folder: Path, *argv: str) -> tuple[SwarmConfig, Path]:
    """`swarm ARGV` as configured from `folder`: its config and workspace."""
    args = build_parser().parse_args([*argv] or ["status"])
    cwd = Path.cwd()
    try:
        os.chdir(folder)
        config, workspace = configure(args)
    finally:
        os.chdir(cwd)
    return config, workspace.root


def test_the_built_in_config_is_the_defaults() -> None:
    assert load_config(BUILT_IN / "swarm.toml") == SwarmConfig()


def test_an_empty_folder_gets_the_built_in_files(tmp_path: Path) -> None:
    config, workspace = configured(tmp_path)
    assert workspace == tmp_path / "swarm-workspace"
    assert Path(config.ladder.path) == BUILT_IN / "ladder.toml"
    assert Path(config.agents.program) == BUILT_IN / "program.md"
    assert Path(config.llm.prices) == BUILT_IN / "llm_prices.toml"
    assert Path(config.agents.strategies) == BUILT_IN / "strategies"
    assert Path(config.target.project) == tmp_path


def test_a_command_target_gets_the_command_ladder(tmp_path: Path) -> None:
    config, _ = configured(tmp_path, "start", "--target", "command")
    assert Path(config.ladder.path) == BUILT_IN / "ladder-command.toml"
    tiers = load_ladder(Path(config.ladder.path), "command").tiers
    assert [t.budget_kind.value for t in tiers] == ["units"] * len(tiers)


@pytest.mark.parametrize("where", ["swarm.toml", "configs/swarm.toml"])
def test_the_folders_own_config_is_found(tmp_path: Path, where: str) -> None:
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text("[agents]\ncount = 7\n")
    config, _ = configured(tmp_path)
    assert config.agents.count == 7


def test_paths_in_a_config_file_are_relative_to_that_file(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "swarm.toml").write_text(
        '[workspace]\npath = "ws"\n[ladder]\npath = "tiers/my.toml"\n[target]\nproject = "."\n'
        '[agents]\nprogram = "direction.md"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config, workspace = configured(elsewhere, "--config", "../project/swarm.toml", "status")
    assert workspace == project / "ws"
    assert Path(config.ladder.path) == project / "tiers" / "my.toml"
    assert Path(config.agents.program) == project / "direction.md"
    assert Path(config.target.project) == project


def test_flags_are_relative_to_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    _, workspace = configured(tmp_path / "sub", "--workspace", "here", "status")
    assert workspace == tmp_path / "sub" / "here"


def test_an_empty_path_takes_the_file_beside_the_config_first(tmp_path: Path) -> None:
    (tmp_path / "swarm.toml").write_text("[agents]\ncount = 1\n")
    (tmp_path / "ladder.toml").write_text((BUILT_IN / "ladder.toml").read_text())
    (tmp_path / "program.md").write_text("find a better learning rate\n")
    config, _ = configured(tmp_path)
    assert Path(config.ladder.path) == tmp_path / "ladder.toml"
    assert Path(config.agents.program) == tmp_path / "program.md"
    assert not config.llm.prices  # none beside it: the built-in one, where it is used
    assert config_files.built_in(config, "llm", "prices") == BUILT_IN / "llm_prices.toml"


@pytest.mark.parametrize("target", ["bytelm", "synthetic"])  # every target --target offers
def test_init_writes_editable_copies_that_load(tmp_path: Path, target: str) -> None:
    written = init_folder(tmp_path, target)
    assert sorted(p.name for p in written) == ["ladder.toml", "program.md", "swarm.toml"]
    config, workspace = configured(tmp_path)
    assert config.target.kind == target and workspace == tmp_path / "swarm-workspace"
    assert Path(config.ladder.path) == tmp_path / "ladder.toml"
    assert Path(config.agents.program) == tmp_path / "program.md"
    make_ladder(config)  # a valid ladder for the target


def test_init_for_a_command_target_writes_its_flags_into_the_config(tmp_path: Path) -> None:
    write_project(tmp_path)
    values = {
        "edit": "train.py",
        "run": 'python train.py --seed={seed} --note="a \\"quoted\\" word"',
        "metric": "val_loss",
        "metric_from": "regex",
        "metric_regex": r"val loss ([0-9.]+)",
        "fixed": "eval_*, out_dir",
    }
    init_folder(tmp_path, "command", values=values)
    config, _ = configured(tmp_path)
    t = config.target
    assert (t.kind, t.edit, t.run, t.metric, t.metric_from, t.metric_regex) == (
        "command",
        "train.py",
        values["run"],
        "val_loss",
        "regex",
        values["metric_regex"],
    )
    assert t.fixed == "eval_*, out_dir"
    assert Path(t.project) == tmp_path
    assert load_ladder(Path(config.ladder.path), "command").tiers  # the command ladder


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "ladder.toml").write_text("mine\n")
    with pytest.raises(InitRefused, match=r"ladder.toml already in .*--force"):
        init_folder(tmp_path, "bytelm")
    assert (tmp_path / "ladder.toml").read_text() == "mine\n"
    assert not (tmp_path / "swarm.toml").exists()
    init_folder(tmp_path, "bytelm", force=True)
    assert (tmp_path / "ladder.toml").read_text() != "mine\n"


def test_a_relative_workspace_in_a_dumped_config_stays_put(tmp_path: Path) -> None:
    """Child processes read the config the supervisor dumped into the workspace: its paths are
    absolute, so they mean the same there."""
    from swarm.config import dump_config

    (tmp_path / "swarm.toml").write_text('[workspace]\npath = "ws"\n')
    config, _ = configured(tmp_path)
    dumped = tmp_path / "ws" / "run" / "swarm.toml"
    dumped.parent.mkdir(parents=True)
    dumped.write_text(dump_config(config))
    again, workspace = configured(tmp_path / "ws", "--config", str(dumped), "status")
    assert workspace == tmp_path / "ws" and again.ladder.path == config.ladder.path


def test_follow_up_commands_name_the_program_as_it_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = tmp_path / ".venv" / "bin" / "swarm"
    monkeypatch.setattr(sys, "argv", [str(program), "start"])
    monkeypatch.setenv("PATH", "/nonexistent")  # not on PATH: the hint must give its path
    assert swarm_program(tmp_path) == ".venv/bin/swarm"
    assert swarm_command(tmp_path / "swarm-workspace", tmp_path) == ".venv/bin/swarm"
    other = swarm_command(tmp_path / "runs" / "a b", tmp_path)
    assert other == ".venv/bin/swarm --workspace 'runs/a b'"
    assert swarm_program(tmp_path / "sub") == str(program)  # outside it: the full path


def test_follow_up_commands_say_swarm_when_path_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = tmp_path / "bin" / "swarm"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(program)])
    monkeypatch.setenv("PATH", str(program.parent))
    assert swarm_program(tmp_path) == "swarm"


def test_the_packaged_defaults_ship_every_file_the_config_names() -> None:
    for name in ("swarm.toml", "ladder.toml", "ladder-command.toml", "program.md"):
        assert (BUILT_IN / name).is_file(), name
    assert sorted(p.stem for p in (BUILT_IN / "strategies").glob("*.md")) == [
        "ablator",
        "combiner",
        "exploiter",
        "explorer",
    ]
    assert config_files.ladder_name("command") == "ladder-command.toml"


# --- what a red team found ----------------------------------------------------------------


def test_text_outside_ascii_survives_init_and_the_dumped_config(tmp_path: Path) -> None:
    from swarm.config import dump_config

    init_folder(tmp_path, "command", values={"run": "python train.py --tag=🚀 --seed={seed}"})
    config, _ = configured(tmp_path)
    assert config.target.run == "python train.py --tag=🚀 --seed={seed}"
    dumped = tmp_path / "dumped.toml"
    dumped.write_text(dump_config(config))
    assert load_config(dumped).target.run == config.target.run


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_number_that_is_not_finite_is_refused(tmp_path: Path, value: str) -> None:
    (tmp_path / "swarm.toml").write_text(f"[llm]\nmax_usd = {value}\n")
    with pytest.raises(ConfigError, match=r"llm\.max_usd must be a finite number"):
        configured(tmp_path)


def test_a_folder_given_as_the_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        configured(tmp_path, "--config", str(tmp_path), "status")


def test_the_workspace_cannot_be_the_project(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is the project folder itself"):
        configured(tmp_path, "--workspace", ".", "run", "--tier", "0", "--target", "command")


def test_init_never_writes_through_a_link(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "program.md").symlink_to(precious)
    (folder / "swarm.toml").symlink_to(tmp_path / "dangling")
    with pytest.raises(InitRefused, match="already in"):
        init_folder(folder, "bytelm")
    with pytest.raises(InitRefused, match="not a plain file"):
        init_folder(folder, "bytelm", force=True)
    assert precious.read_text() == "mine\n" and not (tmp_path / "dangling").exists()


def test_init_in_a_folder_it_cannot_write_says_so(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(InitRefused, match="cannot write"):
            init_folder(tmp_path, "bytelm")
    finally:
        tmp_path.chmod(0o700)


def test_init_warns_of_a_script_the_run_command_names_that_is_not_there(tmp_path: Path) -> None:
    """A typo in the run command fails every run; `swarm init` names it before any does."""
    write_project(tmp_path)
    assert config_files.missing_scripts("python trian.py --seed={seed} --out=x.py", tmp_path) == [
        "trian.py"
    ]
    assert config_files.missing_scripts("python train.py --seed={seed}", tmp_path) == []
    assert config_files.missing_scripts("bash 'run me.sh", tmp_path) == []  # left to the config
