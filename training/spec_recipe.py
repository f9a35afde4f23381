"""The whole recipe a RunSpec runs, as trainers and `swarm run` get it; runners apply nothing.

A RunSpec of schema v1.2 names its recipe by content address (`recipe_sha`): the trainer fetches
it from the recipe store (recipes/store.py), checked against that address, and runs it as it
is. An older RunSpec (no `recipe_sha`: made by an earlier release's ladder, still on a queue or
in a resumed workspace's stream) names a champion and a patch; for it alone the patch is
applied here, as trainers used to, and so is the patch of `swarm run --patch`.
"""

from __future__ import annotations

from bus.messages import RunResult, RunSpec, RunStatus
from recipes.patch import PatchRefused, apply
from training.process_outcome import result_fields


def from_patch(champion: str, patch: str, editable: str) -> str:
    """The champion with the patch applied (PatchRefused says why it does not apply)."""
    return apply(champion, patch, editable) if patch else champion


def refused(spec: RunSpec, device: str, trainer: str, why: str) -> RunResult:
    """The result of a run whose recipe could not be had: nothing ran."""
    base = result_fields(spec, device, trainer)
    return RunResult(**base, status=RunStatus.REFUSED, reason=why)


def patch_refusal(exc: PatchRefused) -> str:
    return f"patch refused: {exc}"


def patched_or_refused(
    spec: RunSpec, champion: str, editable: str, device: str, trainer: str
) -> str | RunResult:
    """The recipe of a RunSpec that names a champion and a patch; or, when the patch does not
    apply, the REFUSED result that says why (`swarm run --patch`, and the runners' tests)."""
    try:
        return from_patch(champion, spec.patch, editable)
    except PatchRefused as exc:
        return refused(spec, device, trainer, patch_refusal(exc))
