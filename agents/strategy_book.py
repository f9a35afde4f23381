"""Each LLM researcher's strategy file, and the versions of it the ledger knows.

The file lives in the workspace (`strategies/<agent>.md`), starts as a copy of its persona's
file in configs/strategies, and is rewritten by the meta-agent; a person may edit it too. Every
distinct text a researcher proposes under becomes a StrategyVersion (version 1 the first), so
each LLM call can say which version it carried. Versions are folded from the bus, history
first, so numbering goes on across restarts and hosts.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from bus.messages import StrategyVersion

FALLBACK = "# Strategy\nPropose the change you believe most likely to lower the metric.\n"


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class StrategyBook:
    def __init__(self, folder: Path, seeds: Path) -> None:
        self.folder = folder
        self.seeds = seeds
        self.latest: dict[str, StrategyVersion] = {}
        self.unsent: set[str] = set()  # own versions not yet back from the stream

    def path(self, agent: str) -> Path:
        return self.folder / f"{agent}.md"

    def read(self, agent: str, persona: str) -> str:
        """The researcher's strategy, its persona's file the first time."""
        path = self.path(agent)
        try:
            return path.read_text()
        except FileNotFoundError:
            pass
        seed = self.seeds / f"{persona}.md"
        text = seed.read_text() if seed.is_file() else FALLBACK
        self._write(path, text)
        return text

    def observe(self, version: StrategyVersion, own: bool = False) -> None:
        """Know a version: one of this host's as it is made (`own`; it keeps the host from
        snapshotting until the stream brings it back), any as the stream brings it."""
        if own:
            self.unsent.add(version.strategy_id)
        else:
            self.unsent.discard(version.strategy_id)
        known = self.latest.get(version.agent)
        if known is None or version.version > known.version:
            self.latest[version.agent] = version

    def version_of(self, agent: str, text: str) -> tuple[int, StrategyVersion | None]:
        """The version `text` is, and the record to publish when it is a new one (the first
        text, or a person's edit)."""
        sha = text_sha(text)
        known = self.latest.get(agent)
        if known is not None and known.sha == sha:
            return known.version, None
        number = known.version + 1 if known else 1
        record = StrategyVersion(
            f"strategy-{agent}-v{number}",
            agent,
            number,
            text,
            sha,
            author="initial" if known is None else "person",
            reason="its persona's strategy" if known is None else "the file was edited",
        )
        self.observe(record, own=True)
        return number, record

    def rewrite(self, record: StrategyVersion) -> None:
        """The meta-agent's new version: on disk first, then known."""
        self._write(self.path(record.agent), record.text)
        self.observe(record, own=True)

    def next_version(self, agent: str) -> int:
        known = self.latest.get(agent)
        return known.version + 1 if known else 1

    def _write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(text)
        os.replace(scratch, path)  # a reader sees the old file or the new one, never half
