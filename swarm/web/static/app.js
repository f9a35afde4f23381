// The swarm's page: asks /api/overview every refresh_s seconds and redraws in place.
"use strict";

let shownRuns = -1;
let pageLoads = 0; // how many overviews this page has drawn without reloading

function drawOverview(page) {
  pageLoads += 1;
  document.body.dataset.updates = String(pageLoads);
  byId("title").textContent = page.title;
  const state = byId("state");
  state.textContent = page.running ? "running" : "stopped";
  state.className = "state " + (page.running ? "running" : "stopped");
  const statuses = Object.entries(page.runs_by_status).map(([k, v]) => k + " " + v).join(", ");
  const verdicts = Object.entries(page.decisions_by_verdict).map(([k, v]) => k + " " + v).join(", ");
  let summary = "runs " + page.runs + (statuses ? " (" + statuses + ")" : "");
  summary += " · decisions " + (verdicts || "none");
  if (page.llm_calls) {
    const usd = page.llm_usd === null ? "(past what a sum holds)" : num(page.llm_usd, 4);
    summary += " · LLM $" + usd + " in " + page.llm_calls + " calls";
  }
  byId("summary").textContent = summary;
  if (page.runs !== shownRuns) {
    shownRuns = page.runs;
    redrawChart(page.runs);
  }
  fill("queues", page.queues, (q) => [q.tier, q.queued, q.running]);
  fill("experiments", page.experiments, (e) => {
    const bar = document.createElement("progress");
    bar.max = 1;
    if (e.progress !== null) bar.value = e.progress;
    const state = e.running ? "running " + ago(e.run_s) : "queued " + ago(e.age_s);
    return [e.tier, ideaLink(e.idea_id), e.seed, state, e.running ? bar : ""];
  });
  fill("researchers", page.researchers, (r) => [
    r.name, r.brain, r.persona, r.in_play, r.last_proposed || r.last_action,
    r.note,
  ]);
  fill("leaderboard", page.leaderboard, (b) => [
    b.tier, b.champion_version, ideaLink(b.idea_id === "(champion)" ? "" : b.idea_id), b.author,
    b.hypothesis, b.metric_name, num(b.mean_metric, 4), b.n_runs,
  ]);
  drawLineage(page.lineage);
  fill("decisions", page.decisions, (d) => [
    ideaLink(d.idea_id), d.tier, d.champion_version, d.verdict, num(d.delta, 4),
    num(d.sigma, 4), d.n, d.decided_by, d.rule,
  ]);
  fill("correlation", page.correlation, (c) => [c.from_tier, c.to_tier, c.ideas, num(c.spearman, 2)]);
  fill("llm", page.llm, (l) => [l.agent, l.provider, l.model, l.calls, l.refused, l.errors, num(l.cost_usd, 4)]);
  fill("dead", page.dead_letters, (d) => [d.subject, d.consumer, d.reason, d.raw_bytes]);
}

// The chart takes a second or so to draw: ask for a new one only when the last has arrived,
// and not more often than every CHART_EVERY_MS (a page whose image never finishes loading
// would never finish loading at all).
const CHART_EVERY_MS = 5000;
let chartAsked = 0;
let chartBusy = false;
function redrawChart(runs) {
  const chart = byId("chart");
  if (chartBusy || Date.now() - chartAsked < CHART_EVERY_MS) return;
  chartBusy = true;
  chartAsked = Date.now();
  const done = () => { chartBusy = false; };
  chart.addEventListener("load", done, { once: true });
  chart.addEventListener("error", done, { once: true });
  chart.src = "/chart/progress.svg?runs=" + encodeURIComponent(runs);
}

function drawLineage(lineage) {
  const blocks = lineage.map((c) => {
    const block = document.createElement("details");
    const head = "v" + c.version + " " + c.kind + (c.author ? " by " + c.author : "") +
      (c.hypothesis ? ": " + c.hypothesis : "");
    const summary = el("summary", head);
    block.appendChild(summary);
    if (c.idea_id) block.appendChild(el("p", ideaLink(c.idea_id)));
    if (c.patch) block.appendChild(el("pre", c.patch, "patch"));
    return block;
  });
  byId("lineage").replaceChildren(...blocks);
}

async function refresh() {
  let wait = 2;
  try {
    const page = await getJson("/api/overview");
    wait = page.refresh_s || 2;
    byId("error").hidden = true;
    drawOverview(page);
  } catch (err) {
    byId("error").hidden = false;
    byId("error").textContent = text(err.message);
  }
  setTimeout(refresh, wait * 1000);
}

async function whatIf() {
  const note = byId("whatif-note");
  note.textContent = "deciding again…";
  try {
    const answer = await getJson("/api/whatif?sweep=" + encodeURIComponent(byId("sweep").value));
    note.textContent = answer.fidelity;
    const rows = [];
    for (const s of answer.settings) for (const t of s.tiers) rows.push([s.label, ...t]);
    fill("whatif", rows, (r) => r);
  } catch (err) {
    note.textContent = text(err.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  byId("whatif-go").addEventListener("click", whatIf);
  refresh();
});
