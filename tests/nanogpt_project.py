# ruff: noqa: E501  (train.py below is written the way such projects write it)
"""A small project in the style of a popular single-file GPT trainer, written by the tests that
point the swarm at a stock project: lowercase config globals at the top of train.py, overrides
from the command line as `--name=value` (applied by configurator.py after the globals), a
fixed seed unless one is passed, data in data/<dataset>/{train,val,test}.bin, a log line
`step N: train loss X, val loss Y`, a checkpoint in out/ckpt.pt and an eval.py that scores it
on the test split. Nothing in it knows about the swarm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TRAIN_PY = '''"""Train a tiny character-level model on data/<dataset>/train.bin."""
import os
import time

import numpy as np
import torch

from model import Model

# default config values
out_dir = 'out'
eval_interval = 1000
eval_iters = 8
log_interval = 1000
dataset = 'tiny'
batch_size = 16
block_size = 8
n_embd = 16
dropout = 0.0
bias = False
learning_rate = 1e-3  # deliberately low: the swarm should find a better one
weight_decay = 0.0
beta2 = 0.99
max_iters = 60
seed = 1337
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read())  # overrides from the command line
config = {k: globals()[k] for k in config_keys}

torch.manual_seed(seed)
data_dir = os.path.join('data', dataset)
train_data = torch.from_numpy(np.fromfile(os.path.join(data_dir, 'train.bin'), dtype=np.uint16).astype(np.int64))
val_data = torch.from_numpy(np.fromfile(os.path.join(data_dir, 'val.bin'), dtype=np.uint16).astype(np.int64))
vocab_size = int(max(train_data.max(), val_data.max())) + 1


def get_batch(split, generator=None):
    data = train_data if split == 'train' else val_data
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


@torch.no_grad()
def estimate_loss(model):
    model.eval()
    out = {}
    for split in ('train', 'val'):
        fixed = torch.Generator().manual_seed(0)  # the same eval batches for every run
        out[split] = sum(model(*get_batch(split, fixed)).item() for _ in range(eval_iters)) / eval_iters
    model.train()
    return out


model = Model(vocab_size, n_embd, dropout, bias)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, beta2), weight_decay=weight_decay)
t0 = time.time()
for iter_num in range(max_iters + 1):
    if iter_num % eval_interval == 0 or iter_num == max_iters:
        losses = estimate_loss(model)
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if iter_num == max_iters:
        break
    loss = model(*get_batch('train'))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {(time.time() - t0) * 1000:.2f}ms")
os.makedirs(out_dir, exist_ok=True)
model_args = dict(vocab_size=vocab_size, n_embd=n_embd, dropout=dropout, bias=bias)
torch.save({'model': model.state_dict(), 'model_args': model_args}, os.path.join(out_dir, 'ckpt.pt'))
'''

MODEL_PY = '''"""The model, shared by train.py and eval.py."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self, vocab_size, n_embd, dropout, bias):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = torch.nn.Embedding(vocab_size, n_embd)
        self.drop = torch.nn.Dropout(dropout)
        self.head = torch.nn.Linear(n_embd, vocab_size, bias=bias)

    def forward(self, x, y):
        logits = self.head(self.drop(self.embed(x)))
        return F.cross_entropy(logits.view(-1, self.vocab_size), y.view(-1))
'''

# Scores a checkpoint on the test split, which training never reads: the second stage of a
# two-stage target. It loads the checkpoint as data only (weights_only), as it must.
EVAL_PY = '''"""Score a checkpoint on data/<dataset>/test.bin: python eval.py --ckpt=out/ckpt.pt"""
import argparse
import os

import numpy as np
import torch

from model import Model

parser = argparse.ArgumentParser()
parser.add_argument('--ckpt', default=os.path.join('out', 'ckpt.pt'))
parser.add_argument('--dataset', default='tiny')
args = parser.parse_args()

checkpoint = torch.load(args.ckpt, map_location='cpu', weights_only=True)
model = Model(**checkpoint['model_args'])
model.load_state_dict(checkpoint['model'])
model.eval()
data = torch.from_numpy(np.fromfile(os.path.join('data', args.dataset, 'test.bin'), dtype=np.uint16).astype(np.int64))
block = 64
with torch.no_grad():
    x = data[:len(data) - 1][: (len(data) - 1) // block * block].view(-1, block)
    y = data[1:][: (len(data) - 1) // block * block].view(-1, block)
    print(f"test loss {model(x, y).item():.4f}")
'''

CONFIGURATOR_PY = '''"""Command-line overrides: python train.py --batch_size=32 --learning_rate=3e-4"""
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    assert arg.startswith('--'), f"unknown argument {arg}"
    key, val = arg[2:].split('=', 1)
    if key not in globals():
        raise ValueError(f"Unknown config key: {key}")
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) == type(globals()[key]), f"{key}: {type(attempt)} != {type(globals()[key])}"
    print(f"Overriding: {key} = {attempt}")
    globals()[key] = attempt
'''


def write_project(folder: Path) -> Path:
    """The project in `folder` (made if missing), with a small text corpus as byte tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN_PY)
    (folder / "configurator.py").write_text(CONFIGURATOR_PY)
    (folder / "model.py").write_text(MODEL_PY)
    (folder / "eval.py").write_text(EVAL_PY)
    words = ["the", "swarm", "tries", "ideas", "and", "keeps", "what", "helps", "a", "model"]
    rng = np.random.default_rng(0)
    text = " ".join(words[i] for i in rng.integers(0, len(words), 20_000)).encode()
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)
    data = folder / "data" / "tiny"
    data.mkdir(parents=True, exist_ok=True)
    train, val = int(len(tokens) * 0.8), int(len(tokens) * 0.9)
    tokens[:train].tofile(data / "train.bin")
    tokens[train:val].tofile(data / "val.bin")
    tokens[val:].tofile(data / "test.bin")  # held out: only eval.py reads it
    return folder
