"""The bytelm corpus: bytes of text files, split into train and val by file.

Default source: the `.py` files of the running interpreter's standard library that no experiment
needs to read (corpus_modules.CORPUS_MODULES: idlelib, tkinter, turtle, pydoc, xmlrpc, ...), in
sorted order; nothing is downloaded. Val = the files of a fixed few of them (VAL_MODULES),
train = the rest. Neither split is readable from inside the sandbox, in any copy: the experiment
gets exactly the batches the runner sends (readable_paths.py says how every copy on disk is
denied; tests/test_corpus_copies.py proves it on the machine it runs on). `--data PATH` uses the
user's own text file (last 10% is val) or folder (every 10th file, sorted, is val).
`--data secret` uses text in a language drawn from the swarm's secret (secret_language.py),
of which nothing on the machine holds a copy.

Built once and cached in the workspace as raw uint8 files with a manifest; the corpus hash
(over file names and contents) is recorded with every result.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from training import secret_language
from training.corpus_modules import CORPUS_MODULES, VAL_MODULES, corpus_module

TRAIN_CAP_BYTES = 24 * 1024 * 1024
# The secret language's splits: the top tier's token budget (900k) is about a tenth of the
# train split, so no run sees a byte twice; val holds the tiers' eval windows many times over.
SECRET_TRAIN_BYTES = 8 * 1024 * 1024
SECRET_VAL_BYTES = 1024 * 1024
SKIPPED_DIRS = {"site-packages", "test", "tests", "__pycache__", "idle_test"}

if TYPE_CHECKING:  # torch is imported where a corpus is loaded: trainers of the synthetic and
    import torch  # command targets import this module but never load one (torch costs ~1.4 s)


@dataclass(frozen=True, slots=True)
class Corpus:
    train: torch.Tensor  # uint8, 1-D
    val: torch.Tensor
    corpus_hash: str
    source: str


def stdlib_files() -> tuple[list[Path], list[Path], Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    train: list[Path] = []
    val: list[Path] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        module = corpus_module(rel.parts[0])
        if module is None or SKIPPED_DIRS & set(rel.parts[:-1]):
            continue
        (val if module in VAL_MODULES else train).append(path)
    return train, val, root


def user_files(data: Path) -> tuple[list[Path], list[Path], Path]:
    if data.is_file():
        return [data], [], data.parent
    files = sorted(p for p in data.rglob("*") if p.is_file() and not p.name.startswith("."))
    if len(files) < 2:
        raise ValueError(f"--data {data}: need a text file or a folder with at least 2 files")
    return [f for i, f in enumerate(files) if i % 10 != 9], files[9::10] or files[-1:], data


def _read(files: list[Path], root: Path, digest: hashlib._Hash, cap: int | None) -> bytes:
    chunks, size = [], 0
    for path in files:
        data = path.read_bytes()
        digest.update(str(path.relative_to(root)).encode() + b"\0" + data)
        chunks.append(data + b"\n")
        size += len(data) + 1
        if cap is not None and size >= cap:
            break
    return b"".join(chunks)


def build(data: Path | None) -> tuple[bytes, bytes, str, str]:
    train_files, val_files, root = user_files(data) if data else stdlib_files()
    digest = hashlib.sha256()
    train = _read(train_files, root, digest, TRAIN_CAP_BYTES)
    val = _read(val_files, root, digest, None)
    if data is not None and data.is_file():
        cut = len(train) * 9 // 10
        train, val = train[:cut], train[cut:]
    if len(val) < 64 * 1024 or len(train) < 256 * 1024:
        raise ValueError(
            f"corpus too small: {len(train)} train and {len(val)} val bytes "
            "(need at least 256 KiB and 64 KiB)"
        )
    return train, val, digest.hexdigest()[:16], str(data or root)


def build_secret(language_key: bytes) -> tuple[bytes, bytes, str, str]:
    train, val = secret_language.generate(language_key, SECRET_TRAIN_BYTES, SECRET_VAL_BYTES)
    digest = hashlib.sha256(train + b"\0" + val).hexdigest()[:16]
    return train, val, digest, f"secret language v{secret_language.VERSION}"


def _publish(folder: Path, files: dict[str, bytes | str]) -> None:
    """The cache folder whole or not at all: trainers that start together each build the
    corpus, and one reading train.bin while another rewrote it would train on part of it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (staging / name).write_bytes(data)
    for _ in range(2):
        try:
            staging.rename(folder)
            return
        except OSError:  # there already: another trainer's (kept), or a half-built one (replaced)
            if (folder / "manifest.json").exists():
                break
            shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def corpus_hash(
    cache_dir: Path, data: Path | None = None, language_key: bytes | None = None
) -> str:
    """The corpus's hash, built into the cache if it is not there, without loading it (nor
    torch): what the ladder pins for the swarm before any run."""
    folder = _built(cache_dir, data, language_key)
    return str(json.loads((folder / "manifest.json").read_text())["hash"])


def _folder(cache_dir: Path, data: Path | None, language_key: bytes | None) -> Path:
    # The stdlib corpus's key names its modules: a cache built from other ones (the whole stdlib,
    # before issue 16) is rebuilt, never reused.
    if language_key is not None:  # the folder's name must not give the key away
        key_digest = hashlib.sha256(b"cache/" + language_key).hexdigest()
        identity = f"secret:{secret_language.VERSION}:{key_digest}"
    else:
        identity = str(data.resolve()) if data else f"stdlib:{CORPUS_MODULES}:{VAL_MODULES}"
    return cache_dir / hashlib.sha256(identity.encode()).hexdigest()[:12]


def _built(cache_dir: Path, data: Path | None, language_key: bytes | None) -> Path:
    """The corpus's cache folder, built first if it is not there."""
    folder = _folder(cache_dir, data, language_key)
    if not (folder / "manifest.json").exists():
        made = build_secret(language_key) if language_key is not None else build(data)
        train, val, digest, source = made
        meta = {"hash": digest, "source": source, "train": len(train), "val": len(val)}
        _publish(folder, {"train.bin": train, "val.bin": val, "manifest.json": json.dumps(meta)})
    return folder


def load_corpus(
    cache_dir: Path, data: Path | None = None, language_key: bytes | None = None
) -> Corpus:
    """Build on first use, then read from the cache. `language_key`: the secret language's
    (data is then ignored)."""
    folder = _built(cache_dir, data, language_key)
    meta = json.loads((folder / "manifest.json").read_text())
    train_bytes, val_bytes = (folder / "train.bin").read_bytes(), (folder / "val.bin").read_bytes()
    if (len(train_bytes), len(val_bytes)) != (meta["train"], meta["val"]):
        # cut short or changed since it was built: its hash would be recorded for other text
        shutil.rmtree(folder, ignore_errors=True)
        return load_corpus(cache_dir, data, language_key)
    import torch

    return Corpus(
        train=torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8),
        val=torch.frombuffer(bytearray(val_bytes), dtype=torch.uint8),
        corpus_hash=meta["hash"],
        source=meta["source"],
    )
