"""The ladder's folded state on disk, so a restart replays only the events after it (the file,
its header and the checks every snapshot needs: bus/snapshot_file.py).

The ladder's header adds a digest of the seed secret (the secret itself stays in its own file;
the pickled state is written without it), and its file holds the service's set of the RunSpecs
in the stream (the experiment limit's count) with the state. Beyond the shared checks, a ladder
configured differently since (tiers, recipe, target, seed secret: the state was folded under
those) means a full replay.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

from bus import snapshot_file
from bus.snapshot_file import Checkpoint, Stale
from scale_ladder.baselines import Baselines
from scale_ladder.idea_state import IdeaState
from scale_ladder.intake import Intake
from scale_ladder.ladder import Ladder
from scale_ladder.lineage import Lineage
from scale_ladder.near_duplicates import PatchChange
from scale_ladder.noise_pool import NoisePool, NoisePools
from scale_ladder.promotion import Promotion
from scale_ladder.rules import Noise, PromotionRule
from scale_ladder.runs import Runs
from scale_ladder.spot_checks import Checks
from scale_ladder.tiers import Tier

# 4: the pooled noise caps each idea's part (noise_pool.py): a format-3 snapshot's cached
# racing prior was pooled without the cap, so it is replayed instead.
# 3: the state in parts (runs, intake, baselines, noise, promotion, lineage); a format-2
# snapshot pickled one LadderState, which this build has not
FORMAT = 4
# What the state was folded under: a ladder configured otherwise decides otherwise.
CONFIG_FIELDS = (
    "tiers",
    "editable",
    "initial_source",
    "target",
    "lower_is_better",
    "require_approval",
    "near_duplicate_similarity",
    "fixed",
)
# The classes a snapshot pickles: one from a build whose classes have other fields would load
# and fail later (a field missing from an old object).
STATE_CLASSES = (
    Ladder,
    Runs,
    Intake,
    Baselines,
    NoisePools,
    Promotion,
    Lineage,
    IdeaState,
    Tier,
    PromotionRule,
    Noise,
    NoisePool,
    Checks,
    PatchChange,
)
__all__ = ["Snapshot", "Stale", "load", "save"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    ladder: Ladder
    checkpoint: Checkpoint
    specs: frozenset[str]  # run ids of the RunSpecs in the stream (the experiment limit's count)


def save(path: Path, snapshot: Snapshot) -> None:
    header = snapshot_file.header_of(FORMAT, STATE_CLASSES, snapshot.checkpoint)
    header["secret"] = _digest(snapshot.ladder.seed_secret)
    state = dataclasses.replace(snapshot.ladder, seed_secret=b"")
    snapshot_file.save(path, header, (state, snapshot.specs))


def load(path: Path, configured: Ladder, stream: str, last_seq: int) -> Snapshot:
    """The snapshot at `path`, if it can stand for a full replay of the stream created at
    `stream`, now at `last_seq`, under `configured`'s settings; else Stale saying why (the
    caller checks that the stream still holds its checkpoint)."""
    header = snapshot_file.read_header(path)
    if header is None:
        raise FileNotFoundError(path)
    checkpoint = snapshot_file.check_header(header, FORMAT, STATE_CLASSES, stream, last_seq)
    if header.get("secret") != _digest(configured.seed_secret):
        raise Stale("the ladder's seed secret changed since")
    try:
        ladder, specs = snapshot_file.load_state(path)
    except (TypeError, ValueError):
        raise Stale("holds something else than a ladder and its RunSpecs") from None
    if not isinstance(ladder, Ladder):
        raise Stale(f"holds a {type(ladder).__name__}, not a ladder")
    changed = [f for f in CONFIG_FIELDS if getattr(ladder, f) != getattr(configured, f)]
    if changed:
        raise Stale(f"the ladder's {', '.join(changed)} changed since")
    ladder.seed_secret = configured.seed_secret
    return Snapshot(ladder, checkpoint, frozenset(specs))


def _digest(secret: bytes) -> str:
    return hashlib.sha256(b"research-swarm snapshot/" + secret).hexdigest()
