"""How much the text an experiment can reach says about bytelm's held-out split.

    python -m bench.readable_text

The sandbox keeps every copy of the corpus out of reach (training/readable_paths.py), but an
experiment runs Python: it reads the interpreter's other modules to import them, and once torch
is imported its process holds torch's docstrings, names and string constants in memory. All of
that is text of the corpus's kind. The measure is xz's: the bits per byte it spends on 400 KB of
the val split alone, and after each source as a preset dictionary (the difference of two
compressed sizes). What no sandbox rule can take away is the last row: the text the process
holds in memory once torch is imported, which a training process must do.
"""

from __future__ import annotations

import gc
import lzma
import random
import site
import sysconfig
import types
import warnings
from pathlib import Path

import torch
import torch._dynamo
import torch.optim  # what the zygote imports (training/zygote.py)

from training.corpus import build
from training.corpus_modules import corpus_module

SOURCE_BYTES = 9 << 20  # each source's share, as in docs/reliability.md's figures
VAL_BYTES = 400_000
FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 64 << 20}]


def bits_per_byte(text: bytes, before: bytes = b"") -> float:
    """xz's cost of `text` after `before`, in bits per byte of `text`."""
    both = len(lzma.compress(before + text, filters=FILTERS))
    alone = len(lzma.compress(before, filters=FILTERS)) if before else 0
    return (both - alone) * 8 / len(text)


def python_files(suffix: str) -> list[Path]:
    """Every file with `suffix` under the stdlib and site-packages, less the corpus modules,
    in a fixed random order."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), *map(Path, site.getsitepackages())]
    found = [
        p
        for root in roots
        for p in root.rglob(f"*{suffix}")
        if not corpus_module(p.relative_to(root).parts[0])
    ]
    random.Random(0).shuffle(found)
    return found


def first_bytes(files: list[Path], n: int) -> bytes:
    out = bytearray()
    for f in files:
        try:
            out += f.read_bytes()
        except OSError:
            continue
        if len(out) >= n:
            break
    return bytes(out[:n])


def strings_in_memory() -> bytes:
    """The strings this process holds after importing torch: docstrings, names, constants."""
    seen: set[int] = set()
    out: list[str] = []

    def add(s: object) -> None:
        if isinstance(s, str) and len(s) > 3 and id(s) not in seen:
            seen.add(id(s))
            out.append(s)

    def code(c: types.CodeType) -> None:
        add(c.co_name)
        for k in c.co_consts:
            code(k) if isinstance(k, types.CodeType) else add(k)
        for name in c.co_names:
            add(name)

    warnings.simplefilter("ignore")  # touching deprecated modules' attributes warns
    for o in gc.get_objects():
        if isinstance(o, types.FunctionType):
            add(o.__doc__)
            code(o.__code__)
        elif isinstance(o, type | types.ModuleType):
            add(o.__doc__)
    return "\n".join(out).encode("utf-8", "replace")


def main() -> None:
    train, val, _, _ = build(None)
    val = val[:VAL_BYTES]
    held = strings_in_memory()
    print(f"torch {torch.__version__}; {len(held) / 2**20:.1f} MiB of strings in memory")
    print("| what xz has seen first | bits per byte of the val split |")
    print("|---|---|")
    print(f"| nothing | {bits_per_byte(val):.3f} |")
    sources = {
        "9 MiB of the readable .py files (other modules, site-packages)": lambda: first_bytes(
            python_files(".py"), SOURCE_BYTES
        ),
        "9 MiB of their compiled .pyc files": lambda: first_bytes(
            python_files(".pyc"), SOURCE_BYTES
        ),
        "2 MiB of the train split (what a run is sent)": lambda: train[: 2 << 20],
        "the strings a process holds once torch is imported (9 MiB)": lambda: held[:SOURCE_BYTES],
    }
    for name, text in sources.items():
        print(f"| {name} | {bits_per_byte(val, text()):.3f} |")


if __name__ == "__main__":
    main()
