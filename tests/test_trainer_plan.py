"""GPU readiness that can be checked without a GPU: how many trainers, which GPU each sees, the
memory limit each experiment gets, and the device named in every result (issue 16, item 6)."""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.config import ConfigError, SwarmConfig, TrainersConfig
from swarm.supervisor import ManagedProcess
from swarm.trainer_plan import VISIBLE, trainer_envs, visible_gpus
from swarm.training_setup import address_space_bytes
from training.process_outcome import device_label


def test_one_trainer_per_core_on_cpu_and_per_gpu_on_cuda() -> None:
    assert trainer_envs(-1, "cpu", 4, ["0", "1"]) == [{}, {}, {}, {}]
    assert trainer_envs(2, "cpu", 16, []) == [{}, {}]
    assert trainer_envs(-1, "cuda", 16, ["0", "1"]) == [{VISIBLE: "0"}, {VISIBLE: "1"}]
    # an explicit count shares the GPUs in turn
    assert trainer_envs(3, "cuda", 16, ["0", "1"]) == [{VISIBLE: g} for g in ("0", "1", "0")]
    assert trainer_envs(0, "cuda", 16, ["0"]) == []


def test_the_users_visible_devices_are_the_ones_shared_out() -> None:
    assert visible_gpus({VISIBLE: "2, 5"}, 8) == ["2", "5"]
    assert visible_gpus({VISIBLE: ""}, 8) == []  # the user hid every GPU
    assert visible_gpus({}, 3) == ["0", "1", "2"]
    assert trainer_envs(-1, "cuda", 16, visible_gpus({VISIBLE: "2,5"}, 8)) == [
        {VISIBLE: "2"},
        {VISIBLE: "5"},
    ]


def test_cuda_without_a_gpu_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"trainers\.device is 'cuda' but no GPU is visible"):
        trainer_envs(-1, "cuda", 16, [])


def test_cuda_runs_have_no_address_space_limit_unless_asked() -> None:
    default = SwarmConfig()
    assert address_space_bytes(default, "cpu") == 4 * 1024**3
    assert address_space_bytes(default, "cuda") == 0
    eight = SwarmConfig(trainers=TrainersConfig(address_space_gb=8))
    assert address_space_bytes(eight, "cuda") == 8 * 1024**3
    assert address_space_bytes(SwarmConfig(trainers=TrainersConfig(address_space_gb=0)), "cpu") == 0


def test_no_address_space_limit_means_none_is_set() -> None:
    """0 leaves RLIMIT_AS as it was (unlimited here), while the other limits still apply."""
    code = (
        "import resource\n"
        "from training.sandbox import Limits, set_rlimits\n"
        "set_rlimits(Limits(address_space_bytes=0))\n"
        "print(resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    before = resource.getrlimit(resource.RLIMIT_AS)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == f"{before} (1024, 1024)"


def test_every_result_names_its_device() -> None:
    assert device_label("cpu") == "cpu"
    label = device_label("cuda")  # on this machine: no CUDA, which the label says
    assert label.startswith("cuda (") and label.endswith(")")


def test_a_trainer_process_sees_only_its_gpu(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    argv = [sys.executable, "-c", f"import os; print(os.environ['{VISIBLE}'])"]

    async def once() -> None:
        process = ManagedProcess("trainer-1", argv, log, env={VISIBLE: "5"})
        await process.start()
        assert process._process is not None
        await process._process.wait()

    asyncio.run(once())
    assert log.read_text().strip() == "5"
