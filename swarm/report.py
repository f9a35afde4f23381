"""`swarm report`: a progress plot and a self-contained HTML page, drawn from the ledger.

The data comes through a `Query` (one SQL statement in, an Arrow table out): `file_query` over a
stopped ledger file, or SQL over the bus for a running swarm. Reading: `report_data` (the
SELECTs and the rank correlation), `report_plot` (the PNG), `report_html` (the page).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from swarm.report_data import Query, file_query, load, spearman
from swarm.report_html import render_html
from swarm.report_plot import plot_progress

__all__ = ["Query", "ReportFiles", "file_query", "spearman", "write_report"]


@dataclass(frozen=True, slots=True)
class ReportFiles:
    png: Path
    html: Path


def write_report(
    query: Query, out_dir: Path, title: str = "research-swarm", lower_is_better: bool = True
) -> ReportFiles:
    """Write `out_dir/progress.png` and `out_dir/report.html` (each replaced atomically)."""
    data = load(query, lower_is_better)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(png=out_dir / "progress.png", html=out_dir / "report.html")
    tmp_png = out_dir / ".progress.png.tmp"
    plot_progress(data, tmp_png)
    png = tmp_png.read_bytes()
    os.replace(tmp_png, files.png)
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    tmp_html = out_dir / ".report.html.tmp"
    tmp_html.write_text(render_html(data, png, title, generated), encoding="utf-8")
    os.replace(tmp_html, files.html)
    return files
