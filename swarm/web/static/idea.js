// One idea's page: its hypothesis, patch, runs per tier and seed, verdicts and trace. Reloads
// its data every few seconds while the idea may still change.
"use strict";

function gain(ours, champion, lowerIsBetter) {
  if (ours === null || ours === undefined || champion === null || champion === undefined) {
    return "";
  }
  return num(lowerIsBetter ? champion - ours : ours - champion, 4);
}

function drawIdea(idea) {
  byId("idea-id").textContent = idea.idea_id;
  let by = "by " + idea.author + " on champion v" + idea.champion_version;
  if (idea.entry_tier) by += ", a second look entering at tier " + idea.entry_tier;
  if (idea.parent_ids && idea.parent_ids.length) by += ", from " + idea.parent_ids.join(", ");
  byId("byline").textContent = by;
  byId("hypothesis").textContent = idea.hypothesis;
  byId("patch").textContent = idea.patch;
  const lower = idea.lower_is_better !== false;
  fill("runs", idea.runs, (r) => [
    r.tier, r.champion_version, r.seed, r.status, num(r.metric, 4), num(r.baseline, 4),
    gain(r.metric, r.baseline, lower), gain(r.control_metric, r.baseline_control, lower),
    num(r.train_seconds, 1), num(r.eval_seconds, 1), r.device, r.reason,
  ]);
  fill("decisions", idea.decisions, (d) => [
    d.tier, d.champion_version, d.verdict, num(d.delta, 4), num(d.sigma, 4), d.n, d.runs,
    d.decided_by, d.rule,
  ]);
  fill("traces", idea.traces, (t) => [t.agent, t.action, t.read, t.proposed, t.why]);
}

async function load() {
  const id = decodeURIComponent(location.pathname.slice("/idea/".length));
  try {
    drawIdea(await getJson("/api/idea/" + encodeURIComponent(id)));
    byId("error").hidden = true;
  } catch (err) {
    byId("error").hidden = false;
    byId("error").textContent = text(err.message);
  }
  setTimeout(load, 5000);
}

document.addEventListener("DOMContentLoaded", load);
