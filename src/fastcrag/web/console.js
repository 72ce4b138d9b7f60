// fastcrag decision-trace console: asks the server's own LangGraph API (POST /runs/wait on the `crag` assistant)
// and draws the answer, citations and the CRAG trace. Plain JS, no build step, no external resources.
"use strict";

const ASSISTANT = "crag";
const KEY_SLOT = "fastcrag-api-key"; // sessionStorage: forgotten when the tab closes
const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

function text(id, value) {
  $(id).textContent = value === null || value === undefined || value === "" ? "—" : String(value);
}

function fmt(x) {
  return typeof x === "number" ? x.toFixed(3) : "—";
}

function contextFromForm() {
  const ctx = {};
  for (const name of ["reranker_threshold", "crag_upper"]) {
    const v = $(name).value.trim();
    if (v !== "") ctx[name] = parseFloat(v);
  }
  for (const name of ["top_n", "crag_max_rewrites"]) {
    const v = $(name).value.trim();
    if (v !== "") ctx[name] = parseInt(v, 10);
  }
  if (!$("crag_enabled").checked) ctx.crag_enabled = false;
  if ($("mode").value) ctx.mode = $("mode").value;
  return ctx;
}

function cell(row, value, className) {
  const td = document.createElement("td");
  td.textContent = value === null || value === undefined || value === "" ? "—" : String(value);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

// FLARE mode: one row per active retrieval (the uncertain sentence, its query, the band of what it found, what was
// done: add, refine or drop, and its step timings); hidden for a CRAG answer.
function drawFlare(crag) {
  const section = $("flare");
  const rows = crag.flare;
  section.hidden = !Array.isArray(rows);
  if (!Array.isArray(rows)) return;
  $("flare-summary").textContent =
    `${rows.length} active retrieval${rows.length === 1 ? "" : "s"}; writing stopped: ${crag.flare_stop || "—"}`;
  const body = $("flare-table").querySelector("tbody");
  body.replaceChildren();
  rows.forEach((r, i) => {
    const tr = document.createElement("tr");
    tr.className = `flare-row ${r.action || ""}`;
    tr.dataset.action = r.action || "";
    tr.dataset.band = r.band || "";
    cell(tr, i + 1);
    const sentence = cell(tr, r.sentence, "sentence");
    if (r.rewritten) {
      const again = document.createElement("div");
      again.className = "rewritten";
      again.textContent = `→ ${r.rewritten}`; // the sentence as written again on the added evidence
      sentence.appendChild(again);
    }
    cell(tr, `${r.query} (${r.query_by})`, "query");
    const band = document.createElement("td");
    const tag = document.createElement("span");
    tag.className = `band ${r.band || ""}`;
    tag.textContent = r.band || "FAILED"; // no band: the search or the grader failed (the sentence was dropped)
    if (r.failure) tag.title = r.failure;
    band.appendChild(tag);
    tr.appendChild(band);
    cell(tr, r.action, "action");
    const t = r.timings || {};
    cell(tr, Object.entries(t).filter(([, v]) => v > 0).map(([k, v]) => `${k.replace(/_ms$/, "")} ${v.toFixed(1)}`)
      .join(" · "), "timings");
    body.appendChild(tr);
  });
}

function svg(tag, attrs, content) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (content !== undefined) el.textContent = content;
  return el;
}

// One horizontal bar per candidate (score in [0, 1]), coloured by its verdict, with the two threshold lines.
function drawChart(verdicts, thresholds) {
  const holder = $("chart");
  holder.replaceChildren();
  const rows = verdicts.length ? verdicts : [];
  const labelW = 210, plotW = 520, rowH = 22, top = 28, bottom = 26;
  const width = labelW + plotW + 60;
  const height = top + Math.max(rows.length, 1) * rowH + bottom;
  const x = (s) => labelW + Math.max(0, Math.min(1, s)) * plotW;
  const chart = svg("svg", {
    id: "trace-chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "candidate scores against the thresholds",
  });
  // axis
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    chart.appendChild(svg("line", { x1: x(t), x2: x(t), y1: top - 4, y2: height - bottom, class: "grid" }));
    chart.appendChild(svg("text", { x: x(t), y: height - 8, class: "tick", "text-anchor": "middle" }, t.toFixed(2)));
  }
  if (!rows.length) {
    chart.appendChild(svg("text", { x: labelW, y: top + 15, class: "empty" }, "no candidates"));
  }
  rows.forEach((v, i) => {
    const y = top + i * rowH;
    const label = `${v.source || "?"} · ${v.chunk_id}`;
    chart.appendChild(svg("text", { x: labelW - 8, y: y + 15, class: "label", "text-anchor": "end" },
      label.length > 30 ? label.slice(0, 29) + "…" : label));
    const score = typeof v.score === "number" ? v.score : 0; // UNGRADED: grading stopped before it
    const bar = svg("rect", {
      x: labelW, y: y + 3, width: Math.max(1, x(score) - labelW), height: rowH - 6,
      class: `bar ${v.verdict}`, "data-verdict": v.verdict, "data-score": v.score, "data-chunk": v.chunk_id,
    });
    bar.appendChild(svg("title", {}, `${label}: ${fmt(v.score)} ${v.verdict}`));
    chart.appendChild(bar);
    chart.appendChild(svg("text", { x: x(score) + 4, y: y + 15, class: "value" }, fmt(v.score)));
  });
  if (thresholds) {
    for (const [name, cls] of [["reranker_threshold", "lower"], ["crag_upper", "upper"]]) {
      const t = thresholds[name];
      if (typeof t !== "number") continue;
      chart.appendChild(svg("line", {
        x1: x(t), x2: x(t), y1: top - 10, y2: height - bottom, class: `threshold ${cls}`, "data-name": name,
        "data-value": t,
      }));
      chart.appendChild(svg("text", {
        x: x(t), y: cls === "lower" ? 12 : 24, class: `threshold-label ${cls}`, "text-anchor": "middle",
      }, `${name} ${fmt(t)}`));
    }
  }
  holder.appendChild(chart);
}

function render(out) {
  const crag = out.crag || {};
  text("answer", out.answer);
  const list = $("citations");
  list.replaceChildren();
  for (const c of out.citations || []) {
    const li = document.createElement("li");
    li.className = "citation";
    li.textContent = `${c.source} · chunk ${c.chunk_id} · score ${fmt(c.score)}`;
    list.appendChild(li);
  }
  if (!(out.citations || []).length) {
    const li = document.createElement("li");
    li.className = "none";
    li.textContent = "none (abstained)";
    list.appendChild(li);
  }
  text("trace-action", crag.action);
  text("trace-band", crag.band);
  $("trace-band").className = `band ${crag.band || ""}`;
  text("trace-top", fmt(crag.top_score));
  const th = crag.thresholds || {};
  text("trace-thresholds", crag.thresholds ? `${fmt(th.reranker_threshold)} / ${fmt(th.crag_upper)}` : null);
  text("trace-strips", crag.strips_kept);
  text("trace-rewrite", crag.rewritten_query);
  text("trace-failure", crag.failure);
  text("trace-reranker", crag.reranker);
  const timings = crag.timings || {};
  text("trace-timings", Object.entries(timings).map(([k, v]) => `${k.replace(/_ms$/, "")} ${v.toFixed(1)}`).join(" · "));
  drawChart(crag.verdicts || [], crag.thresholds);
  drawFlare(crag);
  $("result").hidden = false;
}

async function ask(question) {
  const started = performance.now();
  const status = $("status");
  status.textContent = "Asking…";
  status.className = "busy";
  $("ask").disabled = true;
  try {
    const headers = { "Content-Type": "application/json" };
    const key = $("api-key").value.trim();
    if (key) {
      headers.Authorization = `Bearer ${key}`;
      sessionStorage.setItem(KEY_SLOT, key);
    }
    const resp = await fetch("/runs/wait", {
      method: "POST",
      headers,
      body: JSON.stringify({ assistant_id: ASSISTANT, input: { question }, context: contextFromForm() }),
    });
    const body = await resp.json().catch(() => ({}));
    if (resp.status === 401) throw new Error("this server needs its API key: enter it in the API key field");
    if (!resp.ok) throw new Error(body.detail || body.message || `HTTP ${resp.status}`);
    if (body.__error__) throw new Error(`${body.__error__.error}: ${body.__error__.message}`);
    render(body);
    status.textContent = `Answered in ${((performance.now() - started) / 1000).toFixed(2)} s.`;
    status.className = "done";
  } catch (err) {
    status.textContent = `Error: ${err.message}`;
    status.className = "error";
  } finally {
    $("ask").disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const keyField = $("api-key");
  keyField.value = sessionStorage.getItem(KEY_SLOT) || "";
  keyField.addEventListener("change", () => {
    const key = keyField.value.trim();
    if (key) sessionStorage.setItem(KEY_SLOT, key);
    else sessionStorage.removeItem(KEY_SLOT);
  });
  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const q = $("question").value.trim();
    if (q) ask(q);
  });
  const q = new URLSearchParams(window.location.search).get("q");
  if (q) {
    $("question").value = q;
    ask(q);
  }
});
