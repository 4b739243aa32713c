// trainyard dashboard: one page, hash routing, plain JavaScript over the
// master's JSON API and event stream. Charts are drawn by uPlot (vendored).
// Views: #/ overview, #/tasks, #/task/ID, #/hosts, #/host/ID, #/sweeps,
// #/sweep/ID, #/compare?name=NAME or ?ids=1,2,3.
"use strict";

const STATUSES = ["PENDING", "DISPATCHED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"];
const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const PALETTE = ["#3558d4", "#e5533d", "#2f855a", "#b7791f", "#6b46c1", "#0f8fa8",
  "#c53080", "#5a6b1f", "#d07a00", "#4a5568"];
const LOG_TAIL = 200;
const LOG_KEEP = 2000;

// ---------------------------------------------------------------- helpers

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// Reads carry the session cookie (set by signing in: HTTP-only, so no
// script here ever sees it); changes carry the token as a header. A read
// refused for want of a token shows the sign-in form instead of the view.
async function api(path, options) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin" }, options));
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (!r.ok) {
    const msg = body && body.error ? body.error : `${r.status} ${r.statusText}`;
    const read = !options || !options.method || options.method === "GET";
    if (r.status === 401 && read) signIn(msg);
    throw new HttpError(r.status, msg);
  }
  return body;
}

// The sign-in form: the token becomes the session cookie of this tab's
// reads, and is kept in the tab (sessionStorage) for the cancel form.
function signIn(why) {
  const view = document.getElementById("view");
  if (document.getElementById("signin")) return;
  const token = el("input", { type: "password", id: "signin-token", placeholder: "API token", autocomplete: "off", size: "44" });
  const msg = el("p", { class: "muted", id: "signin-message" }, why || "");
  const form = el("form", { id: "signin", class: "panel" },
    el("h2", {}, "Sign in"),
    el("p", {}, "Each team sees only its own work here. Enter an API token: one from ",
      el("code", {}, "trainyard token create"), ", or the cluster's api token."),
    token, " ", el("button", { type: "submit", id: "signin-submit" }, "Sign in"), msg);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const me = await api("/v1/session", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: token.value.trim() }) });
      sessionStorage.setItem("trainyard-token", token.value.trim());
      setWho(me);
      show();
    } catch (e) {
      msg.textContent = e.status === 401 ? `the token was refused: ${e.message}` : e.message;
    }
  });
  view.replaceChildren(form);
  view.setAttribute("data-ready", "signin");
  token.focus();
}

function setWho(me) {
  const who = document.getElementById("who");
  if (!who) return;
  who.textContent = me ? (me.team ? `${me.name} · ${me.role} of ${me.team}` : `${me.name} · ${me.role}`) : "";
  document.getElementById("signout").hidden = !me;
}

async function signOut(ev) {
  ev.preventDefault();
  sessionStorage.removeItem("trainyard-token");
  try { await fetch("/v1/session", { method: "DELETE", credentials: "same-origin" }); } catch (_) { /* gone anyway */ }
  setWho(null);
  show();
}

function badge(s) { return el("span", { class: `badge s-${s}` }, s.replace("_", " ")); }
function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  const d = digits === undefined ? (Math.abs(v) >= 100 ? 1 : 3) : digits;
  return Number.isInteger(v) ? String(v) : v.toFixed(d);
}
function fmtTime(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }
function fmtAgo(ms) {
  if (!ms) return "–";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}
function fmtDuration(a, b) {
  if (!a) return "–";
  const s = ((b || Date.now()) - a) / 1000;
  if (s < 90) return `${s.toFixed(1)} s`;
  if (s < 5400) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}
function fmtUs(us) { return us === undefined || us === null ? "–" : us >= 1000 ? `${(us / 1000).toFixed(1)} ms` : `${us} µs`; }
function taskLink(id) { return el("a", { href: `#/task/${id}` }, `#${id}`); }
function hostLink(id) { return id ? el("a", { href: `#/host/${encodeURIComponent(id)}` }, id) : "–"; }
function panel(title, ...body) { return el("section", { class: "panel" }, title ? el("h2", {}, title) : null, ...body); }
function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : null }, h.label || h)))),
    el("tbody", {}, rows));
}
function errorBanner(e) { return el("div", { class: "banner" }, String(e.message || e)); }

// The live indicator: on while some event stream is open.
const live = { open: 0 };
function setLive(delta) {
  live.open += delta;
  document.getElementById("live").classList.toggle("on", live.open > 0);
}

// An event stream that the view's cleanup closes.
function follow(ctx, url, handlers) {
  const es = new EventSource(url);
  let counted = false;
  es.onopen = () => { if (!counted) { counted = true; setLive(1); } };
  for (const [name, fn] of Object.entries(handlers)) {
    es.addEventListener(name, (ev) => {
      let data = ev.data;
      try { data = JSON.parse(ev.data); } catch (_) { /* plain text */ }
      fn(data);
    });
  }
  ctx.cleanups.push(() => { es.close(); if (counted) setLive(-1); });
  return es;
}

function every(ctx, ms, fn) {
  const t = setInterval(fn, ms);
  ctx.cleanups.push(() => clearInterval(t));
}

// Calls fn at most once per `ms`, the last call always delivered.
function throttle(ms, fn) {
  let timer = null;
  let pending = false;
  return () => {
    if (timer) { pending = true; return; }
    fn();
    timer = setTimeout(function tick() {
      timer = null;
      if (pending) { pending = false; fn(); timer = setTimeout(tick, ms); }
    }, ms);
  };
}

// ----------------------------------------------------------------- charts

// Curves as points [[x, y], ...] sorted by x, resampled onto one grid (the
// union of their x values, or an even grid when that is large) by linear
// interpolation inside each curve's own range.
function grid(curves, maxPoints) {
  const xs = new Set();
  for (const c of curves) for (const [x] of c) xs.add(x);
  let g = [...xs].sort((a, b) => a - b);
  if (g.length > maxPoints) {
    const lo = g[0], hi = g[g.length - 1], n = maxPoints;
    g = Array.from({ length: n }, (_, i) => lo + ((hi - lo) * i) / (n - 1));
  }
  return g;
}

function resample(curve, xs) {
  const out = new Array(xs.length).fill(null);
  if (!curve.length) return out;
  let j = 0;
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i];
    if (x < curve[0][0] || x > curve[curve.length - 1][0]) continue;
    while (j < curve.length - 1 && curve[j + 1][0] < x) j++;
    const [x0, y0] = curve[j];
    const [x1, y1] = curve[Math.min(j + 1, curve.length - 1)];
    out[i] = x1 === x0 || x <= x0 ? (x <= x0 ? y0 : y1) : y0 + ((y1 - y0) * (x - x0)) / (x1 - x0);
  }
  return out;
}

// Mean, min, max and standard deviation across series at each grid point.
function spread(series, n) {
  const mean = [], min = [], max = [], lo = [], hi = [];
  for (let i = 0; i < n; i++) {
    const v = series.map((s) => s[i]).filter((y) => y !== null && Number.isFinite(y));
    if (!v.length) { mean.push(null); min.push(null); max.push(null); lo.push(null); hi.push(null); continue; }
    const m = v.reduce((a, b) => a + b, 0) / v.length;
    const sd = v.length > 1 ? Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (v.length - 1)) : 0;
    mean.push(m); min.push(Math.min(...v)); max.push(Math.max(...v)); lo.push(m - sd); hi.push(m + sd);
  }
  return { mean, min, max, lo, hi };
}

// A point's value for a curve key: "episode_return" or a metric's name.
function valueOf(p, key) {
  if (key === "episode_return") return p.episode_return;
  return p.metrics ? p.metrics[key] : undefined;
}

// One curve per attempt of a task, x = episode (or arrival order).
function curvesOf(points, key) {
  const by = new Map();
  points.forEach((p, i) => {
    const y = valueOf(p, key);
    if (y === null || y === undefined || !Number.isFinite(y)) return;
    const x = p.episode !== null && p.episode !== undefined ? p.episode : i;
    if (!by.has(p.attempt)) by.set(p.attempt, []);
    by.get(p.attempt).push([x, y]);
  });
  for (const c of by.values()) c.sort((a, b) => a[0] - b[0]);
  return by;
}

function metricKeys(points) {
  const keys = new Set();
  for (const p of points) for (const k of Object.keys(p.metrics || {})) keys.add(k);
  return [...keys].sort();
}

// A uPlot chart in `host`, resized with its container.
function chart(ctx, host, series, data, opts) {
  const width = Math.max(300, host.clientWidth || 600);
  const u = new uPlot(Object.assign({
    width, height: 220,
    scales: { x: { time: false } },
    axes: [{ label: (opts && opts.xLabel) || "episode" }, {}],
    series: [{ label: (opts && opts.xLabel) || "episode" }, ...series],
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
  }, opts && opts.extra), data, host);
  const ro = new ResizeObserver(() => u.setSize({ width: Math.max(300, host.clientWidth), height: 220 }));
  ro.observe(host);
  ctx.cleanups.push(() => { ro.disconnect(); u.destroy(); });
  return u;
}

function line(label, color, width, extra) {
  return Object.assign({ label, stroke: color, width: width || 1.5, spanGaps: true, points: { show: false } }, extra || {});
}

// Mean with a band (min–max or ±std) plus each curve faintly, for curves
// `named` ({label, curve}). Returns [series, data, bands].
function bandedChartData(named, band, meanLabel) {
  const xs = grid(named.map((n) => n.curve), 600);
  const ys = named.map((n) => resample(n.curve, xs));
  const s = spread(ys, xs.length);
  const [hiS, loS] = band === "std" ? [s.hi, s.lo] : [s.max, s.min];
  const series = [
    line(band === "std" ? "mean + std" : "max", "rgba(53,88,212,.25)", 1),
    line(band === "std" ? "mean − std" : "min", "rgba(53,88,212,.25)", 1),
    line(meanLabel || "mean", "#1d2f8a", 2.5),
    ...named.map((n, i) => line(n.label, PALETTE[i % PALETTE.length] + "88", 1)),
  ];
  const data = [xs, hiS, loS, s.mean, ...ys];
  const bands = [{ series: [1, 2], fill: "rgba(53,88,212,.14)" }];
  return { series, data, bands };
}

// ------------------------------------------------------------------ views

const views = [];
function route(pattern, render) { views.push({ pattern, render }); }

async function overview(ctx, view) {
  view.append(el("h1", {}, "Overview"));
  const body = el("div");
  view.append(body);
  const throughput = el("div", { class: "chart", id: "chart-activity" });
  let u = null;
  async function refresh() {
    let health, hosts, activity;
    try {
      [health, hosts, activity] = await Promise.all([
        fetch("/v1/health").then((r) => r.json()),
        api("/v1/hosts"),
        api("/v1/activity?minutes=30"),
      ]);
    } catch (e) { body.replaceChildren(errorBanner(e)); return; }
    const counts = health.tasks || {};
    const sched = health.scheduler || {};
    const connected = hosts.hosts.filter((h) => h.connected);
    const slots = connected.reduce((a, h) => a + h.slots, 0);
    const free = connected.reduce((a, h) => a + h.free_slots, 0);
    const recent = activity.minutes;
    const lastTen = recent.slice(-10);
    const sum = (k) => lastTen.reduce((a, m) => a + m[k], 0);
    const sweepLine = (s) => s ? `${fmtUs(s.duration_us)} · ${s.tasks} leases read · ${s.round_trips} Redis round trips · ${s.given_up} given up` : "none yet";
    body.replaceChildren(
      el("div", { class: "cards", id: "status-cards" },
        STATUSES.map((s) => el("a", { class: "card", href: `#/tasks?status=${s}` },
          el("div", { class: "n", "data-status": s }, String(counts[s] || 0)), el("div", { class: "l" }, badge(s))))),
      el("div", { class: "grid", style: "margin-top:16px" },
        panel("Cluster",
          el("dl", { class: "kv" },
            el("dt", {}, "health"), el("dd", { class: health.status === "ok" ? "ok" : "error" }, health.status),
            el("dt", {}, "database"), el("dd", {}, health.database),
            el("dt", {}, "Redis"), el("dd", {}, health.redis),
            el("dt", {}, "hosts connected"), el("dd", {}, `${connected.length} of ${hosts.hosts.length} known`),
            el("dt", {}, "slots"), el("dd", {}, `${free} free of ${slots}`),
            el("dt", {}, "queued / live"), el("dd", {}, `${sched.queued ?? "–"} / ${sched.live ?? "–"}`))),
        panel("Recovery",
          el("dl", { class: "kv" },
            el("dt", {}, "sweeps run"), el("dd", {}, String(sched.sweeps ?? "–")),
            el("dt", {}, "last sweep"), el("dd", {}, sched.last_sweep_ms_ago !== undefined && sched.last_sweep_ms_ago !== null ? `${(sched.last_sweep_ms_ago / 1000).toFixed(1)} s ago` : "–"),
            el("dt", {}, "last"), el("dd", {}, sweepLine(sched.last_sweep)),
            el("dt", {}, "slowest"), el("dd", {}, sweepLine(sched.slowest_sweep)),
            el("dt", {}, "reconciliation"), el("dd", {}, sched.reconcile ? `${sched.reconcile.leases} leases, ${fmtUs(sched.reconcile.duration_us)}` : "–"))),
        panel("Last 10 minutes",
          el("dl", { class: "kv" },
            el("dt", {}, "completed"), el("dd", {}, `${sum("completed")} (${(sum("completed") / 10).toFixed(1)}/min)`),
            el("dt", {}, "failed"), el("dd", { class: sum("failed") ? "error" : null }, String(sum("failed"))),
            el("dt", {}, "lost or undelivered"), el("dd", { class: sum("lost") ? "error" : null }, String(sum("lost"))),
            el("dt", {}, "cancelled"), el("dd", {}, String(sum("cancelled")))))),
      panel("Attempts ended per minute (last 30 minutes)", throughput));
    const xs = recent.map((m) => m.start_ms / 1000);
    const data = [xs, recent.map((m) => m.completed), recent.map((m) => m.failed), recent.map((m) => m.lost)];
    if (u) { u.setData(data); return; }
    u = new uPlot({
      width: Math.max(300, throughput.clientWidth || 900), height: 200,
      series: [{}, line("completed", "#2f855a", 2), line("failed", "#c53030", 2), line("lost", "#b7791f", 2)],
    }, data, throughput);
  }
  ctx.cleanups.push(() => { if (u) u.destroy(); });
  await refresh();
  every(ctx, 5000, refresh);
}

async function taskList(ctx, view, params) {
  const q = new URLSearchParams(params);
  view.append(el("h1", {}, "Tasks"));
  const form = el("form", { class: "filters", id: "task-filters" },
    el("label", {}, "status", el("select", { name: "status" },
      el("option", { value: "" }, "any"),
      STATUSES.map((s) => el("option", { value: s, selected: q.get("status") === s }, s)))),
    el("label", {}, "adapter", el("input", { name: "adapter", value: q.get("adapter") || "", placeholder: "python-trainer" })),
    el("label", {}, "name", el("input", { name: "name", value: q.get("name") || "", placeholder: "exact name" })),
    el("button", { type: "submit" }, "Filter"),
    q.get("name") ? el("a", { href: `#/compare?name=${encodeURIComponent(q.get("name"))}` }, "compare these curves") : null);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) f.set(k, v);
    location.hash = `#/tasks?${f}`;
  });
  view.append(form);
  const holder = el("div");
  view.append(holder);
  const limit = 50;
  async function refresh() {
    const f = new URLSearchParams();
    for (const k of ["status", "adapter", "name", "before"]) if (q.get(k)) f.set(k, q.get(k));
    f.set("limit", String(limit));
    let page;
    try { page = await api(`/v1/tasks?${f}`); } catch (e) { holder.replaceChildren(errorBanner(e)); return; }
    const rows = page.tasks.map((t) => {
      const p = t.progress || {};
      return el("tr", { "data-task": t.id },
        el("td", {}, taskLink(t.id)), el("td", {}, t.name || el("span", { class: "muted" }, "–")),
        el("td", {}, t.adapter), el("td", {}, badge(t.status)), el("td", { class: "num" }, String(t.attempt)),
        el("td", {}, hostLink(t.host)),
        el("td", { class: "num" }, p.episode ? `${p.episode}${p.total_episodes ? " / " + p.total_episodes : ""}` : "–"),
        el("td", { class: "num" }, fmtNum(p.episode_return)),
        el("td", {}, fmtAgo(t.created_at_ms)));
    });
    const next = new URLSearchParams(q);
    const last = page.tasks[page.tasks.length - 1];
    if (last) next.set("before", String(last.id));
    const newest = new URLSearchParams(q);
    newest.delete("before");
    holder.replaceChildren(
      el("div", { class: "panel" },
        table(["task", "name", "adapter", "status", { label: "attempt", num: true }, "host",
          { label: "episode", num: true }, { label: "return", num: true }, "created"], rows, { id: "task-table" }),
        rows.length ? null : el("p", { class: "muted" }, "No tasks match."),
        el("div", { class: "pager" },
          q.get("before") ? el("a", { href: `#/tasks?${newest}` }, "« newest") : null,
          page.tasks.length === limit ? el("a", { href: `#/tasks?${next}`, id: "older" }, "older »") : null)));
  }
  await refresh();
  if (!q.get("before")) follow(ctx, "/v1/events", { status: throttle(1000, refresh), progress: throttle(2000, refresh) });
}

function pointOfEvent(e) {
  const p = e.progress;
  return { attempt: p.attempt, episode: p.episode, episode_return: p.episode_return, metrics: p.metrics || {}, at_ms: p.at_ms };
}

async function loadHistory(id) {
  const points = [];
  let after = 0;
  for (;;) {
    const page = await api(`/v1/tasks/${id}/progress?after=${after}`);
    points.push(...page.points);
    if (!page.points.length || page.next === after) break;
    after = page.next;
    if (page.points.length < 10000) break;
  }
  return points;
}

// The task page's curves: episode return and each reported metric, fed
// from the stored history and then the event stream.
function taskCurves(ctx, holder) {
  const points = [];
  const seen = new Set();
  const charts = new Map();
  const key = (p) => `${p.attempt}:${p.episode ?? "t" + p.at_ms}`;
  function add(p) {
    const k = key(p);
    if (seen.has(k)) return false;
    seen.add(k);
    points.push(p);
    return true;
  }
  function draw() {
    const keys = ["episode_return", ...metricKeys(points)];
    for (const k of keys) {
      const by = curvesOf(points, k);
      const attempts = [...by.keys()].sort((a, b) => a - b);
      const xs = grid([...by.values()], 5000);
      const data = [xs, ...attempts.map((a) => resample(by.get(a), xs))];
      const count = [...by.values()].reduce((a, c) => a + c.length, 0);
      let c = charts.get(k);
      if (!c || c.attempts.join() !== attempts.join()) {
        if (c) { c.u.destroy(); c.box.remove(); }
        const box = el("div", { class: "chart panel", id: `chart-${k === "episode_return" ? "return" : "metric-" + k}`, "data-curve": k },
          el("h3", {}, k === "episode_return" ? "episode return" : k));
        holder.append(box);
        const series = attempts.map((a, i) => line(`attempt ${a}`, PALETTE[i % PALETTE.length], 1.5));
        const u = chart(ctx, box, series, data);
        c = { u, box, attempts };
        charts.set(k, c);
      } else {
        c.u.setData(data);
      }
      c.box.setAttribute("data-points", String(count));
    }
    if (!points.length && !holder.querySelector(".empty")) holder.append(el("p", { class: "muted empty" }, "No progress reported yet."));
    if (points.length) { const e = holder.querySelector(".empty"); if (e) e.remove(); }
  }
  return { add, draw: throttle(250, draw) };
}

// The log tail: the last lines, then the live stream while the task runs.
function logTail(ctx, id, liveTask) {
  const box = el("div", { class: "logs", id: "log-tail", "data-lines": "0" });
  const seen = new Set();
  let count = 0;
  function append(l) {
    const k = `${l.attempt}:${l.seq}`;
    if (seen.has(k)) return;
    seen.add(k);
    const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.append(el("div", { class: l.stream },
      el("span", { class: "meta" }, `#${l.attempt} ${new Date(l.at_ms).toLocaleTimeString([], { hour12: false })}`), l.text));
    while (box.childElementCount > LOG_KEEP) box.firstChild.remove();
    count++;
    box.setAttribute("data-lines", String(count));
    if (stick) box.scrollTop = box.scrollHeight;
  }
  function note(text) { box.append(el("div", { class: "note" }, text)); }
  (async () => {
    let first;
    try { first = await api(`/v1/tasks/${id}/logs?tail=${LOG_TAIL}`); } catch (e) {
      if (e.status === 404) { box.replaceChildren(el("div", { class: "note" }, "logs not available (this master does not keep trainer logs)")); box.setAttribute("data-unavailable", ""); return; }
      note(`cannot read the logs: ${e.message}`);
      return;
    }
    if (first.dropped) note(`${first.dropped} lines dropped`);
    first.lines.forEach(append);
    if (!first.lines.length) note("no output yet");
    if (liveTask()) {
      // The stream starts with the same tail (deduplicated by attempt and
      // seq) and ends once the task has ended; the browser would reopen it,
      // so it is closed then.
      const es = follow(ctx, `/v1/tasks/${id}/logs?follow=true&tail=${LOG_TAIL}`, {
        line: append,
        dropped: (d) => note(`${d.dropped} lines dropped (attempt ${d.attempt})`),
      });
      es.addEventListener("error", () => { if (!liveTask()) es.close(); });
    }
  })();
  return box;
}

function cancelControl(id, onDone) {
  const msg = el("span", { class: "muted", id: "cancel-message" });
  const token = el("input", { type: "password", id: "cancel-token", placeholder: "API token", autocomplete: "off", size: "22" });
  token.value = sessionStorage.getItem("trainyard-token") || "";
  const confirm = el("button", { type: "submit", class: "danger", id: "cancel-confirm" }, "Confirm cancel");
  const form = el("form", { class: "cancel-form", hidden: true }, token, confirm,
    el("button", { type: "button", class: "secondary", onclick: () => { form.hidden = true; open.hidden = false; } }, "Keep running"));
  const open = el("button", { type: "button", class: "danger", id: "cancel-task", onclick: () => { open.hidden = true; form.hidden = false; token.focus(); } }, "Cancel task…");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    confirm.disabled = true;
    try {
      const r = await api(`/v1/tasks/${id}/cancel`, { method: "POST", headers: { authorization: `Bearer ${token.value.trim()}` } });
      sessionStorage.setItem("trainyard-token", token.value.trim());
      msg.textContent = r.cancel_requested ? "cancel requested; the host is stopping it" : "cancelled";
      msg.className = "ok";
      form.hidden = true;
      confirm.disabled = false;
      onDone();
    } catch (e) {
      msg.textContent = e.status === 401 ? "the API token was refused" : e.message;
      msg.className = "error";
      confirm.disabled = false;
    }
  });
  return el("span", { class: "cancel-form" }, open, form, msg);
}

async function taskPage(ctx, view, _params, id) {
  let detail;
  try { detail = await api(`/v1/tasks/${id}`); } catch (e) { view.append(errorBanner(e)); return; }
  const title = el("span", {});
  const status = el("span", { id: "task-status" });
  const note = el("span", { class: "muted" });
  // Built once, so a refresh never takes the form from under the typing.
  const controls = el("span", {}, cancelControl(id, () => reload()));
  const head = el("h1", {}, title, status, controls, note);
  const summary = el("div");
  const curves = el("div", { class: "charts", id: "curves" });
  const attempts = el("div");
  const result = el("div");
  view.append(head, summary, panel("Curves", curves), attempts);
  const liveTask = () => !TERMINAL.has(detail.status);
  view.append(el("div", { class: "grid" }, panel("Log tail", logTail(ctx, id, liveTask)), result));

  function render() {
    const t = detail;
    const p = t.progress || {};
    title.replaceChildren(`Task #${t.id}`, t.name ? el("span", { class: "muted" }, " " + t.name) : null);
    status.setAttribute("data-status", t.status);
    status.replaceChildren(badge(t.status));
    controls.hidden = !liveTask() || t.cancel_requested;
    note.textContent = t.cancel_requested && liveTask() ? "cancel requested" : "";
    const pct = p.total_episodes ? Math.min(100, (100 * (p.episode || 0)) / p.total_episodes) : null;
    summary.replaceChildren(el("div", { class: "grid" },
      panel("Task", el("dl", { class: "kv" },
        el("dt", {}, "adapter"), el("dd", {}, `${t.adapter}${t.adapter_version ? "@" + t.adapter_version : ""}${t.kind ? " / " + t.kind : ""}`),
        el("dt", {}, "host"), el("dd", {}, hostLink(t.host), t.slot !== null && t.slot !== undefined ? ` slot ${t.slot}` : ""),
        el("dt", {}, "attempt"), el("dd", {}, `${t.attempt} of at most ${t.max_attempts} (${t.runs} started)`),
        el("dt", {}, "priority"), el("dd", {}, String(t.priority)),
        el("dt", {}, "created"), el("dd", {}, fmtTime(t.created_at_ms)),
        el("dt", {}, "ran"), el("dd", {}, t.started_at_ms ? `${fmtDuration(t.started_at_ms, t.finished_at_ms)}${t.finished_at_ms ? "" : " so far"}` : "not started"),
        t.waiting ? [el("dt", {}, "waiting"), el("dd", {}, t.waiting)] : null,
        t.progress_timeout_secs ? [el("dt", {}, "stalls after"), el("dd", {}, `${t.progress_timeout_secs} s without progress`)] : null,
        t.quiet_for_ms !== undefined && t.quiet_for_ms !== null
          ? [el("dt", {}, "quiet for"), el("dd", { id: "quiet-for" }, fmtDuration(1, 1 + t.quiet_for_ms))] : null,
        t.error ? [el("dt", {}, "error"), el("dd", { class: "error" }, t.error)] : null)),
      panel("Progress",
        el("div", { class: "cards" },
          el("div", { class: "card" }, el("div", { class: "n" }, p.episode !== undefined && p.episode !== null ? String(p.episode) : "–"), el("div", { class: "l" }, `episode${p.total_episodes ? " of " + p.total_episodes : ""}`)),
          el("div", { class: "card" }, el("div", { class: "n" }, fmtNum(p.episode_return)), el("div", { class: "l" }, "return"))),
        pct !== null ? el("div", { class: "progressbar" }, el("div", { style: `width:${pct}%` })) : null,
        p.message ? el("p", { class: "muted" }, p.message) : null),
      panel("Params", el("pre", {}, JSON.stringify(t.params, null, 2)))));
    attempts.replaceChildren(panel("Attempts", table(
      ["attempt", "host", "slot", "version", "dispatched", "ran", "outcome", "reason"],
      t.attempts.map((a) => el("tr", {},
        el("td", {}, String(a.attempt)), el("td", {}, hostLink(a.host)), el("td", {}, a.slot ?? "–"),
        el("td", {}, a.adapter_version || "–"),
        el("td", {}, fmtTime(a.dispatched_at_ms)), el("td", {}, a.started_at_ms ? fmtDuration(a.started_at_ms, a.finished_at_ms) : "–"),
        el("td", {}, a.outcome ? badge(a.outcome) : el("span", { class: "muted" }, "running")),
        el("td", { class: a.error ? "error" : "muted" }, a.error || "–"))), { id: "attempts" })));
    const r = t.result;
    const ck = t.checkpoint || (r && r.checkpoint);
    result.replaceChildren(panel("Result",
      r && Object.keys(r.metrics || {}).length
        ? table(["metric", { label: "value", num: true }], Object.entries(r.metrics).map(([k, v]) =>
          el("tr", {}, el("td", {}, k), el("td", { class: "num" }, fmtNum(v, 4)))), { id: "final-metrics" })
        : el("p", { class: "muted" }, TERMINAL.has(t.status) ? "No final metrics." : "Final metrics appear when the task completes."),
      r && r.summary ? el("p", {}, r.summary) : null,
      el("h2", { style: "margin-top:14px" }, "Checkpoint"),
      ck ? el("dl", { class: "kv" }, el("dt", {}, "kind"), el("dd", {}, ck.kind), el("dt", {}, "name"), el("dd", {}, ck.name),
        el("dt", {}, "size"), el("dd", {}, fmtBytes(ck.bytes)), el("dt", {}, "attempt"), el("dd", {}, String(ck.attempt)))
        : el("p", { class: "muted" }, "none")));
  }
  async function reload() {
    try { detail = await api(`/v1/tasks/${id}`); render(); } catch (_) { /* keep the last view */ }
  }
  render();

  // Subscribe first, then read the history, so no point falls between.
  const c = taskCurves(ctx, curves);
  const early = [];
  let loaded = false;
  const reloadSoon = throttle(500, reload);
  const renderSoon = throttle(1000, render);
  follow(ctx, `/v1/events?task=${id}`, {
    progress: (e) => {
      if (e.progress) {
        const p = pointOfEvent(e);
        if (loaded) { if (c.add(p)) c.draw(); } else early.push(p);
        detail.progress = e.progress;
        // Progress just came: the attempt is not quiet (the next reload says by how long).
        if (detail.quiet_for_ms !== undefined && detail.quiet_for_ms !== null) detail.quiet_for_ms = 0;
        renderSoon();
      }
    },
    status: reloadSoon,
    lagged: () => { loadHistory(id).then((ps) => { ps.forEach(c.add); c.draw(); }); },
  });
  const history = await loadHistory(id);
  history.forEach(c.add);
  early.forEach(c.add);
  loaded = true;
  c.draw();
  every(ctx, 5000, () => { if (liveTask()) reload(); });
}

// Why a host takes no new work: drained, or quarantined with the reason,
// its last error and its next probe task; empty for an open host.
function standingText(h) {
  const s = h.standing || {};
  const parts = [];
  if (s.quarantine) {
    const q = s.quarantine;
    parts.push(`quarantined ${fmtAgo(q.since_ms)}: ${q.reason}` + (q.last_error ? `; last error: ${q.last_error}` : "")
      + `; probe task ${q.next_probe_at_ms <= Date.now() ? "due" : "at " + fmtTime(q.next_probe_at_ms)}`);
  }
  if (s.drained_at_ms) parts.push(`drained ${fmtAgo(s.drained_at_ms)}`);
  return parts.join(" · ");
}

async function hostList(ctx, view) {
  view.append(el("h1", {}, "Hosts"));
  const holder = el("div");
  view.append(holder);
  async function refresh() {
    let r;
    try { r = await api("/v1/hosts"); } catch (e) { holder.replaceChildren(errorBanner(e)); return; }
    holder.replaceChildren(panel(null, table(
      ["host", "state", "standing", { label: "slots free", num: true }, "adapters", "running", "agent", "last heartbeat"],
      r.hosts.map((h) => el("tr", {},
        el("td", {}, hostLink(h.id)), el("td", {}, badge(h.connected ? "connected" : "gone")),
        el("td", { class: "standing" }, badge(h.state || "open"), " ", el("span", { class: "muted" }, standingText(h))),
        el("td", { class: "num" }, `${h.free_slots} / ${h.slots}`),
        el("td", {}, h.adapters.map((a) => el("span", { class: "tag" }, `${a.name} ${a.version}`))),
        el("td", {}, h.running.map((t) => [taskLink(t.task), " "])),
        el("td", { class: "muted" }, h.agent), el("td", {}, fmtAgo(h.last_seen_ms)))), { id: "host-table" })));
  }
  await refresh();
  every(ctx, 3000, refresh);
}

async function hostPage(ctx, view, _params, id) {
  const holder = el("div");
  view.append(holder);
  async function refresh() {
    let r;
    try { r = await api("/v1/hosts"); } catch (e) { holder.replaceChildren(errorBanner(e)); return; }
    const h = r.hosts.find((x) => x.id === id);
    if (!h) { holder.replaceChildren(el("h1", {}, `Host ${id}`), errorBanner(new Error(`no host ${id} has been seen`))); return; }
    const cap = h.capacity;
    holder.replaceChildren(
      el("h1", {}, `Host ${h.id}`, badge(h.connected ? "connected" : "gone")),
      el("div", { class: "grid" },
        panel("Host", el("dl", { class: "kv" },
          el("dt", {}, "address"), el("dd", {}, h.addr || "–"),
          el("dt", {}, "standing"), el("dd", { id: "host-standing" }, badge(h.state || "open"), " ", standingText(h)),
          el("dt", {}, "slots"), el("dd", { id: "host-slots" }, `${h.free_slots} free of ${h.slots}`),
          el("dt", {}, "capacity"), el("dd", {}, cap ? `${fmtNum(cap.cpus, 1)} CPUs, ${fmtBytes(cap.memory_bytes)}, ${cap.gpus.length} GPUs` : "–"),
          el("dt", {}, "free"), el("dd", {}, h.connected ? `${fmtNum(h.free.cpus, 1)} CPUs, ${fmtBytes(h.free.memory_bytes)}, ${h.free.gpus} GPUs` : "–"),
          el("dt", {}, "agent"), el("dd", {}, h.agent),
          el("dt", {}, "containment"), el("dd", {}, h.containment.length ? h.containment.map((c) => el("span", { class: "tag" }, c)) : "–"),
          el("dt", {}, "last heartbeat"), el("dd", {}, `${fmtAgo(h.last_seen_ms)} (${fmtTime(h.last_seen_ms)})`))),
        panel("Adapters", table(["adapter", "version", "kinds"], h.adapters.map((a) =>
          el("tr", {}, el("td", {}, a.name), el("td", {}, a.version), el("td", {}, a.kinds.join(", "))))))),
      panel("Running", h.running.length ? table(["task", "attempt", "status", "slot"], h.running.map((t) =>
        el("tr", {}, el("td", {}, taskLink(t.task)), el("td", {}, String(t.attempt)), el("td", {}, badge(t.status)), el("td", {}, t.slot ?? "–"))))
        : el("p", { class: "muted" }, "Nothing running.")));
  }
  await refresh();
  every(ctx, 3000, refresh);
}

async function sweepList(ctx, view) {
  view.append(el("h1", {}, "Sweeps"));
  let r;
  try { r = await api("/v1/sweeps?limit=100"); } catch (e) { view.append(errorBanner(e)); return; }
  const list = r.sweeps || [];
  view.append(panel(null, table(["sweep", "name", "adapter", "metric", "state", { label: "trials", num: true }, "by state", "created"],
    list.map((s) => el("tr", {},
      el("td", {}, el("a", { href: `#/sweep/${s.id}` }, `#${s.id}`)), el("td", {}, s.name || "–"), el("td", {}, s.adapter),
      el("td", {}, `${s.metric} (${s.direction})`), el("td", {}, badge(s.state)), el("td", { class: "num" }, String(s.trial_count)),
      el("td", {}, Object.entries(s.counts || {}).map(([k, v]) => el("span", { class: "tag" }, `${k.toLowerCase().replace("_", " ")} ${v}`))),
      el("td", {}, fmtAgo(s.created_at_ms))))),
  list.length ? null : el("p", { class: "muted" }, "No sweeps yet: trainyard sweep --help.")));
}

function paramText(params) {
  return Object.entries(params || {}).map(([k, v]) => `${k}=${typeof v === "number" ? fmtNum(v, 4) : v}`).join(", ");
}

// Progress of many tasks, a few requests at a time.
async function histories(ids) {
  const out = new Map();
  const queue = [...ids];
  async function worker() {
    while (queue.length) {
      const id = queue.shift();
      try { out.set(id, await loadHistory(id)); } catch (_) { out.set(id, []); }
    }
  }
  await Promise.all(Array.from({ length: 4 }, worker));
  return out;
}

async function sweepPage(ctx, view, params, id) {
  const q = new URLSearchParams(params);
  let s;
  try { s = await api(`/v1/sweeps/${id}`); } catch (e) { view.append(errorBanner(e)); return; }
  const band = q.get("band") === "std" ? "std" : "minmax";
  view.append(el("h1", {}, `Sweep #${s.id}`, s.name ? el("span", { class: "muted" }, s.name) : null, badge(s.state)));
  const rk = s.ranking;
  const rows = rk.configs.map((c, i) => el("tr", { class: rk.best === c.config ? "best" : null, "data-config": c.config },
    el("td", { class: "num" }, c.rank ?? "–"),
    el("td", {}, el("span", { class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}` }), paramText(c.params)),
    el("td", { class: "num" }, fmtNum(c.mean, 4)), el("td", { class: "num" }, c.std !== null && c.std !== undefined ? "± " + fmtNum(c.std, 4) : "–"),
    el("td", { class: "num" }, `${c.n} / ${c.trials}`), el("td", { class: "num" }, String(c.unfinished)),
    el("td", { class: "num" }, String(c.failed)), el("td", { class: "num" }, c.stopped_early ? `${c.stopped_early}${c.stopped_at ? " @" + c.stopped_at : ""}` : "0")));
  view.append(panel(`Ranking by ${s.metric} (${s.direction}), over seeds`,
    table([{ label: "rank", num: true }, "configuration", { label: "mean", num: true }, { label: "std", num: true },
      { label: "n / trials", num: true }, { label: "unfinished", num: true }, { label: "failed", num: true }, { label: "stopped early", num: true }], rows, { id: "ranking" }),
    rk.unfinished ? el("p", { class: "muted" }, `${rk.unfinished} trials unfinished: the ranking may change.`) : null));
  const curvesBox = el("div", { class: "chart", id: "sweep-curves" });
  view.append(panel("Episode return per configuration: mean over seeds, band " + (band === "std" ? "±1 std" : "min–max"),
    el("p", {}, el("a", { href: `#/sweep/${id}?band=${band === "std" ? "minmax" : "std"}` }, band === "std" ? "show min–max" : "show ±1 std")),
    curvesBox));
  view.append(panel("Trials", table(["task", "configuration", "seed", "state", { label: "episode", num: true }, { label: s.metric, num: true }],
    s.trials.map((t) => el("tr", {}, el("td", {}, taskLink(t.task)), el("td", {}, String(t.config)), el("td", {}, String(t.seed)),
      el("td", {}, badge(t.state)), el("td", { class: "num" }, t.episode ?? "–"), el("td", { class: "num" }, fmtNum(t.value, 4)))))));
  const trials = s.trials.slice(0, 400);
  const hist = await histories(trials.map((t) => t.task));
  const order = rk.configs.map((c) => c.config);
  const xsAll = [];
  const perConfig = order.map((config) => {
    const curves = trials.filter((t) => t.config === config)
      .map((t) => { const by = curvesOf(hist.get(t.task) || [], "episode_return"); return by.size ? by.get(Math.max(...by.keys())) : []; })
      .filter((c) => c.length);
    xsAll.push(...curves);
    return { config, curves };
  });
  if (!xsAll.length) { curvesBox.append(el("p", { class: "muted" }, "No progress reported yet.")); return; }
  const xs = grid(xsAll, 600);
  const series = [];
  const data = [xs];
  const bands = [];
  perConfig.forEach(({ config, curves }, i) => {
    const color = PALETTE[i % PALETTE.length];
    const st = spread(curves.map((c) => resample(c, xs)), xs.length);
    const label = `#${config} ${paramText(rk.configs[i].params)}`;
    const [hi, lo] = band === "std" ? [st.hi, st.lo] : [st.max, st.min];
    const base = data.length;
    series.push(line(`#${config} ${band === "std" ? "+std" : "max"}`, color + "33", 0.5),
      line(`#${config} ${band === "std" ? "−std" : "min"}`, color + "33", 0.5), line(label, color, 2));
    data.push(hi, lo, st.mean);
    bands.push({ series: [base, base + 1], fill: color + "22" });
  });
  curvesBox.setAttribute("data-configs", String(perConfig.length));
  chart(ctx, curvesBox, series, data, { extra: { bands, legend: { live: false } } });
}

async function compare(ctx, view, params) {
  const q = new URLSearchParams(params);
  const band = q.get("band") === "std" ? "std" : "minmax";
  const metric = q.get("metric") || "episode_return";
  view.append(el("h1", {}, "Compare curves"));
  const form = el("form", { class: "filters" },
    el("label", {}, "tasks named", el("input", { name: "name", value: q.get("name") || "", placeholder: "exact name" })),
    el("label", {}, "or task ids", el("input", { name: "ids", value: q.get("ids") || "", placeholder: "12,13,14" })),
    el("label", {}, "curve", el("input", { name: "metric", value: metric })),
    el("label", {}, "band", el("select", { name: "band" },
      el("option", { value: "minmax", selected: band === "minmax" }, "min–max"),
      el("option", { value: "std", selected: band === "std" }, "±1 std"))),
    el("button", { type: "submit" }, "Compare"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) f.set(k, v);
    location.hash = `#/compare?${f}`;
  });
  view.append(form);
  let ids = [];
  try {
    if (q.get("ids")) ids = q.get("ids").split(/[ ,]+/).filter(Boolean).map(Number).filter(Number.isInteger);
    else if (q.get("name")) ids = (await api(`/v1/tasks?name=${encodeURIComponent(q.get("name"))}&limit=200`)).tasks.map((t) => t.id);
  } catch (e) { view.append(errorBanner(e)); return; }
  if (!ids.length) { view.append(el("p", { class: "muted" }, "Name tasks to overlay: all tasks of one name, or a list of ids.")); return; }
  const hist = await histories(ids);
  const named = ids.map((id) => {
    const by = curvesOf(hist.get(id) || [], metric);
    return { label: `#${id}`, curve: by.size ? by.get(Math.max(...by.keys())) : [] };
  }).filter((n) => n.curve.length);
  const box = el("div", { class: "chart", id: "compare-curves", "data-tasks": String(named.length) });
  view.append(panel(`${metric}: ${named.length} tasks, their mean and ${band === "std" ? "±1 std" : "min–max"}`, box));
  if (!named.length) { box.append(el("p", { class: "muted" }, "None of these tasks reported this curve.")); return; }
  const { series, data, bands } = bandedChartData(named, band, "mean");
  chart(ctx, box, series, data, { extra: { bands } });
  view.append(panel("Tasks", el("p", {}, ids.map((id) => [taskLink(id), " "]))));
}

route(/^\/?$/, overview);
route(/^\/tasks$/, taskList);
route(/^\/task\/(\d+)$/, taskPage);
route(/^\/hosts$/, hostList);
route(/^\/host\/(.+)$/, hostPage);
route(/^\/sweeps$/, sweepList);
route(/^\/sweep\/(\d+)$/, sweepPage);
route(/^\/compare$/, compare);

// ----------------------------------------------------------------- router

let current = { cleanups: [] };

async function show() {
  for (const f of current.cleanups) { try { f(); } catch (_) { /* already gone */ } }
  const ctx = { cleanups: [] };
  current = ctx;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const view = document.getElementById("view");
  view.replaceChildren();
  const section = path.split("/")[1] || "overview";
  for (const a of document.querySelectorAll("[data-nav]")) {
    const nav = a.getAttribute("data-nav");
    a.classList.toggle("active", nav === section || nav + "s" === section || nav === section + "s");
  }
  for (const v of views) {
    const m = path.match(v.pattern);
    if (!m) continue;
    try {
      await v.render(ctx, view, query || "", ...m.slice(1).map(decodeURIComponent));
    } catch (e) {
      if (current === ctx && !document.getElementById("signin")) view.append(errorBanner(e));
    }
    if (document.getElementById("signin")) return;
    view.setAttribute("data-ready", path);
    // When the page first showed its data, for `make bench` and for anyone
    // timing the dashboard from the browser's performance timeline.
    performance.mark(`view-ready:${path}`);
    return;
  }
  view.append(errorBanner(new Error(`no page ${path}`)));
}

window.addEventListener("hashchange", show);
document.getElementById("signout").addEventListener("click", signOut);
api("/v1/whoami").then(setWho, () => setWho(null));
show();
