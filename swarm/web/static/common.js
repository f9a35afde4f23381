// Helpers of both pages. Every value shown comes from the swarm and may have been written by a
// researcher or an experiment: it is only ever set as text (textContent), never as markup, and
// links to ideas are built with encodeURIComponent. The server's Content-Security-Policy
// forbids any script but these files besides.
"use strict";

function byId(id) {
  return document.getElementById(id);
}

function text(value) {
  return value === null || value === undefined ? "" : String(value);
}

function num(value, digits) {
  return value === null || value === undefined ? "" : Number(value).toFixed(digits);
}

function el(tag, content, cls) {
  const node = document.createElement(tag);
  if (content instanceof Node) {
    node.appendChild(content);
  } else {
    node.textContent = text(content);
  }
  if (cls) node.className = cls;
  return node;
}

function ideaLink(id) {
  if (!id) return document.createTextNode("(champion)");
  const a = document.createElement("a");
  a.href = "/idea/" + encodeURIComponent(id);
  a.textContent = id;
  return a;
}

// Fill a table's body: one row per item, `cells(item)` gives its cells (text or nodes).
function fill(tableId, items, cells) {
  const body = byId(tableId).tBodies[0];
  const rows = items.map((item) => {
    const tr = document.createElement("tr");
    for (const c of cells(item)) tr.appendChild(el("td", c));
    return tr;
  });
  body.replaceChildren(...rows);
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 90) return Math.round(seconds) + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

async function getJson(url) {
  const response = await fetch(url, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}
