"""The experiment's processes: confine, train and hand over the model; or evaluate one batch.

Run by the runner (forked from the zygote, or as `python -m training.harness_child CONFIG_JSON`)
with two pipe fds, in one of two stages:
- "train": import the recipe, train it on the batches the runner sends (it stops them when the
  budget is spent), save the trained model to `model.pt` and end;
- "evaluate": load that model in a fresh process that has seen no other window, answer one batch
  of evaluation windows with logits, and end (see training/fresh_eval.py for why).
Nothing here decides the metric: the runner computes val_bpb from the logits it receives.
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
EXIT_MODEL_LOAD = 5  # an evaluation process could not load the trained model
LOAD_FAILED = "the trained model could not be loaded for evaluation"  # printed with the error
MODEL_FILE = "model.pt"  # what the training stage leaves for the evaluation processes
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


def _confine(config: dict[str, Any], write: list[Path]) -> None:
    """Landlock (read the Python install and `scratch`; write only `write`), seccomp, no
    capabilities; exits with EXIT_NO_SANDBOX where they cannot apply, unless the user said so."""
    from training import sandbox

    scratch = Path(config["scratch"])
    package = Path(__file__).resolve().parent
    device_read, device_write = sandbox.device_paths(config["device"])
    read = sandbox.python_read_paths([package, scratch, *device_read])
    write = [*write, *device_write]
    applied = [sandbox.restrict_filesystem(read, write, reads_all=False)]
    gpu = config["device"].startswith("cuda")
    evaluating = config.get("stage") == "evaluate"
    cpu_rules = sandbox.EVALUATION if evaluating else sandbox.EXPERIMENT
    applied.append(sandbox.restrict_syscalls(sandbox.GPU_EXPERIMENT if gpu else cpu_rules))
    applied.append(sandbox.drop_capabilities())
    complete = applied[0].startswith("landlock abi") and applied[1] == "seccomp"
    unsafe = "" if complete else f" (unconfined: {sandbox.UNSAFE_FLAG})"
    if config.get("stage") != "evaluate" or not complete:  # once per run, not per batch
        print(f"sandbox: {', '.join(applied)}{unsafe}", file=sys.stderr, flush=True)
    from training import protocol as p

    # Said over the pipe, before any of the recipe runs: a recipe that prints the refusal and
    # exits with its code was taken for one (a red team). The runner takes "X" only first.
    if not complete and not config.get("unsafe_no_sandbox"):
        print(
            f"{NO_SANDBOX} ({applied[0]}; {applied[1]}); "
            f"the recipe was not run (pass {sandbox.UNSAFE_FLAG} to run it anyway)",
            file=sys.stderr,
            flush=True,
        )
        p.write_all(config["req_fd"], b"X")
        sys.exit(EXIT_NO_SANDBOX)
    p.write_all(config["req_fd"], b"S")


def _evaluate_one_batch(config: dict[str, Any]) -> None:
    """Load the trained model, then answer the one batch of windows this process is sent.
    The runner keeps what this process prints only until it asks for the windows."""
    import torch

    from training import protocol as p

    req, resp = config["req_fd"], config["resp_fd"]
    try:
        model = torch.load(
            Path(config["scratch"]) / MODEL_FILE,
            map_location=config["device"],
            weights_only=False,  # the model's classes travel by value (cloudpickle)
        )
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{MODEL_FILE} holds a {type(model).__name__}, not a torch.nn.Module")
        model.eval()
    except Exception:
        traceback.print_exc()
        print(LOAD_FAILED, file=sys.stderr, flush=True)
        sys.exit(EXIT_MODEL_LOAD)
    p.write_all(req, b"E")
    n, context = p.EVAL_ANSWER.unpack(p.read_exact(resp, p.EVAL_ANSWER.size))
    data = bytearray(p.read_exact(resp, n * context))  # the inputs: targets stay outside
    rows = torch.frombuffer(data, dtype=torch.uint8).view(n, context)
    with torch.no_grad():
        logits = model(rows.long().to(config["device"]))
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (n, context, p.VOCAB):
        sys.exit(EXIT_BAD_MODEL)
    p.write_all(req, b"O" + logits.detach().float().cpu().numpy().tobytes())


def _check_shape(model: Any, config: dict[str, Any]) -> None:
    """Say here, where the recipe's output is kept, if its logits have the wrong shape: an
    evaluation process may only exit (its text is not kept)."""
    import torch

    from training import protocol as p
    from training.evaluator import eval_batch

    context = config["dials"]["context"]
    n = eval_batch(context)
    model.eval()
    with torch.no_grad():
        logits = model(torch.zeros(n, context, dtype=torch.long, device=config["device"]))
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (n, context, p.VOCAB):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
        print(f"model returned {shape}, expected {(n, context, p.VOCAB)}", file=sys.stderr)
        sys.exit(EXIT_BAD_MODEL)


def _hand_over(model: Any, scratch: Path) -> None:
    """Save the trained model for the evaluation processes. cloudpickle carries the recipe's
    classes by value (recipe.py is not importable there, and a class may be local to train());
    a torch.compile wrapper is saved as the module it wraps."""
    import cloudpickle  # type: ignore[import-untyped]
    import torch

    torch.save(getattr(model, "_orig_mod", model), scratch / MODEL_FILE, pickle_module=cloudpickle)


def main() -> None:
    if sys.argv[1] == "--zygote":
        from training import zygote

        zygote.serve(int(sys.argv[2]))
    else:
        run_experiment(json.loads(sys.argv[1]))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # as a fork of the zygote ends: threads the recipe left do not hold it


def run_experiment(config: dict[str, Any]) -> None:
    """Confine this process, then run its stage (module docstring); exits through sys.exit."""
    import torch

    if not config["device"].startswith("cuda"):
        torch.set_num_threads(1)
    if config.get("stage") == "evaluate":
        _confine(config, write=[])  # nothing to write anywhere: no state outlives the batch
        _evaluate_one_batch(config)
        return
    req, resp = config["req_fd"], config["resp_fd"]
    scratch = Path(config["scratch"])
    _confine(config, write=[scratch])
    os.chdir(scratch)
    try:
        spec = importlib.util.spec_from_file_location("recipe", scratch / "recipe.py")
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
        _check_shape(model, config)
    except Exception:
        traceback.print_exc()
        sys.exit(EXIT_RECIPE_ERROR)
    try:
        _hand_over(model, scratch)
    except Exception as exc:
        traceback.print_exc()
        print(f"the trained model could not be saved for evaluation: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_MODEL)
    p.write_all(req, b"D")


if __name__ == "__main__":
    main()
