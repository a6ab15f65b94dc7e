// TrainingWorx dashboard: polls /api/state and draws inline SVG. No external code, no CDN.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d"];
const RUN_STYLE = { ours: ["#2563eb", "experts (ours)"], dense_baseline: ["#dc2626", "dense fine-tuning"] };
const POLL_MS = 2000;

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function html(tag, attrs, parent, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function fmt(v, d = 3) { return v === null || v === undefined ? "–" : Number(v).toFixed(d); }
function fresh(id) { const box = document.getElementById(id); box.replaceChildren(); return box; }

// Domain id -> the name a person reads (the domain table's name or label), filled by render().
let DOMAIN_NAMES = {};
// Beyond this many domains (the state's compact_domains, monitor/compact.py) a cell is too
// small for its number: heatmaps show colour only across the page and call out their worst
// cells, the perplexity chart drops its legend and markers, tables show the latest rows.
let COMPACT = 14;
const LIST_ROWS = 12;
function compact(run) { return run && run.domains.length > COMPACT; }
function names(run) { return run.domain_names || run.domains; }
function dn(id) { return (id && DOMAIN_NAMES[id]) || id; }
// The name with the id beside it (ids stay the keys a person can search logs for).
function dnFull(id) {
  const span = html("span", { class: "dom", "data-domain": id || "" });
  if (!id) { span.textContent = "–"; return span; }
  const name = dn(id);
  if (name !== id) { html("span", {}, span, name); html("span", { class: "id" }, span, ` ${id}`); }
  else span.textContent = id;
  return span;
}

// Diverging colour: green (improved) .. pale yellow (0) .. red (forgotten).
function colour(delta, span) {
  if (delta === null || Number.isNaN(delta)) return "#f3f4f6";
  const t = Math.max(-1, Math.min(1, delta / span));
  const mix = (a, b, f) => Math.round(a + (b - a) * f);
  const mid = [254, 249, 195], good = [5, 122, 85], bad = [185, 28, 28];
  const end = t < 0 ? good : bad, f = Math.abs(t);
  return `rgb(${mix(mid[0], end[0], f)},${mix(mid[1], end[1], f)},${mix(mid[2], end[2], f)})`;
}

// Loss now minus the domain's best earlier loss (null where undefined, e.g. row 0).
function deltas(run) { return run.forgetting_matrix; }

function drawHeatmap(id, run, span) {
  const box = fresh(id);
  if (!run) { html("p", { class: "empty" }, box, "no rows yet"); return; }
  const small = compact(run);
  box.parentElement.classList.toggle("w12", small);  // a full row of the page for many columns
  box.parentElement.classList.toggle("w6", !small);
  const cw = small ? 22 : 86, ch = small ? 16 : 30, left = 130, top = 8, bottom = small ? 110 : 60;
  const w = left + cw * run.domains.length + 10, h = top + ch * run.steps.length + bottom;
  const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, width: "100%", "data-rows": run.steps.length,
                          "data-cols": run.domains.length, class: small ? "heatmap compact" : "heatmap" }, box);
  const d = deltas(run);
  run.steps.forEach((step, i) => {
    const g = el("g", { class: "hm-row", "data-step": step }, svg);
    el("text", { x: left - 8, y: top + ch * i + ch / 2 + 4, "text-anchor": "end", "font-size": small ? 10 : 12, fill: "#374151" },
       g, `${step}  ${run.step_labels[i]}`);
    run.domains.forEach((dom, j) => {
      const x = left + cw * j, y = top + ch * i;
      const rect = el("rect", { x, y, width: cw - 2, height: ch - 2, rx: small ? 1 : 3, fill: colour(d[i][j], span), class: "hm-cell" }, g);
      el("title", {}, rect, `${names(run)[j]} (${dom}) after step ${step}: loss ${fmt(run.loss[i][j])}, ppl ${fmt(run.perplexity[i][j], 1)}`);
      if (small) return;  // colour only: the numbers are in each cell's tooltip and the worst-cells table
      const strong = d[i][j] !== null && Math.abs(d[i][j]) > 0.6 * span;
      el("text", { x: x + cw / 2 - 1, y: y + ch / 2 + 4, "text-anchor": "middle", "font-size": 11,
                   fill: strong ? "#fff" : "#1f2937" }, g, run.perplexity[i][j] === null ? "–" : fmt(run.perplexity[i][j], 1));
    });
  });
  run.arrivals.forEach((a, j) => {
    if (a !== null) el("rect", { x: left + cw * j, y: top + ch * a, width: cw - 2, height: ch - 2, rx: small ? 1 : 3,
                                 fill: "none", stroke: "#111827", "stroke-width": small ? 1.5 : 2.5 }, svg);
  });
  const worst = worstCells(run);
  if (small) worst.forEach(c => el("rect", { x: left + cw * c.j - 1, y: top + ch * c.i - 1, width: cw, height: ch,
                                             fill: "none", stroke: "#7f1d1d", "stroke-width": 2, class: "hm-worst" }, svg));
  names(run).forEach((name, j) => {
    const x = left + cw * j + cw / 2, y = top + ch * run.steps.length + 12;
    el("text", { x, y, "text-anchor": "end", "font-size": small ? 10 : 11, fill: "#374151", class: "hm-domain",
                 "data-domain": run.domains[j], transform: `rotate(${small ? -60 : -30} ${x} ${y})` }, svg, name);
  });
  if (small && worst.length) {
    html("p", { class: "hint" }, box, `the ${worst.length} cells that lost most (outlined): loss above the domain's best earlier step`);
    const t = table(box, ["domain", "after step", "loss rise (nats/token)", "perplexity"], worst.map(c => [
      dnFull(run.domains[c.j]), `${run.steps[c.i]} ${run.step_labels[c.i]}`, fmt(c.delta), fmt(run.perplexity[c.i][c.j], 1)]));
    t.classList.add("worst-cells");
  }
}

// The cells with the largest loss rise above their domain's best earlier step (rise > 0).
function worstCells(run, count = 8) {
  const cells = [];
  deltas(run).forEach((row, i) => row.forEach((delta, j) => { if (delta !== null && delta > 0) cells.push({ i, j, delta }); }));
  return cells.sort((a, b) => b.delta - a.delta).slice(0, count);
}

// Ticks of a log axis spanning 10^lo..10^hi: powers of ten over two decades or more,
// else 1-2-5 steps, else four steps evenly spaced in log space.
function logTicks(lo, hi) {
  const within = v => Math.log10(v) >= lo && Math.log10(v) <= hi;
  const powers = [];
  for (let k = Math.ceil(lo); k <= Math.floor(hi); k++) powers.push(10 ** k);
  if (powers.length >= 3) return powers;
  const steps = [];
  for (let k = Math.floor(lo); k <= Math.ceil(hi); k++) [1, 2, 5].forEach(m => steps.push(m * 10 ** k));
  const nice = steps.filter(within);
  if (nice.length >= 3) return nice;
  return [0, 1, 2, 3].map(k => Number((10 ** (lo + (hi - lo) * (k + 0.5) / 4)).toPrecision(2)));
}

// Ticks of a linear axis: round steps (1, 2 or 5 times a power of ten), four to eight of them.
function linearTicks(lo, hi) {
  const raw = (hi - lo) / 5, power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => (hi - lo) / s <= 8);
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-12; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function lineChart(box, opts) {
  // opts: {series:[{name,legend,color,points:[[x,y|null]],cls,dash}], xs, xticks, markers:[x],
  //        log, zero, height}; markers are dashed lines only: no text is drawn over the data
  const w = Math.max(420, box.clientWidth || 760), h = opts.height || 300, l = 64, t = 14;
  const b = opts.xticks ? 48 : 34;
  const r = opts.compact ? 16 : Math.min(210, 24 + 7 * Math.max(...opts.series.map(s => (s.legend || s.name).length)));
  const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, width: "100%", class: opts.cls || "chart" }, box);
  const usable = v => v !== null && Number.isFinite(v) && (!opts.log || v > 0);
  const ys = opts.series.flatMap(s => s.points.map(p => p[1]).filter(usable));
  if (!ys.length) { html("p", { class: "empty" }, box, "nothing to plot yet"); return svg; }
  const f = opts.log ? Math.log10 : (v => v);  // the axis is linear in f(y)
  let lo = f(Math.min(...ys)), hi = f(Math.max(...ys));
  if (opts.zero) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
  if (hi - lo < 1e-9) { hi += 0.5; lo -= 0.5; }
  const pad = (hi - lo) * 0.08; lo -= pad; hi += pad;
  const xs = opts.xs, x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const X = x => l + (w - l - r) * (x - x0) / (x1 - x0), Y = y => t + (h - t - b) * (1 - (f(y) - lo) / (hi - lo));
  const ticks = opts.log ? logTicks(lo, hi) : linearTicks(lo, hi);
  if (opts.log) svg.setAttribute("data-scale", "log");
  ticks.forEach(v => {
    el("line", { x1: l, x2: w - r, y1: Y(v), y2: Y(v), stroke: "#f1f5f9" }, svg);
    el("text", { x: l - 6, y: Y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280", class: "ytick" },
       svg, opts.log ? v.toLocaleString("en") : String(v));
  });
  if (opts.zero && lo < 0 && hi > 0) el("line", { x1: l, x2: w - r, y1: Y(0), y2: Y(0), stroke: "#9ca3af" }, svg);
  const every = Math.ceil(xs.length / 16);  // tick labels that do not overlap: every k-th step
  xs.forEach((x, i) => {
    if (i % every) return;
    const label = el("text", { x: X(x), y: h - b + 16, "text-anchor": "middle", "font-size": 11, fill: "#6b7280" }, svg, x);
    if (opts.xticks && every === 1) el("tspan", { x: X(x), dy: 13, "font-size": 10 }, label, opts.xticks[i]);
  });
  if (opts.xlabel !== "") el("text", { x: l, y: h - 4, "font-size": 11, fill: "#6b7280" }, svg, opts.xlabel || "step");
  if (opts.log) el("text", { x: 4, y: t + 4, "font-size": 10, fill: "#6b7280" }, svg, "log");
  (opts.markers || []).forEach(x => {
    el("line", { x1: X(x), x2: X(x), y1: t, y2: h - b, stroke: "#9ca3af", "stroke-dasharray": "4 3", class: "arrival" }, svg);
  });
  opts.series.forEach((s, k) => {
    let d = "", pen = false;
    s.points.forEach(([x, y]) => {
      if (!usable(y)) { pen = false; return; }
      d += `${pen ? "L" : "M"}${X(x).toFixed(1)},${Y(y).toFixed(1)}`; pen = true;
    });
    const path = el("path", { d, fill: "none", stroke: s.color, "stroke-width": s.width || 2.2,
                              "stroke-dasharray": s.dash || "", class: "series", "data-name": s.name }, svg);
    el("title", {}, path, s.name);
    if (opts.compact) return;  // many series: thin lines; each names itself in its tooltip
    s.points.forEach(([x, y]) => { if (usable(y)) el("circle", { cx: X(x), cy: Y(y), r: 3, fill: s.color }, svg); });
    el("rect", { x: w - r + 12, y: t + 18 * k, width: 12, height: 4, fill: s.color }, svg);
    el("text", { x: w - r + 30, y: t + 18 * k + 6, "font-size": 11, fill: "#374151", class: "legend" }, svg, s.legend || s.name);
  });
  return svg;
}

function drawPerplexity(run) {
  const box = fresh("ppl");
  if (!run) { html("p", { class: "empty" }, box, "no rows yet"); return; }
  const series = names(run).map((name, j) => {
    const points = run.steps.map((s, i) => [s, run.perplexity[i][j]]);
    const final = points.map(p => p[1]).filter(v => v !== null).pop();
    const legend = final === undefined ? name : `${name} (${Number(final).toFixed(1)})`;
    return { name, legend, color: PALETTE[j % PALETTE.length], points, width: compact(run) ? 1.2 : undefined };
  });
  const markers = run.steps.filter((s, i) => run.experts[i]);
  const svg = lineChart(box, { series, xs: run.steps, xticks: run.step_labels, markers, log: true,
                               xlabel: "", cls: "ppl-chart", height: 340, compact: compact(run) });
  svg.setAttribute("id", "ppl-svg");
  svg.setAttribute("data-series", series.length);
}

function drawForgetting(runs) {
  const box = fresh("forgetting");
  const series = [], xs = new Set();
  for (const [key, run] of Object.entries(runs)) {
    if (!run) continue;
    const [color, label] = RUN_STYLE[key] || ["#374151", key];
    run.steps.forEach(s => xs.add(s));
    series.push({ name: `${label}: avg`, color, points: run.steps.map((s, i) => [s, run.forgetting_avg[i]]) });
    series.push({ name: `${label}: max`, color, dash: "5 4", width: 1.4, points: run.steps.map((s, i) => [s, run.forgetting_max[i]]) });
  }
  if (!series.length) { html("p", { class: "empty" }, box, "no rows yet"); return; }
  lineChart(box, { series, xs: [...xs].sort((a, b) => a - b), zero: true, cls: "forgetting-chart", height: 320 });
}

function cards(state) {
  const h = state.headline, box = fresh("cards");
  const items = [
    ["experts", h.experts], ["domains", h.domains],
    ["forgetting avg, ours", fmt(h.forgetting_avg)], ["forgetting avg, dense", fmt(h.baseline_forgetting_avg)],
    ["backward transfer, ours", fmt(h.backward_transfer)], ["backward transfer, dense", fmt(h.baseline_backward_transfer)],
    ["weight changes (must be 0)", h.weight_changes, h.weight_changes ? "bad" : "ok"],
    ["dead letters", h.dead_letters, h.dead_letters ? "bad" : ""],
  ];
  for (const [label, value, cls] of items) {
    const c = html("div", { class: `card ${cls || ""}` }, box);
    html("b", {}, c, String(value)); html("span", {}, c, label);
  }
}

function table(box, head, rows) {
  const t = html("table", {}, box), tr = html("tr", {}, t);
  head.forEach(x => html("th", {}, tr, x));
  rows.forEach(r => { const row = html("tr", {}, t); r.forEach(c => { const td = html("td", {}, row); if (c instanceof Node) td.appendChild(c); else td.textContent = c; }); });
  return t;
}

function drawTimeline(state) {
  const box = fresh("timeline"), run = state.runs.ours, jobs = Object.entries(state.live.jobs || {});
  if (jobs.length) {
    if (jobs.length > LIST_ROWS) html("p", { class: "hint" }, box, `training jobs: the ${LIST_ROWS} updated last of ${jobs.length}`);
    table(box, ["domain", "job", "state", "progress", "loss"], jobs.sort((a, b) => a[1].updated_ms - b[1].updated_ms).slice(-LIST_ROWS).map(([id, j]) => {
      const done = j.state === "finished" ? 1 : (j.total_steps ? j.step / j.total_steps : 0);
      const bar = html("div", { class: "bar" }); html("i", { style: `width:${(100 * done).toFixed(0)}%` }, bar);
      const pill = html("span", { class: `pill ${j.state}` }, null, j.state);
      return [dnFull(j.domain_id), id.slice(0, 16), pill, bar, fmt(j.loss)];
    }));
  }
  if (run) {
    const arrived = run.steps.map((s, i) => run.domains[run.arrivals.indexOf(s)]);
    const rows = run.steps.slice(1).map((s, i) => [
      s, run.experts[i + 1], arrived[i + 1] ? dnFull(arrived[i + 1]) : run.step_labels[i + 1].slice(1),
      new Date(run.created_ms[i + 1]).toLocaleTimeString()]);
    const shown = rows.length > LIST_ROWS ? `, the latest ${LIST_ROWS} of ${rows.length}` : "";
    html("p", { class: "hint" }, box, `registrations (evaluation steps${shown})`);
    table(box, ["step", "expert", "domain", "evaluated at"], rows.slice(-LIST_ROWS));
  } else if (!jobs.length) html("p", { class: "empty" }, box, "no experts yet");
}

function drawChecks(run) {
  const box = fresh("checks");
  if (!run) { html("p", { class: "empty" }, box, "no rows yet"); return; }
  const changes = run.weight_changes[run.weight_changes.length - 1];
  const p = html("p", {}, box);
  p.innerHTML = changes.length ? `<b style="color:#dc2626">WEIGHT FORGETTING: ${changes.length} problems</b>` :
    `<b style="color:#059669">no weight changed</b>: every tensor of the trunk and of every earlier expert is bit-identical`;
  if (changes.length) { const ul = html("ul", {}, box); changes.slice(0, 12).forEach(c => html("li", {}, ul, c)); }
  const share = run.routing_changed[run.routing_changed.length - 1], delta = run.routing_loss_delta[run.routing_loss_delta.length - 1];
  const doms = Object.keys(share);
  if (doms.length) html("p", { class: "hint" }, box, "re-routed docs: the share of a domain's held-out documents whose experts changed at the latest registration (expected when a new expert suits them better); it is a problem only where the loss change is above 0");
  if (doms.length) table(box, ["domain", "re-routed docs", "loss change from re-routing"], doms.map(d => [dnFull(d), `${(100 * share[d]).toFixed(0)}%`, fmt(delta[d])]));
}

// Each event: what fired, on which domain, and what it led to (a job and its outcome, or why
// none), as monitor.drift_explain tells it in state.drift.
function drawDrift(state) {
  const box = fresh("drift"), drift = state.drift || { events: [], tally: "" };
  const events = drift.events.slice(-8).reverse();
  if (!events.length) { html("p", { class: "empty" }, box, "no drift events"); return; }
  const shown = drift.events.length > events.length ? `, the latest ${events.length} first` : ", latest first";
  html("p", { class: "hint" }, box, `${drift.tally}${shown}`);
  table(box, ["when", "what fired", "domain", "what it led to"], events.map(e => [
    e.created_ms ? new Date(e.created_ms).toLocaleTimeString() : "", e.fired, dnFull(e.domain_id), e.led_to]));
}

function drawStream(live, store) {
  const box = fresh("stream"), totals = live.totals || {}, rates = live.rates || {};
  const topics = Object.keys(totals).sort();
  if (topics.length) table(box, ["topic", "messages", "per second (1 min)"], topics.map(t => [t, totals[t], fmt(rates[t] || 0, 2)]));
  else html("p", { class: "empty" }, box, "not connected to a stream");
  const dl = Object.entries(live.dead_letters || {});
  if (dl.length) { html("p", { class: "hint" }, box, "dead letters by reason"); table(box, ["reason", "count"], dl); }
  if (store && Object.keys(store).length) {
    html("p", { class: "hint" }, box, "expert store");
    table(box, ["experts", "bytes", "quarantined"], [[store.experts, store.bytes, store.quarantined]]);
  }
}

function render(state) {
  const runs = state.runs;
  COMPACT = state.compact_domains || COMPACT;
  DOMAIN_NAMES = { ...(state.names || {}) };
  Object.values(runs).filter(Boolean).forEach(r => r.domains.forEach((d, j) => { DOMAIN_NAMES[d] = names(r)[j]; }));
  const spans = Object.values(runs).filter(Boolean).flatMap(r => deltas(r).flat().filter(v => v !== null).map(Math.abs));
  const span = Math.max(1e-6, ...spans);
  cards(state);
  drawHeatmap("heatmap-ours", runs.ours, span);
  drawHeatmap("heatmap-dense_baseline", runs.dense_baseline, span);
  drawPerplexity(runs.ours);
  drawForgetting(runs);
  drawTimeline(state);
  drawChecks(runs.ours);
  drawDrift(state);
  drawStream(state.live || {}, state.store);
  document.getElementById("updated").textContent = `updated ${new Date(state.generated_ms).toLocaleTimeString()}`;
  document.body.setAttribute("data-rendered", state.generated_ms);
}

// With monitor.api_token set, open the page as .../#token=<token>: the fragment never
// reaches the server or its logs; the token is kept for this tab only and sent as a header.
function apiToken() {
  const match = location.hash.match(/token=([^&]+)/);
  if (match) {
    sessionStorage.setItem("worx-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("worx-token");
}
const TOKEN = apiToken();

let lastGenerated = null;
async function poll() {
  const live = document.getElementById("live");
  try {
    const headers = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};
    const res = await fetch("api/state", { cache: "no-store", headers });
    if (res.status === 401) throw new Error("this dashboard needs its token: open it as /#token=<monitor.api_token>");
    if (!res.ok) throw new Error(res.statusText);
    const state = await res.json();
    live.className = "on";
    if (state.generated_ms !== lastGenerated) { lastGenerated = state.generated_ms; render(state); }
  } catch (err) {
    live.className = "";
    document.getElementById("updated").textContent = `connection lost (${err.message}); retrying`;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
poll();
