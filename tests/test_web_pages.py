"""The web view's data, on a real ledger file: what a researcher may record cannot blank it,
and a crowd of pages asking at once costs the ledger one answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bus.messages import LlmCall
from ledger.duckdb_store import LedgerStore
from swarm.config import SwarmConfig
from swarm.live_snapshot import TOTALS_SQL, usd_of
from swarm.web import pages
from swarm.web.app import _Shared
from swarm.web.source import FileSource, rows
from swarm.workspace import Workspace


def _ledger_with_costs(root: Path, *costs: float) -> Workspace:
    """A ledger file as the ledger writes it, holding LLM calls that say they cost `costs`."""
    workspace = Workspace(root)
    workspace.create()
    store = LedgerStore(workspace.ledger_path)
    try:
        store.write_batch(
            [
                LlmCall(
                    f"call-{i}",
                    "mallory",
                    "propose",
                    "anthropic",
                    "m",
                    "ok",
                    "p",
                    "x",
                    "",
                    "",
                    cost_usd=cost,
                )
                for i, cost in enumerate(costs)
            ]
        )
    finally:
        store.close()
    return workspace


def test_a_cost_past_what_a_sum_holds_blanks_nothing(tmp_path: Path) -> None:
    """An LlmCall is written by a researcher, who may say it cost 1e300 dollars: the totals
    the live view and the web view read say "infinity" for the spend, and still answer."""
    workspace = _ledger_with_costs(tmp_path / "ws", 1e300, 0.5)
    source = FileSource(workspace, SwarmConfig())
    totals = asyncio.run(rows(source, TOTALS_SQL))
    micro = next(r["n"] for r in totals if r["name"] == "micro_usd")
    assert usd_of(micro) == float("inf")
    page = asyncio.run(pages.overview(source, lower_is_better=True))
    assert page["llm_calls"] == 2 and page["llm_usd"] is None  # JSON has no infinity
    assert usd_of(_micro(tmp_path / "ok", 0.25)) == 0.25


def _micro(root: Path, cost: float) -> int:
    source = FileSource(_ledger_with_costs(root, cost), SwarmConfig())
    totals = asyncio.run(rows(source, TOTALS_SQL))
    return int(next(r["n"] for r in totals if r["name"] == "micro_usd"))


def test_pages_asking_at_once_share_one_answer() -> None:
    made = 0

    async def make() -> dict[str, int]:
        nonlocal made
        made += 1
        await asyncio.sleep(0.05)
        return {"made": made}

    async def crowd() -> list[dict[str, int]]:
        shared = _Shared(ttl_s=5)
        return await asyncio.gather(*(shared.get(make) for _ in range(20)))

    answers = asyncio.run(crowd())
    assert made == 1 and all(a == {"made": 1} for a in answers)
