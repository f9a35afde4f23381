"""The HTML report: one self-contained page (inline CSS, the plot as a data URI, no scripts and
no external assets). Every piece of text from the ledger is escaped."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from html import escape

from bus.messages import RunStatus, Verdict
from swarm.report_data import ChampionRow, Correlation, ReportData

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.1em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.muted { color: #777; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.better { color: #1a7f37; } .worse { color: #b42318; }
img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f8f8f8; border: 1px solid #e4e4e4; padding: 0.6em; overflow-x: auto;
      font-size: 12px; line-height: 1.35; }
pre .add { color: #1a7f37; } pre .del { color: #b42318; } pre .hunk { color: #6f42c1; }
.change { margin: 1.2em 0; }
"""


def render_html(data: ReportData, png: bytes, title: str, generated_at: str) -> str:
    image = base64.b64encode(png).decode("ascii")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">generated {escape(generated_at)}</p>',
        *_summary(data),
        "<h2>Progress</h2>",
        f'<img alt="progress per tier" src="data:image/png;base64,{image}">',
        *_leaderboard(data),
        *_correlations(data.correlations),
        *_lineage(data.champions, data.latest_source),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """`header` is escaped here; row cells arrive as finished HTML (<td> elements)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(f"<tr>{''.join(cells)}</tr>" for cells in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _td(text: object) -> str:
    return f"<td>{escape(str(text))}</td>"


def _num(value: float | int | None, fmt: str = ".4f", css: str = "num") -> str:
    text = "–" if value is None else format(value, fmt)
    return f'<td class="{css}">{escape(text)}</td>'


def _ordered(seen: Iterable[str], known: Iterable[str]) -> list[str]:
    """Known names in their declared order, then any others alphabetically."""
    seen = set(seen)
    first = [name for name in known if name in seen]
    return first + sorted(seen - set(first))


def _summary(data: ReportData) -> list[str]:
    runs = sum(data.status_counts.values())
    versions = [c.version for c in data.champions]
    current = f", current v{max(versions)}" if versions else ""
    facts = [
        f"experiments run: <b>{runs}</b>",
        f"ideas: <b>{data.n_ideas}</b>",
        f"decisions: <b>{data.n_decisions}</b>",
        f"champion versions: <b>{len(versions)}</b>{current}",
    ]
    out = ["<h2>Summary</h2>", "<p>" + " · ".join(facts) + "</p>"]
    statuses = _ordered(data.status_counts, [s.value for s in RunStatus])
    if statuses:
        out.append(_table(statuses, [[_num(data.status_counts[s], "d") for s in statuses]]))
    seen = {v for counts in data.verdict_counts.values() for v in counts}
    verdicts = _ordered(seen, [v.value for v in Verdict])
    if verdicts:
        rows = [
            [_td(tier), *(_num(counts.get(v, 0), "d") for v in verdicts)]
            for tier, counts in sorted(data.verdict_counts.items())
        ]
        out += ["<h3>Verdicts per tier</h3>", _table(["tier", *verdicts], rows)]
    return out


def _leaderboard(data: ReportData) -> list[str]:
    board, lower_is_better = data.leaderboard, data.lower_is_better
    stacked = {c.idea_id: c.version for c in data.champions if c.idea_id}
    out = ["<h2>Leaderboard</h2>"]
    if not board:
        return [*out, '<p class="muted">no successful idea runs yet</p>']
    out.append(
        '<p class="muted">best ideas per tier, by their mean against the champion\'s baseline '
        "mean on the same tier and champion version; gain: positive is better, as in the "
        "decisions</p>"
    )
    header = ["idea", "author", "hypothesis", "champion", "mean", "baseline", "gain", "runs"]
    for tier in sorted({row.tier for row in board}, reverse=True):
        rows = []
        for row in (r for r in board if r.tier == tier):
            delta = row.delta
            gain = None if delta is None else (-delta if lower_is_better else delta)
            css = "num" if not gain else ("num better" if gain > 0 else "num worse")
            won = f" (→ v{stacked[row.idea_id]})" if row.idea_id in stacked else ""
            rows.append(
                [
                    _td(row.idea_id + won),
                    _td(row.author),
                    _td(row.hypothesis),
                    _td(f"v{row.champion_version}"),
                    _num(row.mean_metric),
                    _num(row.baseline_mean),
                    _num(gain, "+.4f", css),
                    _num(row.n_runs, "d"),
                ]
            )
        out += [f"<h3>Tier {tier}</h3>", _table(header, rows)]
    return out


def _correlations(correlations: Sequence[Correlation]) -> list[str]:
    out = ["<h2>Rank correlation between adjacent tiers</h2>"]
    if not correlations:
        return [*out, '<p class="muted">no two adjacent tiers have runs yet</p>']
    out.append(
        '<p class="muted">Spearman correlation of the mean metric of ideas that ran OK on both '
        "tiers (same champion version); n/a below 3 ideas</p>"
    )
    rows = [
        [
            _td(f"{c.low_tier} → {c.low_tier + 1}"),
            _num(c.n, "d"),
            _num(c.rho, "+.3f") if c.rho is not None else _td("n/a"),
        ]
        for c in correlations
    ]
    return [*out, _table(["tiers", "n ideas", "spearman"], rows)]


def _diff(patch: str) -> str:
    lines = []
    for line in patch.splitlines():
        css = ""
        if line.startswith("@@"):
            css = "hunk"
        elif line.startswith("+") and not line.startswith("+++"):
            css = "add"
        elif line.startswith("-") and not line.startswith("---"):
            css = "del"
        text = escape(line)
        lines.append(f'<span class="{css}">{text}</span>' if css else text)
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _lineage(champions: Sequence[ChampionRow], latest_source: str) -> list[str]:
    out = ["<h2>Champion lineage</h2>"]
    if not champions:
        return [*out, '<p class="muted">no champion yet</p>']
    for c in champions:
        parent = f" ← v{c.parent_version}" if c.parent_version else ""
        idea = f" · idea {escape(c.idea_id)}" if c.idea_id else ""
        author = f" by {escape(c.author)}" if c.author else ""
        out.append(
            f'<div class="change"><h3>v{c.version}{parent} · {escape(c.kind)}{idea}{author}</h3>'
        )
        if c.hypothesis:
            out.append(f"<p>{escape(c.hypothesis)}</p>")
        if c.reason:
            out.append(f'<p class="muted">{escape(c.reason)}</p>')
        if c.patch:
            out.append(_diff(c.patch))
        out.append("</div>")
    if latest_source:
        out.append(
            f"<details><summary>recipe at v{champions[-1].version}</summary>"
            f"<pre>{escape(latest_source)}</pre></details>"
        )
    return out
