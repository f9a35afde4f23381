"""What a target is, without importing torch: its name, editable file, metric and direction,
and where its initial recipe comes from. The ladder and the agents need only this."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RECIPE = Path(__file__).parent / "recipes" / "bytelm.py"


@dataclass(frozen=True, slots=True)
class TargetInfo:
    name: str
    editable: str
    metric_name: str
    lower_is_better: bool
    initial_path: Path

    def initial_source(self) -> str:
        return self.initial_path.read_text()


BYTELM = TargetInfo("bytelm", "recipe.py", "val_bpb", True, RECIPE)
SYNTHETIC = TargetInfo(
    "synthetic", "recipe.py", "loss", True, Path(__file__).parent / "recipes" / "synthetic.py"
)
