"""Where the swarm's files come from, so `swarm` works from any folder.

The config file is `--config`, else `swarm.toml` in the current folder, else
`configs/swarm.toml` there (a checkout), else the one shipped in the package (configs/). Inside a
config file, relative paths are relative to that file. An empty ladder, program, strategies or
prices path means the file of the default name beside the config file if there is one, else the
built-in one; an empty workspace means `swarm-workspace` in the current folder, an empty
project the current folder. `swarm init` writes editable copies into a folder.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path

import configs
from swarm.config import SwarmConfig, load_config, with_overrides
from swarm.corpus_choice import AUTO_DATA, SECRET_DATA, STDLIB_DATA

BUILT_IN = Path(configs.__file__).parent
CONFIG_NAME = "swarm.toml"
FOLDER_CONFIGS = (Path(CONFIG_NAME), Path("configs") / CONFIG_NAME)
DEFAULT_WORKSPACE = "swarm-workspace"

# Keys holding a path, by section: relative values in a file are relative to that file.
PATH_KEYS = {
    "workspace": ("path",),
    "bus": (
        "creds_file",
        "tls_ca",
        "tls_cert",
        "tls_key",
        "server_tls_cert",
        "server_tls_key",
        "server_tls_client_ca",
    ),
    "target": ("data", "project"),
    "ladder": ("path",),
    "agents": ("program", "strategies"),
    "llm": ("prices",),
}


# Values of path keys that name no file: the built-in corpora (a file of that name: `./secret`).
NOT_PATHS = {("target", "data", v) for v in (SECRET_DATA, STDLIB_DATA, AUTO_DATA)}


def ladder_name(target: str) -> str:
    return "ladder-command.toml" if target == "command" else "ladder.toml"


# Files an empty path stands for: (section, key) -> its default name for a target.
DEFAULT_FILES: dict[tuple[str, str], Callable[[str], str]] = {
    ("ladder", "path"): ladder_name,
    ("agents", "program"): lambda t: "program-command.md" if t == "command" else "program.md",
    ("agents", "strategies"): lambda _: "strategies",
    ("llm", "prices"): lambda _: "llm_prices.toml",
}


def find_config(explicit: Path | None, folder: Path) -> Path:
    """The config file to load (its existence is the loader's to check when given)."""
    if explicit is not None:
        return explicit
    for name in FOLDER_CONFIGS:
        if (folder / name).is_file():
            return folder / name
    return BUILT_IN / CONFIG_NAME


def absolute_paths(config: SwarmConfig, base: Path) -> SwarmConfig:
    """Every relative path made absolute against `base` (empty ones stay empty)."""
    for section, keys in PATH_KEYS.items():
        values = getattr(config, section)
        given = {
            key: str((base / Path(value).expanduser()).resolve())
            for key in keys
            if (value := getattr(values, key)) and (section, key, value) not in NOT_PATHS
        }
        config = with_overrides(config, section, **given)
    return config


def with_defaults(config: SwarmConfig, config_file: Path, cwd: Path) -> SwarmConfig:
    """Empty paths filled: files beside the config file (for the final target), the workspace
    and the project in the current folder; what stays empty means built in (`built_in`)."""
    beside = config_file.resolve().parent
    for (section, key), name in DEFAULT_FILES.items():
        if not getattr(getattr(config, section), key):
            candidate = beside / name(config.target.kind)
            if candidate.exists():
                config = with_overrides(config, section, **{key: str(candidate)})
    if not config.workspace.path:
        config = with_overrides(config, "workspace", path=str(cwd / DEFAULT_WORKSPACE))
    if not config.target.project:
        config = with_overrides(config, "target", project=str(cwd))
    return config


def recorded_config(path: Path) -> SwarmConfig:
    """The config a workspace recorded (`run/swarm.toml`). It names the built-in files by their
    paths in the install that ran it; one that no longer exists there (the swarm was
    reinstalled or upgraded elsewhere since) is this install's built-in file."""
    config = load_config(path)
    for (section, key), name in DEFAULT_FILES.items():
        value = Path(getattr(getattr(config, section), key) or ".")
        named = value.name == name(config.target.kind) and value.parent.name == BUILT_IN.name
        if named and not value.exists():
            config = with_overrides(config, section, **{key: ""})
    return config


def built_in(config: SwarmConfig, section: str, key: str) -> Path:
    """The path a key names, or its built-in file when it is empty."""
    value = getattr(getattr(config, section), key)
    return Path(value) if value else BUILT_IN / DEFAULT_FILES[(section, key)](config.target.kind)


def ladder_path(config: SwarmConfig) -> Path:
    return built_in(config, "ladder", "path")


# What `swarm init` copies besides swarm.toml: the key's built-in file for the target, under the
# name the written swarm.toml points at.
INIT_TARGETS = ("bytelm", "command", "synthetic")  # what --target offers
SCRIPT_SUFFIXES = (".py", ".sh")  # a run command's words that name a file of the project
INIT_FILES = {("ladder", "path"): "ladder.toml", ("agents", "program"): "program.md"}


class InitRefused(ValueError):
    pass


def init_folder(
    folder: Path, target: str, force: bool = False, values: Mapping[str, str] | None = None
) -> list[Path]:
    """Editable copies of the defaults in `folder`: swarm.toml (pointing at the others, with
    `values` as its [target] keys), the ladder for `target` and the research direction.
    Refuses to overwrite a file without `force`."""
    if target not in INIT_TARGETS:
        choices = ", ".join(INIT_TARGETS)
        raise InitRefused(f"swarm init: --target must be one of {choices}, got {target!r}")
    written = [(folder / CONFIG_NAME, init_config(target, values or {}))]
    written += [
        (folder / name, (BUILT_IN / DEFAULT_FILES[key](target)).read_text())
        for key, name in INIT_FILES.items()
    ]
    existing = [path for path, _ in written if path.exists() or path.is_symlink()]
    if existing and not force:
        names = ", ".join(p.name for p in existing)
        raise InitRefused(f"swarm init: {names} already in {folder}; pass --force to overwrite")
    links = [p.name for p in existing if p.is_symlink() or not p.is_file()]
    if links:  # --force replaces files, never writes through a link or over a folder
        raise InitRefused(f"swarm init: {', '.join(links)} in {folder}: not a plain file")
    try:
        for path, text in written:
            path.write_text(text)
    except OSError as exc:
        raise InitRefused(f"swarm init: cannot write in {folder}: {exc}") from None
    return [path for path, _ in written]


def missing_scripts(run: str, project: Path) -> list[str]:
    """The files the run command names by a relative path with a script's suffix (`train.py`)
    that are not in `project`: a typo there fails every run, the champion's first."""
    try:
        words = shlex.split(run)
    except ValueError:  # unbalanced quotes: the config's own check says so
        return []
    named = [w for w in words if w.endswith(SCRIPT_SUFFIXES) and "{" not in w and "=" not in w]
    return [w for w in named if not Path(w).is_absolute() and not (project / w).exists()]


def init_config(target: str, values: Mapping[str, str]) -> str:
    """The built-in swarm.toml with its target, the copied files and `values` filled in."""
    keys: dict[str, dict[str, str]] = {
        "workspace": {"path": DEFAULT_WORKSPACE},
        "target": {"kind": target},
        **{section: {key: name} for (section, key), name in INIT_FILES.items()},
    }
    if target == "command":
        edit = values.get("edit", "train.py")
        keys["target"] |= {
            "project": ".",
            "edit": edit,
            "run": f"python {edit} --seed={{seed}}",
            "metric": "val_loss",
        }
    keys["target"] |= values
    return _set_keys((BUILT_IN / CONFIG_NAME).read_text(), keys)


def _set_keys(text: str, keys: Mapping[str, Mapping[str, str]]) -> str:
    """`text` (TOML) with each `key = ...` line of each [section] set to a new string value."""
    lines, section, left = text.split("\n"), "", {s: dict(k) for s, k in keys.items()}
    for i, line in enumerate(lines):
        if line.startswith("["):
            section = line.strip("[] ")
            continue
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.startswith("#") and key in left.get(section, {}):
            # A JSON string is a TOML basic string (same escapes).
            lines[i] = f"{key} = {json.dumps(left[section].pop(key), ensure_ascii=False)}"
    missing = [f"{s}.{k}" for s, rest in left.items() for k in rest]
    if missing:  # the shipped file lost a key this function fills
        raise AssertionError(f"configs/swarm.toml has no {', '.join(missing)}")
    return "\n".join(lines)


def load(explicit: Path | None, cwd: Path) -> tuple[SwarmConfig, Path]:
    """The config file for `cwd` (or `explicit`), its relative paths made absolute, and where it
    was found."""
    path = find_config(explicit, cwd)
    return absolute_paths(load_config(path), path.resolve().parent), path
