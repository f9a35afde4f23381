"""Does CUDA start inside the experiment sandbox on this machine, and what does it need?

Runs a small CUDA program (device name, a matrix product, a bf16 autocast step) in fresh
processes, each confined as an experiment is (training/harness_child.py) or with one part left
out, so a failure names its cause: the Landlock grants, the seccomp filter, or the environment.

    python -m bench.cuda_sandbox            # on a GPU machine; prints one line per variant

Prints figures; asserts nothing. On a machine without a GPU every variant fails at CUDA's start.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from training import sandbox
from training.readable_paths import CUDA_READ_PATHS

# variant: (Landlock as shipped?, what to leave out of its grants, seccomp rules or None)
G = sandbox.GPU_EXPERIMENT
VARIANTS: dict[str, tuple[bool, str, sandbox.SyscallRules | None]] = {
    "shipped": (True, "", G),
    "with connect, sends": (True, "", replace(G, connects=True)),  # and sends by address
    "no memfd": (True, "", replace(G, memfd=False)),
    "no bind": (True, "", replace(G, binds=False)),  # if OK, GPU_EXPERIMENT can deny bind too
    "no watches": (True, "", replace(G, watches=False)),  # if OK, it can deny inotify too
    "own scheduling": (True, "", replace(G, others_scheduling=False)),  # if OK, so can the GPU
    "own clocks": (True, "", replace(G, others_clocks=False)),  # if OK, so can the GPU
    "evaluation": (
        True,
        "",
        replace(
            G, new_pipes=False, threads=False, locks=False, scheduling=False, others_clocks=False
        ),
    ),
    "cpu rules": (True, "", sandbox.EXPERIMENT),
    "no task writes": (True, "/proc/self/task", G),
    "no device reads": (True, "device reads", G),
    "landlock only": (True, "", None),
    "seccomp only": (False, "", G),
    "seccomp +unix": (False, "", replace(G, unix_sockets=True)),
    "seccomp +cache": (False, "", replace(G, page_cache=True)),
    "seccomp command": (False, "", sandbox.COMMAND),
    "none": (False, "", None),
}


def confine(variant: str, scratch: Path) -> str:
    landlock, leave_out, rules = VARIANTS[variant]
    applied = []
    if landlock:
        read, write = sandbox.device_paths("cuda")
        if leave_out == "device reads":
            read = [p for p in read if str(p) not in CUDA_READ_PATHS]
        write = [p for p in write if str(p) != leave_out]
        package = Path(sandbox.__file__).resolve().parent
        grants = sandbox.python_read_paths([package, scratch, *read])
        applied.append(sandbox.restrict_filesystem(grants, [scratch, *write], reads_all=False))
    if rules is not None:
        applied.append(f"{sandbox.restrict_syscalls(rules)} {rules}")
    if landlock or rules is not None:
        applied.append(sandbox.drop_capabilities())
    return ", ".join(applied) or "nothing"


def child(variant: str, scratch: Path) -> dict[str, object]:
    import torch  # imported before confinement, as the zygote does

    applied = confine(variant, scratch)
    started = time.perf_counter()
    try:
        name = torch.cuda.get_device_name(0)
        x = torch.randn(1024, 1024, device="cuda")
        value = float((x @ x).sum())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = torch.nn.Linear(1024, 1024).cuda()(x).float().sum()
        y.backward()
        torch.cuda.synchronize()
        result = f"OK on {name} (sum {value:.3g})"
    except Exception as exc:  # the point is to see it
        result = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    seconds = time.perf_counter() - started
    return {"variant": variant, "applied": applied, "result": result, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/cuda-sandbox-probe"))
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    if args.child:
        print(json.dumps(child(args.child, args.scratch)))
        return
    env = sandbox.scrubbed_env(args.scratch, {"PYTHONPATH": str(Path.cwd())}, cpu=False)

    def probe(variant: str) -> str:
        command = [sys.executable, "-m", "bench.cuda_sandbox", "--child", variant]
        done = subprocess.run(
            [*command, "--scratch", str(args.scratch / variant.replace(" ", "-"))],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            report = json.loads(lines[-1])
            return f"{report['result']} in {report['seconds']:.2f} s [{report['applied']}]"
        return f"exit {done.returncode}: {' | '.join(done.stderr.strip().splitlines()[-3:])[:400]}"

    with ThreadPoolExecutor(4) as pool:  # each is a process of its own: no shared state
        for variant, line in zip(VARIANTS, pool.map(probe, VARIANTS), strict=True):
            print(f"{variant:16} {line}")


if __name__ == "__main__":
    main()
