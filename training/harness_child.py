"""The experiment process: confine itself, import the recipe, train, hand logits to the runner.

Run by the runner as `python -m training.harness_child CONFIG_JSON` with two pipe fds. Nothing
here decides the metric: batches come from the runner, which stops them when the budget is spent,
and the runner computes val_bpb from the logits this process returns.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

EXIT_RECIPE_ERROR = 1
EXIT_BAD_MODEL = 3
EXIT_NO_SANDBOX = 4  # the sandbox could not be applied and the user did not accept that
NO_SANDBOX = "refused: the sandbox could not be applied"  # how its last line starts


class Context:
    """What the recipe sees: seed, dials, device, budget progress, batches, loss reports."""

    def __init__(self, config: dict[str, Any], req: int, resp: int) -> None:
        self.seed: int = config["seed"]
        self.dials: dict[str, int] = dict(config["dials"])
        self.device: str = config["device"]
        self.progress = 0.0
        self._req, self._resp = req, resp

    def batches(self, batch_size: int) -> Any:
        import torch

        from training import protocol as p

        context = self.dials["context"]
        while True:
            p.write_all(self._req, b"B" + p.BATCH_ASK.pack(int(batch_size), context))
            nbytes, self.progress = p.BATCH_ANSWER.unpack(
                p.read_exact(self._resp, p.BATCH_ANSWER.size)
            )
            if nbytes == 0:
                return
            data = bytearray(p.read_exact(self._resp, nbytes))
            # The runner may send fewer rows than asked: the last batch of a token budget.
            rows = torch.frombuffer(data, dtype=torch.uint8).view(-1, context + 1)
            rows = rows.to(self.device).long()
            yield rows[:, :-1], rows[:, 1:]

    def report(self, loss: float) -> None:
        from training import protocol as p

        p.write_all(self._req, b"L" + p.LOSS.pack(float(loss)))


def _confine(config: dict[str, Any]) -> None:
    from training import sandbox

    scratch = Path(config["scratch"])
    package = Path(__file__).resolve().parent
    read = sandbox.python_read_paths([package, *map(Path, config.get("extra_read", []))])
    if config["device"].startswith("cuda"):
        read.append(Path("/dev"))
    applied = [sandbox.restrict_filesystem(read, [scratch], reads_all=False)]
    applied.append(sandbox.restrict_syscalls())
    applied.append(sandbox.drop_capabilities())
    complete = applied[0].startswith("landlock abi") and applied[1] == "seccomp"
    unsafe = "" if complete else f" (unconfined: {sandbox.UNSAFE_FLAG})"
    print(f"sandbox: {', '.join(applied)}{unsafe}", file=sys.stderr, flush=True)
    if not complete and not config.get("unsafe_no_sandbox"):
        print(
            f"{NO_SANDBOX} ({applied[0]}; {applied[1]}); "
            f"the recipe was not run (pass {sandbox.UNSAFE_FLAG} to run it anyway)",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_NO_SANDBOX)


def _evaluate(model: Any, req: int, resp: int) -> None:
    import torch

    from training import protocol as p

    model.eval()
    while True:
        p.write_all(req, b"E")
        n, context = p.EVAL_ANSWER.unpack(p.read_exact(resp, p.EVAL_ANSWER.size))
        if n == 0:
            return
        data = bytearray(p.read_exact(resp, n * context))  # the inputs: targets stay outside
        rows = torch.frombuffer(data, dtype=torch.uint8).view(n, context)
        with torch.no_grad():
            logits = model(rows.long().to(next(model.parameters()).device))
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (n, context, p.VOCAB):
            shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
            print(f"model returned {shape}, expected {(n, context, p.VOCAB)}", file=sys.stderr)
            sys.exit(EXIT_BAD_MODEL)
        p.write_all(req, b"O" + logits.detach().float().cpu().numpy().tobytes())


def main() -> None:
    if sys.argv[1] == "--zygote":
        from training import zygote

        zygote.serve(int(sys.argv[2]))
    else:
        run_experiment(json.loads(sys.argv[1]))


def run_experiment(config: dict[str, Any]) -> None:
    """Confine this process, then train and evaluate the recipe; exits through sys.exit."""
    req, resp = config["req_fd"], config["resp_fd"]
    import torch

    if not config["device"].startswith("cuda"):
        torch.set_num_threads(1)
    _confine(config)
    os.chdir(config["scratch"])
    try:
        spec = importlib.util.spec_from_file_location(
            "recipe", Path(config["scratch"]) / "recipe.py"
        )
        assert spec is not None and spec.loader is not None
        recipe = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(recipe)
        model = recipe.train(Context(config, req, resp))
    except Exception:
        traceback.print_exc()
        sys.exit(EXIT_RECIPE_ERROR)
    if not isinstance(model, torch.nn.Module):
        print(
            f"train() returned {type(model).__name__}, expected a torch.nn.Module", file=sys.stderr
        )
        sys.exit(EXIT_BAD_MODEL)
    from training import protocol as p

    info = json.dumps({"parameters": sum(t.numel() for t in model.parameters())}).encode()
    p.write_all(req, b"I" + p.INFO.pack(len(info)) + info)
    try:
        _evaluate(model, req, resp)
    except Exception:
        traceback.print_exc()
        sys.exit(EXIT_RECIPE_ERROR)


if __name__ == "__main__":
    main()
