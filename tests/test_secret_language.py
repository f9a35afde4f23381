"""The secret language (`--data secret`): text nobody outside the swarm has.

The attack it closes, through the real sandboxed runner: an experiment that reads the Python
text it can reach (its interpreter's and torch's sources) and mixes a byte model of it into
what it learned from its batches. On the stock corpus that pays; on the secret language the
same experiment, choosing its mix on its own batches, finds nothing to use."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import run_swarm, swarm_cmd, wait_for
from tests.helpers_process import start_nats_server
from tests.training_helpers import TINY_LADDER, patch_for, run
from training import corpus as corpus_module
from training.corpus import Corpus, corpus_hash, load_corpus
from training.runner import RunLimits
from training.secret_language import generate, key_from

# A count-based recipe: byte bigrams from its batches (the last batch kept aside to choose the
# mix), and, with FROM_DISK, the bigrams of up to 8 MiB of readable Python mixed in at the
# weight that does best on that batch, read as is or mapped to the sent bytes by frequency rank
# (what an attacker would try against a language whose byte values are permuted).
COUNTS = """
import os
import torch

FROM_DISK = {from_disk}


class Table(torch.nn.Module):
    def __init__(self, logp):
        super().__init__()
        self.logp = torch.nn.Parameter(logp, requires_grad=False)

    def forward(self, idx):
        return self.logp[idx]


def bigrams(data):
    x = data.long() if torch.is_tensor(data) else torch.tensor(list(data), dtype=torch.long)
    return torch.bincount(x[:-1] * 256 + x[1:], minlength=65536).view(256, 256).float()


def readable_python(limit):
    chunks, size = [], 0
    for root in [os.path.dirname(os.__file__), os.path.dirname(torch.__file__)]:
        for folder, _, names in os.walk(root):
            for name in names:
                if name.endswith(".py") and size < limit:
                    try:
                        data = open(os.path.join(folder, name), "rb").read()
                    except OSError:
                        continue
                    chunks.append(data)
                    size += len(data)
    return b"".join(chunks)


def log_table(counts):
    p = (counts + 0.01) / (counts + 0.01).sum(1, keepdim=True)
    return p.log()


def train(ctx):
    counts, sent, held = torch.zeros(256, 256), torch.zeros(256), None
    for x, y in ctx.batches(16):
        if held is not None:
            counts += bigrams(torch.cat([held[0][:, :1].flatten(), held[1].flatten()]))
        held = (x, y)
        sent += torch.bincount(y.flatten().long(), minlength=256).float()
        ctx.report(0.0)
    if FROM_DISK:
        text = readable_python(8 << 20)
        disk = bigrams(text)
        by_rank = torch.bincount(torch.tensor(list(text[:2000000])), minlength=256).float()
        perm = torch.empty(256, dtype=torch.long)
        perm[by_rank.argsort(descending=True)] = sent.argsort(descending=True)
        mapped = torch.zeros(256, 256)
        mapped[perm.unsqueeze(1), perm.unsqueeze(0)] = disk
        best, chosen = None, counts
        for source in (disk, mapped):
            for weight in (0.0, 0.25, 1.0, 4.0, 16.0):
                mix = counts + source * (counts.sum() / source.sum()) * weight
                score = log_table(mix)[held[0].long(), held[1].long()].sum().item()
                if best is None or score > best:
                    best, chosen = score, mix
        counts = chosen
    counts += bigrams(torch.cat([held[0][:, :1].flatten(), held[1].flatten()]))
    return Table(log_table(counts))
"""
LIMITS = RunLimits(time_limit_s=60, eval_tokens=4096)


@pytest.fixture(scope="module")
def secret_corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return load_corpus(tmp_path_factory.mktemp("secret"), language_key=key_from(b"test swarm"))


def test_a_key_gives_the_same_text_everywhere_and_another_key_another_language() -> None:
    train, val = generate(b"key a", 64 * 1024, 16 * 1024)
    assert (train, val) == generate(b"key a", 64 * 1024, 16 * 1024)
    assert len(train) >= 64 * 1024 and len(val) >= 16 * 1024 and train[-4096:] not in val
    # Pinned: the corpus hash in every result, and a remote trainer's corpus, depend on these
    # bytes; a generator that changes them must bump secret_language.VERSION.
    digest = hashlib.sha256(train + val).hexdigest()[:16]
    assert digest == "50347a8214fa6adf"
    other, _ = generate(b"key b", 64 * 1024, 16 * 1024)
    windows = {train[i : i + 8] for i in range(len(train) - 8)}
    shared = sum(other[i : i + 8] in windows for i in range(0, len(other) - 8, 8))
    assert shared < 0.01 * len(other) / 8, shared  # no words, no phrases in common


def test_readable_python_teaches_nothing_about_the_secret_language(
    corpus: Corpus, secret_corpus: Corpus, tmp_path: Path
) -> None:
    def bpb(on: Corpus, from_disk: bool) -> float:
        patch = patch_for(COUNTS.format(from_disk=from_disk))
        result = run(on, tmp_path, patch, limits=LIMITS, seed=7)
        assert result.metric is not None, (result.status, result.reason, result.log_tail)
        return result.metric

    # The attack has teeth: on the stock corpus (Python source) the disk's text pays.
    python_batches, python_disk = bpb(corpus, False), bpb(corpus, True)
    assert python_disk < python_batches - 0.2, (python_batches, python_disk)
    # The batches teach: far below the 8 bits of knowing nothing.
    secret_batches, secret_disk = bpb(secret_corpus, False), bpb(secret_corpus, True)
    assert secret_batches < 6, secret_batches
    assert secret_disk >= secret_batches - 0.02, (secret_batches, secret_disk)


def test_swarm_run_on_the_secret_language_keeps_one_language_per_workspace(
    tmp_path: Path,
) -> None:
    (tmp_path / "ladder.toml").write_text(TINY_LADDER)
    config = tmp_path / "swarm.toml"
    config.write_text(f'[target]\ndata = "secret"\n\n[ladder]\npath = "{tmp_path}/ladder.toml"\n')

    def corpus_hash(workspace: Path) -> str:
        done = run_swarm(workspace, "--config", str(config), "run", "--tier", "0", timeout=120)
        assert done.returncode == 0, done.stderr
        assert "status: OK" in done.stdout, done.stdout
        return next(
            line.split(": ")[1] for line in done.stdout.splitlines() if line.startswith("corpus")
        )

    first = corpus_hash(tmp_path / "ws")
    assert corpus_hash(tmp_path / "ws") == first  # the workspace's secret, kept
    assert corpus_hash(tmp_path / "other") != first  # another swarm, another language
    secret = (tmp_path / "ws" / "run" / "seed_secret").read_text().strip()
    cached = "".join(p.name for p in (tmp_path / "ws" / "corpus").iterdir())
    assert secret not in cached and secret[:12] not in cached


def test_a_worker_without_the_swarms_secret_is_told_what_to_copy(tmp_path: Path) -> None:
    done = run_swarm(tmp_path / "ws", "worker", "--data", "secret", "--nats", "nats://127.0.0.1:9")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "target.data 'secret' is the swarm's secret language" in done.stderr, done.stderr
    assert "run/seed_secret" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ws" / "run" / "seed_secret").exists()  # no language of its own


def test_trainers_building_the_corpus_together_all_read_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corpus_module, "SECRET_TRAIN_BYTES", 512 * 1024)
    monkeypatch.setattr(corpus_module, "SECRET_VAL_BYTES", 64 * 1024)
    key = key_from(b"together")
    train, val = generate(key, 512 * 1024, 64 * 1024)
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda _: load_corpus(tmp_path, language_key=key), range(4)))
    for corpus in loaded:
        assert bytes(corpus.train.numpy()) == train and bytes(corpus.val.numpy()) == val
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers
    # A folder an older release left half-built (no manifest) is replaced, not trusted.
    (folder,) = tmp_path.iterdir()
    shutil.rmtree(folder)
    folder.mkdir()
    (folder / "train.bin").write_bytes(train[:100])
    assert bytes(load_corpus(tmp_path, language_key=key).train.numpy()) == train
    # One cut short since it was built is built again, not read as the corpus its hash names.
    (folder / "val.bin").write_bytes(val[:-1])
    assert bytes(load_corpus(tmp_path, language_key=key).val.numpy()) == val


def test_a_worker_with_another_swarms_secret_is_refused_from_its_first_job(
    tmp_path: Path,
) -> None:
    """The hub pins the secret language's hash before any run, so a worker given another
    swarm's seed_secret (another language) cannot set the swarm's data by finishing the first
    baseline: it is refused at once, and a worker with the hub's secret runs."""
    server, url = start_nats_server(
        f"listen: 127.0.0.1:-1\njetstream {{ store_dir: {str(tmp_path / 'js')!r} }}\n",
        tmp_path / "nats",
    )
    (tmp_path / "ladder.toml").write_text(TINY_LADDER.replace("seeds = 1", "seeds = 2"))
    config = tmp_path / "swarm.toml"
    config.write_text(f'[target]\ndata = "secret"\n\n[ladder]\npath = "{tmp_path}/ladder.toml"\n')
    hub_ws, stranger, helper = tmp_path / "hub", tmp_path / "stranger", tmp_path / "helper"
    joined = ("--config", str(config))
    hub = subprocess.Popen(
        swarm_cmd(hub_ws, *joined, "start", "--nats", url, "--trainers", "0", "--agents", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: (hub_ws / "run" / "bus.json").exists(), 60)
        secret = (hub_ws / "run" / "seed_secret").read_text()
        key = key_from(bytes.fromhex(secret))
        expected = corpus_hash(hub_ws / "corpus", language_key=key)
        (stranger / "run").mkdir(parents=True)
        (stranger / "run" / "seed_secret").write_text("ab" * 32 + "\n")
        (stranger / "run" / "seed_secret").chmod(0o600)
        done = run_swarm(stranger, *joined, "worker", "--nats", url, timeout=120)
        assert done.returncode != 0, done.stderr
        assert f"the swarm runs on corpus {expected}" in done.stderr, done.stderr
        (helper / "run").mkdir(parents=True)
        (helper / "run" / "seed_secret").write_text(secret)
        (helper / "run" / "seed_secret").chmod(0o600)
        worker = subprocess.Popen(swarm_cmd(helper, *joined, "worker", "--nats", url))

        def hashes() -> list[str]:
            query = "select distinct corpus_hash from runs where status = 'OK'"
            done = run_swarm(hub_ws, "sql", query, "--format", "csv")
            return done.stdout.split()[1:] if done.returncode == 0 else []

        wait_for(lambda: hashes() != [], 120, 0.5)
        assert hashes() == [expected]
    finally:
        for process in (worker, hub):
            if process is not None:
                process.send_signal(signal.SIGINT)
                process.communicate(timeout=60)
        server.terminate()
        server.wait(10)
