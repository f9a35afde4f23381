"""The bytelm recipe: a small byte-level GPT and its training loop.

This is the one file ideas may change. The harness calls `train(ctx)` and evaluates the model it
returns: `model(idx)` maps a (batch, time) tensor of byte ids to (batch, time, 256) logits, and
must be causal (position t sees only bytes ≤ t; the evaluator checks). The harness owns the data
(`ctx.batches` stops when the tier's budget is spent), the seed, the device and the metric.

ctx: seed (int), dials {"depth", "width", "context"}, device (str), progress (0..1 of the budget
spent), batches(batch_size) -> iterator of (x, y) int64 tensors, report(loss: float).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# --- hyperparameters -------------------------------------------------------------------------
# `search:` at the end of a comment is the range a search may move the constant in
# (agents/search_space.py); the rest of the comment says what the constant does.
BATCH_SIZE = 16  # sequences per step; search: 4..64 pow2
LEARNING_RATE = 3e-3  # peak AdamW learning rate (small models on few steps like it high)
MIN_LR_FRACTION = 0.1  # the schedule decays to this fraction of the peak; search: 0.01..0.5
WARMUP_FRACTION = 0.05  # share of the budget spent warming up linearly; search: 0.005..0.3
WEIGHT_DECAY = 0.1  # decoupled decay on matrices only (not on norms, biases, embeddings)
BETAS = (0.9, 0.95)  # AdamW momentum terms
GRAD_CLIP = 1.0  # max global gradient norm
HEAD_DIM = 32  # attention heads = width // HEAD_DIM (widths: multiples of 64); search: 16 | 32 | 64
MLP_RATIO = 4  # hidden width of the MLP relative to the model width; search: 1..8
TIE_EMBEDDINGS = True  # share the input embedding and the output projection
INIT_STD = 0.02  # std of the normal init; residual projections are scaled by 1/sqrt(2·depth)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width):
        super().__init__()
        self.heads = max(1, width // HEAD_DIM)
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.norm2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, MLP_RATIO * width, bias=False)
        self.out = nn.Linear(MLP_RATIO * width, width, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.norm2(x))))


class GPT(nn.Module):
    def __init__(self, depth, width, context):
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256, bias=False)
        if TIE_EMBEDDINGS:
            self.head.weight = self.embed.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                scaled = name.endswith(("proj.weight", "out.weight"))
                std = INIT_STD / math.sqrt(2 * depth) if scaled else INIT_STD
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.embed(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def learning_rate(progress):
    """Linear warmup, then cosine decay to MIN_LR_FRACTION, as a function of budget spent."""
    if progress < WARMUP_FRACTION:
        return LEARNING_RATE * (progress + 1e-3) / WARMUP_FRACTION
    t = min(1.0, (progress - WARMUP_FRACTION) / (1 - WARMUP_FRACTION))
    return LEARNING_RATE * (
        MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * t))
    )


def train(ctx):
    torch.manual_seed(ctx.seed)
    dials = ctx.dials
    model = GPT(dials["depth"], dials["width"], dials["context"]).to(ctx.device)
    decay = [p for p in model.parameters() if p.dim() == 2 and p is not model.embed.weight]
    no_decay = [p for p in model.parameters() if p.dim() < 2 or p is model.embed.weight]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": WEIGHT_DECAY},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=LEARNING_RATE,
        betas=BETAS,
    )
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=ctx.device.startswith("cuda"))
    model.train()
    for x, y in ctx.batches(BATCH_SIZE):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(ctx.progress)
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, 256), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        ctx.report(loss.item())
    return model
