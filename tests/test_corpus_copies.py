"""No copy of the bytelm corpus, train or val, is readable from inside the sandbox (issue 16).

Outside the sandbox, the test finds every file on this machine whose text overlaps the corpus
(8-line windows, so another Python version's near copy counts); a real sandboxed experiment then
tries to open each one and to list the folders that hold them. A red team had read such copies
in /usr/lib/python3.11 (the system Python beside a pyenv one) and built an n-gram from them.
"""

from __future__ import annotations

import base64
import os
import site
import sys
import sysconfig
import zlib
from collections.abc import Iterable
from pathlib import Path

import pytest

from bus.messages import RunStatus
from tests.training_helpers import inject, run
from training import corpus as corpus_module
from training.corpus import Corpus
from training.corpus_modules import corpus_module as corpus_entry
from training.readable_paths import python_read_paths, shared_libraries, without_corpus

WINDOW = 8  # lines per window; blank and very short lines are dropped (they vary between copies)
COPY_WINDOWS = 32  # a file sharing this many corpus windows (~40 lines) holds a copy
MAX_FILE_BYTES = 4 << 20
# Where Pythons and their packages live, besides the interpreter's own install.
SYSTEM_ROOTS = ("/usr/lib", "/usr/lib64", "/usr/local", "/lib", "/lib64", "/opt", "/usr/share")


def _windows(text: bytes) -> set[int]:
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if len(line) > 3]
    return {hash(tuple(lines[i : i + WINDOW])) for i in range(len(lines) - WINDOW + 1)}


def _python_files(roots: Iterable[Path]) -> Iterable[Path]:
    """Every `.py` file under `roots`, once each however many names it has."""
    seen: set[tuple[int, int]] = set()
    for root in roots:
        for folder, _, files in os.walk(root):
            for path in (Path(folder, name) for name in files if name.endswith(".py")):
                try:
                    stat = path.stat()
                except OSError:
                    continue
                if stat.st_size <= MAX_FILE_BYTES and (stat.st_dev, stat.st_ino) not in seen:
                    seen.add((stat.st_dev, stat.st_ino))
                    yield path


def _search_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    roots = {Path(paths["stdlib"]), Path(sys.prefix), Path(sys.base_prefix)}
    roots |= {Path(paths["purelib"]), *map(Path, site.getsitepackages()), *map(Path, SYSTEM_ROOTS)}
    roots.add(Path(corpus_module.__file__).parent)  # the `training` package is readable too
    versions = Path(sys.base_prefix).parent  # pyenv's or conda's other Pythons
    if len(versions.parts) >= 3:
        roots.add(versions)
    return sorted(root for root in roots if root.is_dir())


def corpus_copies() -> list[Path]:
    """Every `.py` file on this machine that holds a copy of corpus text, the corpus's own
    files included. Windows the corpus shares with the rest of the interpreter's stdlib (which
    the experiment reads anyway: a licence text) do not count."""
    train, val, stdlib = corpus_module.stdlib_files()
    corpus = set().union(*(_windows(path.read_bytes()) for path in [*train, *val]))
    rest = (p for p in _python_files([stdlib]) if not corpus_entry(p.relative_to(stdlib).parts[0]))
    shared = set().union(*(_windows(path.read_bytes()) & corpus for path in rest))
    assert len(shared) < len(corpus) / 200, "much of the corpus is in files the experiment reads"
    corpus -= shared
    copies = []
    for path in _python_files(_search_roots()):
        try:
            windows = _windows(path.read_bytes())
        except OSError:
            continue
        common = len(windows & corpus)
        if common >= COPY_WINDOWS or (common >= 2 and common * 2 >= len(windows)):
            copies.append(path.resolve())  # /lib/python3.11 is /usr/lib/python3.11
    return copies


def _named_copies() -> list[Path]:
    """Corpus modules found by name in other Pythons' standard libraries: what the search by
    content must find too (/usr/lib/python3.11 beside a pyenv or venv Python, ...)."""
    own = Path(sysconfig.get_paths()["stdlib"]).resolve()
    stdlibs = [p for root in SYSTEM_ROOTS for p in Path(root).glob("python3*")]
    stdlibs += Path(sys.base_prefix).parent.glob("*/lib/python3*")
    return [
        entry
        for stdlib in stdlibs
        if stdlib.is_dir() and stdlib.resolve() != own
        for entry in stdlib.iterdir()
        if corpus_entry(entry.name)
    ]


# Runs at the start of train(): tries every path it is given; prints the ones it could read.
PROBE = """import base64, os, zlib
paths = zlib.decompress(base64.b64decode({blob!r})).decode().split("\\n")
for path in paths:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        print("READABLE", path)
    except OSError:
        pass
print("CHECKED", len(paths))"""


@pytest.mark.timeout(600)
def test_no_copy_of_the_corpus_is_readable(corpus: Corpus, tmp_path: Path) -> None:
    copies = corpus_copies()
    train, val, stdlib = corpus_module.stdlib_files()
    own = {path.resolve() for path in [*train, *val]}
    # The search finds the corpus itself (but files of a few lines, too short to tell)...
    assert {path for path in own if len(_windows(path.read_bytes())) >= COPY_WINDOWS} <= set(copies)
    for entry in _named_copies():  # ...and every other Python's copy, where the machine has one
        files = [entry] if entry.is_file() else list(entry.rglob("*.py"))
        assert not files or {f.resolve() for f in files} & set(copies), entry
    others = [path for path in copies if not path.is_relative_to(stdlib.resolve())]
    assert others or not _named_copies()
    # No folder granted holds a copy (a granted link grants its target).
    holders = {parent for path in copies for parent in [path, *path.parents]}
    granted = [path for path in python_read_paths() if path.resolve() in holders]
    assert not granted, granted
    # Tried from inside: each copy, the folders that hold them, and the corpus's cache.
    cache = tmp_path / "cache"
    corpus_module.load_corpus(cache)
    probe = sorted({*map(str, [*copies, *own]), *(str(p.parent) for p in [*copies, *own])})
    probe += [str(path) for path in cache.rglob("*.bin")]
    blob = base64.b64encode(zlib.compress("\n".join(probe).encode(), 9)).decode()
    result = run(corpus, tmp_path / "scratch", inject(PROBE.format(blob=blob)), log_dir=tmp_path)
    log = (tmp_path / f"{result.run_id}.log").read_text()
    assert result.status == RunStatus.OK, (result.reason, result.log_tail)
    assert f"CHECKED {len(probe)}" in log and "READABLE" not in log, log[-3000:]


def test_a_stdlib_is_granted_without_its_corpus_modules(tmp_path: Path) -> None:
    """A container's /usr/local/lib/python3.X or a system /usr/lib/python3.X: its entries, less
    the corpus modules and their compiled forms."""
    stdlib = tmp_path / "python3.11"
    for name in ("os.py", "turtle.py", "json/__init__.py", "xmlrpc/client.py", "lib-dynload/x.so"):
        (stdlib / name).parent.mkdir(parents=True, exist_ok=True)
        (stdlib / name).write_text("")
    cache = stdlib / "__pycache__"
    cache.mkdir()
    for name in ("os.cpython-311.pyc", "turtle.cpython-311.pyc", "pydoc.cpython-311.opt-1.pyc"):
        (cache / name).write_text("")
    (stdlib / "site-packages").mkdir()
    granted = {p.relative_to(stdlib).as_posix() for p in without_corpus(stdlib)}
    assert granted == {"os.py", "json", "lib-dynload", "__pycache__/os.cpython-311.pyc"}
    assert without_corpus(stdlib / "json") == [stdlib / "json"]  # nothing to leave out


def test_shared_libraries_are_granted_file_by_file(tmp_path: Path) -> None:
    """A loader folder (/usr/local/lib) that also holds a Python is never granted whole."""
    lib = tmp_path / "lib"
    (lib / "python3.11" / "xmlrpc").mkdir(parents=True)
    (lib / "libpython3.11.so.1.0").write_text("")
    (lib / "libcuda.so.1").symlink_to("libpython3.11.so.1.0")
    (lib / "README").write_text("")
    cached = tmp_path / "other" / "libnvidia.so.1"
    cached.parent.mkdir()
    cached.write_text("")
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libnvidia.so.1\0" + str(cached).encode() + b"\0")
    maps = tmp_path / "maps"
    maps.write_text(f"7f0-7f1 r-xp 00000000 00:1f 42 {lib}/libpython3.11.so.1.0\n")
    granted = shared_libraries([lib], cache, maps)
    assert granted == sorted([lib / "libcuda.so.1", lib / "libpython3.11.so.1.0", cached])
