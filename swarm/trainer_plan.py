"""How many trainers `swarm start` runs, and what each sees: one per CPU core, or one per GPU.

On CPU each trainer trains with one thread, so a core each. On CUDA a trainer per GPU, each with
`CUDA_VISIBLE_DEVICES` naming its own: two experiments on one GPU would share its memory and
slow each other, and without the variable every trainer would use GPU 0. Where the user has set
`CUDA_VISIBLE_DEVICES` already, only those GPUs are shared out. An explicit `trainers.count`
wins; trainers beyond the number of GPUs share them in turn.
"""

from __future__ import annotations

from collections.abc import Mapping

from swarm.config import ConfigError

VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_gpus(environ: Mapping[str, str], device_count: int) -> list[str]:
    """The GPUs to share out: the user's CUDA_VISIBLE_DEVICES entries if set, else 0..n-1."""
    if VISIBLE in environ:
        return [gpu.strip() for gpu in environ[VISIBLE].split(",") if gpu.strip()]
    return [str(i) for i in range(device_count)]


def trainer_envs(count: int, device: str, cpu_count: int, gpus: list[str]) -> list[dict[str, str]]:
    """One environment (the variables to add) per trainer. `count` -1: one per CPU core, or
    one per GPU on cuda; 0: none."""
    if not device.startswith("cuda"):
        return [{} for _ in range(cpu_count if count == -1 else count)]
    if not gpus:
        raise ConfigError(f"trainers.device is {device!r} but no GPU is visible")
    n = len(gpus) if count == -1 else count
    return [{VISIBLE: gpus[i % len(gpus)]} for i in range(n)]


def gpu_count(device: str) -> int:
    """GPUs torch sees (0 on CPU); imported only when a GPU may be used."""
    if device == "cpu":
        return 0
    import torch

    return torch.cuda.device_count()
