"""What one LLM proposal costs, measured on the real prompts of a real swarm's history.

    swarm start --agents 4 --minutes 30 --workspace /tmp/ws30     # any finished swarm
    python bench/llm_prompt_cost.py /tmp/ws30

Replays the workspace's ledger into one researcher (as the agents' bridge would), builds the
prompt an LLM researcher would send at the end (the cached prefix: research direction, rules,
strategy, champion recipe; the varying part: findings, near-misses, failures, what is in play)
and prints its size and cost at the price table's rates: the first proposal writes the cache,
later ones (within the cache's 5 minutes) read it. Claude's tokenizer is not public, so tokens
are estimated from characters unless ANTHROPIC_API_KEY is set, in which case the API's
count_tokens endpoint counts them exactly (a free call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.answer_protocol import FORMAT  # noqa: E402
from agents.brain import Persona  # noqa: E402
from agents.heuristic_brain import HeuristicBrain, OfflineBrain  # noqa: E402
from agents.llm_client import Usage, cost_usd, load_prices  # noqa: E402
from agents.llm_prompt import researcher_prefix, researcher_request  # noqa: E402
from agents.researcher import Researcher  # noqa: E402
from bus.codec import decode  # noqa: E402
from bus.messages import SCHEMA_VERSION  # noqa: E402
from ledger.duckdb_store import open_database  # noqa: E402
from training.target_info import BYTELM  # noqa: E402

CHARS_PER_TOKEN = 3.5  # a rough figure for English and Python under Claude's tokenizer
TABLES = (("champions", "champion_change"), ("ideas", "idea"), ("decisions", "decision"))
TABLES += (("runs", "run_result"),)
ANSWER_TOKENS = 400  # a hypothesis and one or two SEARCH/REPLACE blocks


def rows(con: Any, table: str, kind: str) -> list[Any]:
    """The table's rows as bus messages, in the order they were made."""
    cursor = con.execute(f"SELECT * EXCLUDE (ingested_at) FROM {table}")
    names = [d[0] for d in cursor.description]
    found = []
    for values in cursor.fetchall():
        data = {n: _plain(v) for n, v in zip(names, values, strict=True)}
        envelope = {"kind": kind, "v": SCHEMA_VERSION, "data": data}
        found.append(decode(json.dumps(envelope).encode(), max_bytes=1 << 30))
    return found


def _plain(value: Any) -> Any:
    return value.timestamp() if isinstance(value, datetime) else value


def tokens(text: str) -> int:
    return round(len(text) / CHARS_PER_TOKEN)


async def exact_tokens(model: str, system: str, user: str) -> int | None:
    if not os.environ.get("ANTHROPIC_API_KEY"):
        return None
    import anthropic

    async with anthropic.AsyncAnthropic() as client:
        counted = await client.messages.count_tokens(
            model=model, system=system, messages=[{"role": "user", "content": user}]
        )
    return counted.input_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--model", default="claude-sonnet-4-6")
    args = parser.parse_args()
    con = open_database(args.workspace / "ledger.duckdb", read_only=True)
    events = [m for table, kind in TABLES for m in rows(con, table, kind)]
    events.sort(key=lambda m: getattr(m, "created_at", 0.0) or getattr(m, "finished_at", 0.0))
    researcher = Researcher(
        "bench-0-anthropic-explorer",
        OfflineBrain(HeuristicBrain(Persona.EXPLORER, 0)),
        BYTELM.editable,
        BYTELM.name,
        max_in_flight=2,
        top_tier=2,
    )
    for m in events:
        researcher.observe(m)
    desk = researcher.desk()
    program = (REPO / "configs" / "program.md").read_text()
    strategy = (REPO / "configs" / "strategies" / "explorer.md").read_text()
    prefix = researcher_prefix(desk, program, strategy)
    request = researcher_request(desk)
    exact = asyncio.run(exact_tokens(args.model, prefix, request))
    p_tokens, r_tokens = tokens(prefix), tokens(request)
    price = load_prices(REPO / "configs" / "llm_prices.toml")[args.model]
    first = cost_usd(Usage(r_tokens, ANSWER_TOKENS, 0, p_tokens), price)
    later = cost_usd(Usage(r_tokens, ANSWER_TOKENS, p_tokens, 0), price)
    uncached = cost_usd(Usage(p_tokens + r_tokens, ANSWER_TOKENS), price)
    print(f"ledger: {len(events)} events; champion v{desk.version}; {len(desk.findings)} ideas")
    print(f"format spec: {len(FORMAT)} chars")
    print(f"cached prefix: {len(prefix):,} chars ≈ {p_tokens:,} tokens")
    print(f"varying part:  {len(request):,} chars ≈ {r_tokens:,} tokens")
    if exact is not None:
        print(f"count_tokens ({args.model}): {exact:,} input tokens in all")
    print(f"answer: {ANSWER_TOKENS} tokens assumed (max_tokens caps it)")
    print(f"cost per proposal at {args.model} prices (USD):")
    print(f"  first (writes the cache)  {first:.4f}")
    print(f"  later (reads the cache)   {later:.4f}")
    print(f"  without caching           {uncached:.4f}")
    print(f"  proposals per dollar, cached: {1 / later:.0f}")


if __name__ == "__main__":
    main()
