// Kinetic dashboard: the page. Plain DOM, no framework, no build step.
//
// Everything shown comes from the cluster (names, messages, logs, tracebacks
// written by Pods), so it only ever becomes text nodes and attribute values:
// nothing here parses markup from data. Charts are SVG drawn from numbers.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PHASES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
const main = () => document.getElementById("main");

// ------------------------------------------------------------------ building elements

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

function link(path, text) {
  return h("a", { href: path, "data-nav": true }, text);
}

function phaseTag(phase) {
  return h("span", { class: "phase phase-" + phase, "data-phase": phase }, phase);
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const t = Math.round(seconds);
  if (t < 60) return t + "s";
  if (t < 3600) return Math.floor(t / 60) + "m" + String(t % 60).padStart(2, "0") + "s";
  if (t < 86400) return Math.floor(t / 3600) + "h" + String(Math.floor(t % 3600 / 60)).padStart(2, "0") + "m";
  return Math.floor(t / 86400) + "d" + Math.floor(t % 86400 / 3600) + "h";
}

function bytes(n) {
  if (n === null || n === undefined) return "unknown";
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

function seg(value) {
  return encodeURIComponent(value);
}

// ------------------------------------------------------------------ talking to the server

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  const text = await response.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = { error: text }; }
  if (!response.ok) throw new Error((data && data.error) || response.status + " " + response.statusText);
  return data;
}

function refusal(error) {
  return h("div", { class: "refused", role: "alert" }, String(error.message || error));
}

// Server-sent events: one stream per tab, from the server's shared watches.
const listeners = new Set();
let source = null;

function connect() {
  source = new EventSource("/api/events");
  const live = document.getElementById("live");
  source.onopen = () => { live.textContent = "live"; live.classList.add("on"); };
  source.onerror = () => { live.textContent = "reconnecting"; live.classList.remove("on"); };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    for (const listener of listeners) listener(event);
  };
}

// At most one call of fn per animation frame, with the latest arguments.
function throttled(fn, wait) {
  let timer = null;
  let pending = false;
  return function () {
    if (timer) { pending = true; return; }
    fn();
    timer = setTimeout(() => { timer = null; if (pending) { pending = false; fn(); } }, wait || 250);
  };
}

// ------------------------------------------------------------------ confirmations and actions

function confirmDialog(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    const yes = document.getElementById("confirm-yes");
    const no = document.getElementById("confirm-no");
    const done = (answer) => { yes.onclick = null; no.onclick = null; dialog.close(); resolve(answer); };
    yes.onclick = () => done(true);
    no.onclick = () => done(false);
    dialog.showModal();
  });
}

// Dry-run on the server first: a refusal is shown before anything happens.
async function act(ask, where) {
  clear(where);
  where.appendChild(h("span", { class: "muted" }, "asking the API server (dry run)…"));
  let preview;
  try {
    preview = await api("/api/actions", { ...ask, confirm: false });
  } catch (e) {
    clear(where).appendChild(refusal(e));
    return;
  }
  clear(where);
  if (!preview.ok) {
    where.appendChild(h("div", { class: "refused", role: "alert", "data-refusal": true }, preview.says));
    return;
  }
  if (!(await confirmDialog(preview.says))) return;
  const done = await api("/api/actions", { ...ask, confirm: true });
  where.appendChild(h("div", { class: done.ok ? "note" : "refused", "data-outcome": true }, done.says));
}

function actionButton(label, ask, where, danger) {
  return h("button", {
    type: "button", class: danger ? "danger" : null, "data-action": ask.action,
    onclick: () => act(ask, where),
  }, label);
}

// ------------------------------------------------------------------ the list of jobs and batches

function listPage() {
  const params = new URLSearchParams(location.search);
  const rows = new Map();
  let streams = [];
  const phase = h("select", { id: "phase", "aria-label": "phase" },
    h("option", { value: "" }, "every phase"), PHASES.map((p) => h("option", { value: p }, p)));
  phase.value = params.get("phase") || "";
  const search = h("input", { id: "search", type: "search", placeholder: "search by name", value: params.get("q") || "" });
  const namespace = h("select", { id: "namespace", "aria-label": "namespace" });
  const addNs = h("input", { id: "add-namespace", placeholder: "add a namespace" });
  const added = h("span");
  const refusals = h("div", { id: "refusals" });
  const body = h("tbody");
  const table = h("table", { id: "objects" },
    h("thead", {}, h("tr", {}, ["Kind", "Namespace", "Name", "Runs", "Phase", "Progress", "Counts", "Age", "Duration"].map((t) => h("th", {}, t)))),
    body);

  const render = throttled(() => {
    const wantNs = namespace.value;
    const needle = search.value.trim().toLowerCase();
    const shown = [...rows.values()]
      .filter((r) => !wantNs || r.namespace === wantNs)
      .filter((r) => !phase.value || r.phase === phase.value)
      .filter((r) => !needle || r.name.toLowerCase().includes(needle) || String(r.title).toLowerCase().includes(needle))
      .sort((a, b) => (b.created || "").localeCompare(a.created || ""));
    clear(body);
    for (const r of shown) body.appendChild(listRow(r));
    if (!shown.length) body.appendChild(h("tr", {}, h("td", { colspan: 9, class: "muted" }, rows.size ? "nothing matches" : "no jobs or batches yet")));
    const names = [...new Set([...streams.map((st) => st.namespace).filter(Boolean), ...[...rows.values()].map((r) => r.namespace)])].sort();
    const chosen = namespace.value;
    clear(namespace).appendChild(h("option", { value: "" }, "every namespace shown"));
    for (const n of names) namespace.appendChild(h("option", { value: n }, n));
    namespace.value = names.includes(chosen) ? chosen : "";
    clear(refusals);
    for (const st of streams.filter((st) => st.refused)) {
      refusals.appendChild(h("div", { class: "refused", role: "alert", "data-namespace": st.namespace },
        (st.namespace || "all namespaces") + " (" + st.plural + "): " + st.refused));
    }
    const url = new URL(location.href);
    for (const [k, v] of [["phase", phase.value], ["q", search.value]]) {
      if (v) url.searchParams.set(k, v); else url.searchParams.delete(k);
    }
    history.replaceState(null, "", url);
  });

  for (const control of [phase, search, namespace]) control.addEventListener("input", render);
  addNs.addEventListener("keydown", async (e) => {
    if (e.key !== "Enter" || !addNs.value.trim()) return;
    try {
      await api("/api/namespaces", { namespace: addNs.value.trim() });
      clear(added).appendChild(h("span", { class: "muted" }, "watching " + addNs.value.trim()));
      addNs.value = "";
    } catch (err) { clear(added).appendChild(refusal(err)); }
  });

  const setStream = (event) => {
    const key = event.plural + "/" + event.namespace;
    streams = streams.filter((st) => st.plural + "/" + st.namespace !== key);
    streams.push({ plural: event.plural, namespace: event.namespace, refused: event.type === "refused" ? event.reason : null });
  };
  const listener = (event) => {
    if (event.type === "upsert") rows.set(event.row.kind + "/" + event.row.namespace + "/" + event.row.name, event.row);
    else if (event.type === "delete") rows.delete(event.row.kind + "/" + event.row.namespace + "/" + event.row.name);
    else if (event.type === "refused" || event.type === "synced") setStream(event);
    else if (event.type === "resync") load();
    else return;
    render();
  };
  const load = async () => {
    const data = await api("/api/objects");
    rows.clear();
    for (const r of data.rows) rows.set(r.kind + "/" + r.namespace + "/" + r.name, r);
    streams = data.streams;
    render();
  };
  listeners.add(listener);
  load().catch((e) => refusals.appendChild(refusal(e)));
  clear(main()).append(
    h("h1", {}, "Jobs and batches"),
    h("div", { class: "row card" }, namespace, phase, search, h("span", { class: "grow" }), addNs, added),
    refusals, table);
  return () => listeners.delete(listener);
}

function progressBar(row) {
  const total = row.total || 0;
  const counts = row.counts || {};
  const ok = total ? (counts.succeeded || 0) / total : 0;
  const bad = total ? ((counts.failed || 0) + (counts.cancelled || 0)) / total : 0;
  const fill = h("div", { class: "fill" });
  fill.style.width = (ok * 100).toFixed(2) + "%";
  const fail = h("div", { class: "fail" });
  fail.style.left = (ok * 100).toFixed(2) + "%";
  fail.style.width = (bad * 100).toFixed(2) + "%";
  return h("div", {
    class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total,
    "aria-valuenow": row.ended || 0, title: (row.ended || 0) + " of " + total + " ended",
  }, fill, fail);
}

function listRow(r) {
  const path = (r.kind === "batch" ? "/batches/" : "/jobs/") + seg(r.namespace) + "/" + seg(r.name);
  const c = r.counts || {};
  return h("tr", { "data-name": r.name, "data-kind": r.kind },
    h("td", {}, r.kind),
    h("td", {}, r.namespace),
    h("td", {}, link(path, r.name)),
    h("td", { class: "muted" }, r.title || ""),
    h("td", {}, phaseTag(r.phase), r.cancel && r.phase !== "CANCELLED" ? h("span", { class: "muted" }, " cancelling") : null),
    h("td", {}, r.kind === "batch" ? progressBar(r) : ""),
    h("td", { class: "counts-cell" }, r.kind === "batch"
      ? (c.succeeded || 0) + " ok · " + (c.running || 0) + " running · " + (c.failed || 0) + " failed · " + r.total + " total"
      : "attempt " + (r.attempt || 0)),
    h("td", { class: "num" }, duration(r.age)),
    h("td", { class: "num" }, duration(r.duration)));
}

// ------------------------------------------------------------------ charts (SVG by hand)

const W = 600, H = 160, PAD = 28;

function axes(svg, xLabel, yLabel) {
  svg.appendChild(s("line", { class: "axis", x1: PAD, y1: H - PAD, x2: W - 6, y2: H - PAD }));
  svg.appendChild(s("line", { class: "axis", x1: PAD, y1: 6, x2: PAD, y2: H - PAD }));
  svg.appendChild(s("text", { x: W - 6, y: H - 8, "text-anchor": "end" }, xLabel));
  svg.appendChild(s("text", { x: PAD + 4, y: 14 }, yLabel));
}

function completionsChart(data, total) {
  const svg = s("svg", { viewBox: "0 0 " + W + " " + H, id: "chart-completions", role: "img", "aria-label": "inputs ended over time" });
  const points = data.points || [];
  const tMax = points.length ? Math.max(points[points.length - 1][0], 1) : 1;
  axes(svg, duration(tMax), String(total));
  if (points.length) {
    const xy = points.map(([t, n]) => [PAD + (W - PAD - 6) * t / tMax, (H - PAD) - (H - PAD - 6) * n / Math.max(total, 1)]);
    svg.appendChild(s("polyline", { class: "line", points: xy.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ") }));
  }
  return svg;
}

function timelineChart(data) {
  const svg = s("svg", { viewBox: "0 0 " + W + " " + H, id: "chart-timeline", role: "img", "aria-label": "attempts by slot over time" });
  const span = Math.max((data.t1 || 0) - (data.t0 || 0), 1);
  const slots = Math.max(data.slots || 0, 1);
  const band = (H - PAD - 6) / slots;
  axes(svg, duration(span), data.slots + " slots");
  for (const [slot, start, end, kind, index, attempt] of data.segments || []) {
    const x = PAD + (W - PAD - 6) * start / span;
    const w = Math.max((W - PAD - 6) * (end - start) / span, 0.8);
    const rect = s("rect", {
      x: x.toFixed(2), y: (6 + slot * band).toFixed(2), width: w.toFixed(2), height: Math.max(band - 0.5, 0.5).toFixed(2),
      class: "seg-" + kind + (attempt > 1 ? " seg-retry" : ""),
    }, s("title", {}, "input " + index + ", attempt " + attempt + ": " + kind + " (" + duration(end - start) + ")"));
    svg.appendChild(rect);
  }
  return svg;
}

function histogramChart(data) {
  const svg = s("svg", { viewBox: "0 0 " + W + " " + H, id: "chart-histogram", role: "img", "aria-label": "durations of succeeded inputs" });
  const bins = data.bins || [];
  const top = Math.max(1, ...bins.map((b) => b[2]));
  axes(svg, bins.length ? duration(bins[bins.length - 1][1]) : "", String(top));
  const width = (W - PAD - 6) / Math.max(bins.length, 1);
  bins.forEach(([lo, hi, n], i) => {
    const height = (H - PAD - 6) * n / top;
    svg.appendChild(s("rect", { class: "hist", x: (PAD + i * width + 1).toFixed(2), y: (H - PAD - height).toFixed(2), width: Math.max(width - 2, 1).toFixed(2), height: height.toFixed(2) },
      s("title", {}, duration(lo) + "–" + duration(hi) + ": " + n)));
  });
  return svg;
}

function legend() {
  return h("div", { class: "legend" }, ["success", "failure", "disruption", "oom", "cancelled", "running"].map((k) =>
    h("span", {}, h("i", { class: "k-" + k }), k === "oom" ? "OOM kill" : k)), h("span", { class: "muted" }, "outlined: a retry"));
}

// ------------------------------------------------------------------ a batch

function batchPage(ns, name) {
  const base = "/api/batches/" + seg(ns) + "/" + seg(name);
  const params = new URLSearchParams(location.search);
  let status = params.get("status") || "";
  let page = Number(params.get("page") || 1);
  const head = h("div", { id: "batch-head" }, h("span", { class: "muted" }, "reading the batch…"));
  const outcome = h("div", { class: "outcome" });
  const charts = h("div", { class: "charts" });
  const tabs = h("div", { class: "tabs row" });
  const pager = h("div", { class: "pager" });
  const body = h("tbody");
  const failures = h("div", { id: "failures" });
  const table = h("table", { id: "inputs" },
    h("thead", {}, h("tr", {}, ["Input", "Phase", "Attempt", "Pod", "Duration", "Exit", "Reason", "Message"].map((t) => h("th", {}, t)))), body);

  const loadPage = async () => {
    const q = new URLSearchParams({ page: String(page), size: "100" });
    if (status) q.set("status", status);
    let data;
    try { data = await api(base + "/inputs?" + q); } catch (e) { clear(body).appendChild(h("tr", {}, h("td", { colspan: 8 }, refusal(e)))); return; }
    page = data.page;
    clear(body);
    if (data.rows.length && !performance.getEntriesByName("kinetic:first-table-page").length) {
      performance.mark("kinetic:first-table-page");  // what bench/dashboard.py times
    }
    for (const r of data.rows) {
      body.appendChild(h("tr", { "data-index": r.index, "data-phase": r.phase },
        h("td", {}, link("/batches/" + seg(ns) + "/" + seg(name) + "/inputs/" + r.index, String(r.index))),
        h("td", {}, phaseTag(r.phase)),
        h("td", { class: "num" }, String(r.attempt)),
        h("td", { class: "muted" }, r.pod || ""),
        h("td", { class: "num" }, duration(r.seconds)),
        h("td", { class: "num" }, r.exitCode === null ? "" : String(r.exitCode)),
        h("td", {}, r.reason || ""),
        h("td", {}, r.message || "")));
    }
    clear(tabs);
    for (const p of ["", ...PHASES]) {
      const n = p ? (data.counts[p] || 0) : Object.values(data.counts).reduce((a, b) => a + b, 0);
      tabs.appendChild(h("button", { type: "button", class: p === status ? "on" : null, "data-status": p || "ALL",
        onclick: () => { status = p; page = 1; remember(); loadPage(); } }, (p || "ALL") + " " + n));
    }
    clear(pager).append(
      h("button", { type: "button", disabled: page <= 1, onclick: () => { page -= 1; remember(); loadPage(); } }, "‹ previous"),
      h("span", { id: "page-of" }, "page " + data.page + " of " + data.pages + " (" + data.matching + " inputs)"),
      h("button", { type: "button", disabled: page >= data.pages, onclick: () => { page += 1; remember(); loadPage(); } }, "next ›"));
  };
  const remember = () => {
    const url = new URL(location.href);
    url.searchParams.set("page", String(page));
    if (status) url.searchParams.set("status", status); else url.searchParams.delete("status");
    history.replaceState(null, "", url);
  };

  const loadHead = async () => {
    let b;
    try { b = await api(base); } catch (e) { clear(head).appendChild(refusal(e)); return; }
    const c = b.counts || {};
    const ended = ["SUCCEEDED", "FAILED", "CANCELLED"].includes(b.phase);
    clear(head).append(
      h("h1", {}, "Batch " + b.name, " ", phaseTag(b.phase), b.cancel && b.phase !== "CANCELLED" ? h("span", { class: "muted" }, " cancel asked") : null),
      h("div", { class: "card" },
        h("div", { class: "row" }, h("span", { class: "muted" }, ns + " · " + (b.title || "") + (b.deleted ? " · deleted: read from its manifest" : "")),
          h("span", { class: "grow" }), b.summary && b.summary.kind ? progressBar(b.summary) : null),
        h("div", { class: "counts", id: "counts" }, ["total", "pending", "running", "succeeded", "failed", "cancelled"].map((k) =>
          h("div", { "data-count": k }, h("b", {}, String(k === "total" ? b.total : (c[k] || 0))), h("span", { class: "muted" }, k)))),
        b.message ? h("p", { class: "muted" }, b.message) : null,
        b.deleted ? null : h("div", { class: "row" },
          ended ? null : actionButton("Cancel batch", { action: "cancel-batch", namespace: ns, name: name }, outcome, true),
          ended && c.failed ? actionButton("Rerun failed inputs", { action: "rerun-failed", namespace: ns, name: name }, outcome) : null,
          actionButton("Delete batch", { action: "delete", kind: "batch", namespace: ns, name: name }, outcome, true)),
        outcome));
    clear(charts).append(
      h("div", { class: "card chart" }, h("h2", {}, "Inputs ended over time"), completionsChart(b.completions, b.total)),
      h("div", { class: "card chart" }, h("h2", {}, "Attempts by slot"), timelineChart(b.timeline), legend(),
        b.timeline.dropped ? h("div", { class: "muted" }, b.timeline.dropped + " older attempts not drawn") : null),
      h("div", { class: "card chart" }, h("h2", {}, "Durations of succeeded inputs"), histogramChart(b.histogram),
        b.histogram.count ? h("div", { class: "muted" }, b.histogram.count + " inputs, median " + duration(b.histogram.median)) : null));
    clear(failures);
    if (b.failures.length) {
      failures.append(h("h2", {}, "Failures"), h("div", { class: "row" },
        h("a", { href: base + "/failures.csv", download: true, id: "export-csv" }, "export CSV"),
        h("a", { href: base + "/failures.json", download: true, id: "export-json" }, "export JSON"),
        h("span", { class: "muted" }, "showing the first " + b.failures.length + " of " + (c.failed || b.failures.length))));
      for (const f of b.failures) {
        failures.appendChild(h("div", { class: "failure", "data-index": f.index },
          h("div", {}, link("/batches/" + seg(ns) + "/" + seg(name) + "/inputs/" + f.index, "input " + f.index), " ", h("span", { class: "muted" }, f.message || "")),
          f.traceback ? h("pre", { class: "traceback" }, f.traceback) : null));
      }
    }
  };

  const refresh = throttled(() => { loadHead(); loadPage(); }, 1000);
  const listener = (event) => {
    if (event.type === "view" && event.namespace === ns && event.name === name) refresh();
    else if (event.type === "resync") refresh();
  };
  listeners.add(listener);
  clear(main()).append(head, charts, h("h2", {}, "Inputs"), tabs, pager, table, failures);
  loadHead();
  loadPage();
  return () => listeners.delete(listener);
}

// ------------------------------------------------------------------ an input, a job

function onePage(ns, name, index) {
  const isInput = index !== null;
  const base = isInput ? "/api/batches/" + seg(ns) + "/" + seg(name) + "/inputs/" + index : "/api/jobs/" + seg(ns) + "/" + seg(name);
  const head = h("div", { id: "one-head" }, h("span", { class: "muted" }, "reading…"));
  const outcome = h("div", { class: "outcome" });
  const logBox = h("pre", { id: "log" }, "");
  const logNote = h("div", { class: "muted", id: "log-note" });
  const rankPick = h("select", { id: "rank", "aria-label": "rank", hidden: true });
  let rank = 0;
  let follow = null;

  const stopFollow = () => { if (follow) { follow.close(); follow = null; } };
  const loadLog = async () => {
    stopFollow();
    let got;
    try { got = await api(base + "/log?rank=" + rank); } catch (e) { clear(logNote).appendChild(refusal(e)); return; }
    logBox.textContent = got.text || "";
    logNote.textContent = got.live ? "following " + got.pod + " live" : got.pod ? "from Pod " + got.pod : "from the archive";
    if (got.live) {
      follow = new EventSource(base + "/follow?rank=" + rank);
      let first = true;
      follow.onmessage = (m) => {
        const part = JSON.parse(m.data);
        if (part.end) { stopFollow(); logNote.textContent = "the Pod ended; " + logNote.textContent; load(); return; }
        if (first) { logBox.textContent = ""; first = false; }  // the stream starts from the top
        logBox.appendChild(document.createTextNode(part.text));
        logBox.scrollTop = logBox.scrollHeight;
      };
    }
  };

  const load = async () => {
    let d;
    try { d = await api(base); } catch (e) { clear(head).appendChild(refusal(e)); return; }
    const title = isInput ? "Input " + index + " of " + name : "Job " + name;
    const terminal = ["SUCCEEDED", "FAILED", "CANCELLED", "NOT_FOUND"].includes(d.phase);
    clear(head).append(
      h("h1", {}, title, " ", phaseTag(d.phase)),
      h("div", { class: "card" },
        h("dl", { class: "kv" },
          isInput ? [h("dt", {}, "batch"), h("dd", {}, link("/batches/" + seg(ns) + "/" + seg(name), name))] : null,
          h("dt", {}, "namespace"), h("dd", {}, ns),
          h("dt", {}, "runs"), h("dd", {}, d.function || ""),
          h("dt", {}, "accelerator"), h("dd", {}, d.accelerator || ""),
          d.message ? [h("dt", {}, "message"), h("dd", { id: "message" }, d.message)] : null),
        terminal ? null : h("div", { class: "row" },
          isInput
            ? actionButton("Cancel this input", { action: "cancel-input", namespace: ns, name: name, index: index }, outcome, true)
            : actionButton("Cancel job", { action: "cancel-job", namespace: ns, name: name }, outcome, true)),
        isInput ? null : h("div", { class: "row" }, actionButton("Delete job", { action: "delete", kind: "job", namespace: ns, name: name }, outcome, true)),
        outcome),
      h("h2", {}, "Attempts"),
      h("table", { id: "attempts" },
        h("thead", {}, h("tr", {}, ["Attempt", "Pod", "Outcome", "Reason", "Exit", "Duration", "Message"].map((t) => h("th", {}, t)))),
        h("tbody", {}, (d.attempts || []).map((a) => h("tr", {},
          h("td", { class: "num" }, String(a.attempt)), h("td", {}, a.pod), h("td", {}, a.outcome),
          h("td", {}, a.reason || ""), h("td", { class: "num" }, a.exitCode === null ? "" : String(a.exitCode)),
          h("td", { class: "num" }, duration(a.seconds)), h("td", {}, a.message || ""))))),
      resultBox(d, base));
    rankPick.hidden = !(d.ranks > 1);
    if (d.ranks > 1 && rankPick.options.length !== d.ranks) {
      clear(rankPick);
      for (let r = 0; r < d.ranks; r++) rankPick.appendChild(h("option", { value: r }, "rank " + r + (r === 0 ? " (coordinator)" : "")));
      rankPick.value = String(rank);
    }
  };
  rankPick.addEventListener("change", () => { rank = Number(rankPick.value); loadLog(); });
  const listener = (event) => {
    if (event.type === "upsert" && event.row.namespace === ns && event.row.name === name && !follow) refreshOne();
  };
  const refreshOne = throttled(() => load(), 2000);
  listeners.add(listener);
  clear(main()).append(head, h("h2", {}, "Log ", rankPick), logNote, logBox);
  load().then(loadLog);
  return () => { listeners.delete(listener); stopFollow(); };
}

function resultBox(d, base) {
  const box = h("div", { class: "card", id: "result" }, h("h2", {}, "Result"));
  if (d.container) {
    box.appendChild(d.result === null || d.result === undefined
      ? h("div", { class: "muted" }, "a container's result is its termination message, once it succeeds")
      : h("pre", { id: "container-result" }, d.result));
    return box;
  }
  if (!d.resultURI) { box.appendChild(h("div", { class: "muted" }, "no result yet")); return box; }
  box.appendChild(h("dl", { class: "kv" },
    h("dt", {}, "stored at"), h("dd", {}, d.resultURI),
    h("dt", {}, "size"), h("dd", { id: "result-size" }, d.resultAtLeast ? "more than " + bytes(d.resultAtLeast) : bytes(d.resultBytes)),
    h("dt", {}, "sha256"), h("dd", { id: "result-sha" }, d.resultSHA256 || "none vouched for" + (d.unverifiable ? ": " + d.unverifiable : ""))));
  if (d.failure) {
    box.append(h("div", { class: "failure" }, h("b", {}, d.failure.exceptionType || "failure"), " ", d.failure.message || "",
      d.failure.traceback ? h("pre", { class: "traceback", id: "traceback" }, d.failure.traceback) : h("div", { class: "muted" }, "no traceback (the runner failed in phase " + d.failure.phase + ")")));
  }
  if (d.problem) box.appendChild(h("div", { class: "refused" }, d.problem));
  const shown = h("div", { id: "value" });
  box.append(h("p", { class: "muted" }, "The value is a pickle made by whoever ran this job: loading it runs their code in this dashboard's process. It is loaded only if you ask, after its sha256 is checked."),
    h("button", { type: "button", id: "load-value", onclick: async () => {
      if (!(await confirmDialog("Load the value? Unpickling runs code from whoever ran the job, in this dashboard's process, with your credentials."))) return;
      try {
        const v = await api(base + "/value", { unpickle: true });
        clear(shown).append(v.refused ? h("div", { class: "refused" }, v.refused) : h("pre", {}, v.type + ": " + v.repr + (v.cut ? "\n…(cut)" : "")));
      } catch (e) { clear(shown).appendChild(refusal(e)); }
    } }, "Load the value (runs its code)"), shown);
  return box;
}

// ------------------------------------------------------------------ the operator

function operatorPage() {
  const box = h("div", {}, h("span", { class: "muted" }, "reading…"));
  api("/api/operator").then((o) => {
    const policy = o.policy.found === true
      ? h("dl", { class: "kv", id: "policy" }, Object.entries(o.policy.data).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))
      : h("div", { class: o.policy.found === null ? "refused" : "muted", id: "policy" }, o.policy.detail);
    clear(box).append(
      h("div", { class: "card" }, h("h2", {}, "Replicas"), h("div", { id: "replicas", class: o.replicas.status === "ok" ? "" : "refused" }, o.replicas.detail)),
      h("div", { class: "card" }, h("h2", {}, "Leader"), h("div", { id: "leader", class: o.leader.status === "ok" ? "" : "refused" }, o.leader.detail)),
      h("div", { class: "card" }, h("h2", {}, "Policy in force"), policy));
  }).catch((e) => clear(box).appendChild(refusal(e)));
  clear(main()).append(h("h1", {}, "Operator"), box);
  return null;
}

// ------------------------------------------------------------------ routing (deep links)

let leave = null;

function route() {
  if (leave) leave();
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "batches" && parts.length === 3) leave = batchPage(parts[1], parts[2]);
  else if (parts[0] === "batches" && parts.length === 5 && parts[3] === "inputs") leave = onePage(parts[1], parts[2], Number(parts[4]));
  else if (parts[0] === "jobs" && parts.length === 3) leave = onePage(parts[1], parts[2], null);
  else if (parts[0] === "operator") leave = operatorPage();
  else leave = listPage();
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  history.pushState(null, "", a.getAttribute("href"));
  route();
});
window.addEventListener("popstate", route);
document.addEventListener("DOMContentLoaded", () => { connect(); route(); });
