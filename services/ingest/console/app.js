// docflow console: a static page over ingest's /v1/admin API. No framework, no build step,
// nothing fetched from elsewhere (ingest embeds this file).
"use strict";

const TOKEN_KEY = "docflow.admin.token";
const OPERATOR_KEY = "docflow.console.operator"; // who discards, as the operator named themselves
const POLL_MS = 2000;
const KEEP_S = 3600; // lag history kept in the page (the server keeps --console-history)
const RANGES = [["5 min", 300], ["1 h", 3600]]; // what the charts can show
const RANGE_KEY = "docflow.console.range";
let rangeS = Number(sessionStorage.getItem(RANGE_KEY)) || 300;
const COLORS = ["#2f5fd0", "#c2361f", "#1f8f4e", "#c27c0e", "#7a3fc0", "#0f8a94", "#b0307a", "#56606f"];

const $ = (sel) => document.querySelector(sel);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({
  "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmt = (n, digits = 0) => (n === null || n === undefined) ? "–"
  : Number(n).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
const time = (ms) => ms ? new Date(ms).toLocaleTimeString("en-GB") : "–";
const bytes = (n) => n >= 1048576 ? fmt(n / 1048576, 1) + " MiB" : n >= 1024 ? fmt(n / 1024, 1) + " KiB" : fmt(n) + " B";

// Lag per group over time, kept in the page: {t, total, seconds, parts: {"topic/p": [records, seconds]}}.
const history = new Map();
const seeded = new Set(); // groups whose server-side history was loaded
const deadLetters = new Map(); // group -> {depth, waiting, letters, error, redrive}
const redriving = new Set(); // groups with a redrive request in flight
let timer = null;
let generation = 0; // a navigation starts a new polling chain; older ones stop
let thumbnailUrl = null;

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new Unauthorized("no token");
  const res = await fetch(path, { ...options,
    headers: { ...(options.headers || {}), Authorization: "Bearer " + token } });
  if (res.status === 401 || res.status === 403) {
    const body = await res.json().catch(() => ({}));
    throw new Unauthorized(body.message || res.statusText);
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    throw new Error(`${res.status}: ${body.message || res.statusText}`);
  }
  return res;
}
const apiJson = async (path, options) => (await api(path, options)).json();

function status(text, bad = false) {
  const s = $("#status");
  s.textContent = text;
  s.className = bad ? "bad" : "";
}

function showLogin(message) {
  clearTimeout(timer);
  $("#main").innerHTML = "";
  $("#login").hidden = false;
  $("#sign-out").hidden = true;
  $("#login-error").textContent = message || "";
  $("#token").focus();
}

// A partition's key in the lag history (a group may read several topics).
const partKey = (p) => `${p.topic}/${p.partition}`;

function record(group, now, broker) {
  const h = history.get(group) || [];
  const parts = {};
  for (const p of broker.partitions) parts[partKey(p)] = [p.lag_records, p.lag_seconds];
  h.push({ t: now, total: broker.lag_records, seconds: broker.lag_seconds, parts });
  while (h.length && h[0].t < now - KEEP_S * 1000) h.shift();
  history.set(group, h);
  return h;
}

// The group's lag before the page opened, from the server (the health sampler's points),
// ahead of what the page has recorded since.
async function seed(group) {
  if (seeded.has(group)) return;
  const r = await apiJson(`/v1/admin/groups/${encodeURIComponent(group)}/history`);
  seeded.add(group);
  const mine = history.get(group) || [];
  const from = mine.length ? mine[0].t : Infinity;
  const server = r.points.filter((p) => p.t < from).map((p) => ({ t: p.t, total: p.total, seconds: p.seconds, parts: p.parts }));
  history.set(group, server.concat(mine));
}

// An SVG line chart of `series` ([{name, cls, points: [[t, v]]}]) over the last rangeS,
// with a legend (each series' colour and last value; hover a line for its peak).
function chart(kind, title, series, now, unit) {
  const W = 320, H = 130, L = 34, R = 6, T = 16, B = 16;
  series = series.map((s) => ({ ...s, points: s.points.filter((p) => p[0] >= now - rangeS * 1000) }));
  const max = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1])));
  // The time axis spans what is known: a minute at first, up to the range chosen.
  const first = Math.min(now, ...series.flatMap((s) => s.points.map((p) => p[0])));
  const span = Math.min(rangeS * 1000, Math.max(60000, now - first));
  const x = (t) => L + (W - L - R) * (1 - (now - t) / span);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const digits = unit === "s" ? 1 : 0;
  const lastOf = (s) => s.points.length ? s.points[s.points.length - 1][1] : 0;
  const peakOf = (s) => Math.max(0, ...s.points.map((p) => p[1]));
  const colour = (s, i) => s.cls ? "" : COLORS[i % COLORS.length];
  const lines = series.map((s, i) => `<polyline class="${s.cls || ""}" stroke="${colour(s, i)}"
      data-series="${esc(s.name)}" points="${s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ")}"><title>${esc(s.name)}: now ${fmt(lastOf(s), digits)}${unit}, peak ${fmt(peakOf(s), digits)}${unit}</title></polyline>`);
  const legend = series.map((s, i) => `<span class="legend-item" data-series="${esc(s.name)}" title="peak ${fmt(peakOf(s), digits)}${unit}">
      <svg class="swatch" viewBox="0 0 10 4" aria-hidden="true"><rect width="10" height="4" fill="${s.cls ? "#1d2330" : colour(s, i)}"/></svg>${esc(s.name)} ${fmt(lastOf(s), digits)}${unit}</span>`).join("");
  const total = series[0] ? series[0].points : [];
  const last = total.length ? total[total.length - 1][1] : 0;
  const peak = Math.max(0, ...total.map((p) => p[1]));
  const ago = span >= 120000 ? `−${Math.round(span / 60000)} min` : `−${Math.round(span / 1000)} s`;
  return `<figure class="chart"><svg class="chart ${kind}" viewBox="0 0 ${W} ${H}"
      data-last="${last}" data-peak="${peak}" data-points="${total.length}" role="img" aria-label="${esc(title)}">
    <text x="${L}" y="11">${esc(title)}</text>
    <line class="grid" x1="${L}" x2="${W - R}" y1="${y(max)}" y2="${y(max)}"/>
    <line class="grid" x1="${L}" x2="${W - R}" y1="${y(max / 2)}" y2="${y(max / 2)}"/>
    <line class="grid" x1="${L}" x2="${W - R}" y1="${y(0)}" y2="${y(0)}"/>
    <text x="${L - 4}" y="${y(max) + 4}" text-anchor="end">${fmt(max, digits)}${unit}</text>
    <text x="${L - 4}" y="${y(max / 2) + 3}" text-anchor="end">${fmt(max / 2, digits)}${unit}</text>
    <text x="${L - 4}" y="${y(0) + 3}" text-anchor="end">0</text>
    <text x="${L}" y="${H - 4}">${ago}</text>
    <text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">${span >= 120000 ? `−${Math.round(span / 120000)} min` : `−${Math.round(span / 2000)} s`}</text>
    <text x="${W - R}" y="${H - 4}" text-anchor="end">now</text>
    ${lines.join("")}
  </svg><figcaption class="legend">${legend}</figcaption></figure>`;
}

function groupCard(g, now) {
  const b = g.broker, r = g.results;
  if (b.error) {
    return `<section class="group" data-group="${esc(g.group)}" data-error="1">
      <h2>${esc(g.group)} <span class="tag failed">broker unreachable</span></h2>
      <p class="error">${esc(b.error)}</p></section>`;
  }
  const h = record(g.group, now, b);
  const topics = g.topics || [];
  const several = topics.length > 1;
  // A partition by its number, and its topic where the group reads more than one.
  const label = (p) => (several ? `${p.topic} ` : "") + "p" + p.partition;
  const parts = b.partitions.map((p) => [partKey(p), label(p)]);
  const recordSeries = [{ name: "total", cls: "total", points: h.map((e) => [e.t, e.total]) }]
    .concat(parts.map(([k, name]) => ({ name, points: h.filter((e) => k in e.parts).map((e) => [e.t, e.parts[k][0]]) })));
  const secondSeries = [{ name: "oldest", cls: "total", points: h.map((e) => [e.t, e.seconds]) }]
    .concat(parts.map(([k, name]) => ({ name, points: h.filter((e) => k in e.parts).map((e) => [e.t, e.parts[k][1]]) })));
  const waiting = g.dlq_waiting ?? 0;
  const dl = deadLetters.get(g.group);
  const hp = new Map(((g.health || {}).partitions || []).map((v) => [partKey(v), v]));
  const verdict = (v) => v ? `<span class="tag health ${esc(v.status)}" title="${esc(v.reason)}">${esc(v.status)}</span>` : "";
  const partRows = b.partitions.map((p) => [p, hp.get(partKey(p))]).map(([p, v]) => `<tr data-topic="${esc(p.topic)}" data-partition="${p.partition}" data-health="${esc((v || {}).status || "")}">
      ${several ? `<td><code>${esc(p.topic)}</code></td>` : ""}<td>${p.partition}</td><td class="num">${p.committed ?? "–"}</td><td class="num">${p.log_end}</td>
      <td class="num">${fmt(p.lag_records)}</td><td class="num">${fmt(p.lag_seconds, 1)}</td>
      <td>${p.member ? esc(p.member) : '<span class="muted">unassigned</span>'}</td>
      <td>${p.paused ? '<span class="tag failed">paused</span>' : ""}</td>
      <td>${verdict(v)}${v && v.status !== "OK" ? ` <span class="muted">${esc(v.reason)}</span>` : ""}</td></tr>`).join("");
  const replicas = b.replicas.length
    ? b.replicas.map((r) => `<li class="replica" data-instance="${esc(r.instance)}" data-paused="${r.paused}">
        <code>${esc(r.host)}</code> pid ${r.pid} — partitions ${r.assigned.filter((a) => topics.includes(a.topic)).map((a) => esc(label(a))).join(", ") || "none"},
        ${r.in_flight}/${r.capacity} in flight${r.paused ? ' <span class="tag failed">paused: at capacity</span>' : ""}
        <span class="muted">(instance ${esc(r.instance)}, reported ${fmt(Math.max(0, now - r.at_ms) / 1000, 0)} s ago)</span></li>`).join("")
    : '<li class="muted">no replica reports (stages report every --status-interval to --status-topic)</li>';
  const members = b.members.length
    ? b.members.map((m) => m.client_id
      ? `<li><code>${esc(m.client_id)}</code> @ ${esc(m.host)} — partitions ${m.partitions.length ? m.partitions.map((a) => esc(label(a))).join(", ") : "none"}
        <span class="muted">(${esc(m.member_id)})</span></li>`
      : `<li><code>${esc(m.member_id)}</code> <span class="muted">(the broker gave no client id, host or assignment; see the replicas' reports)</span></li>`).join("")
    : '<li class="muted">no members: nothing is consuming</li>';
  const letters = dl && dl.letters.length ? `<table class="dead-letters"><thead><tr><th>dead-lettered</th><th>class</th>
      <th>message</th><th>document</th><th>from</th><th class="num">attempts</th><th>handled</th><th></th></tr></thead><tbody>
      ${dl.letters.map((d) => `<tr class="dead-letter" data-document="${esc(d.document_id)}" data-class="${esc(d.error_class)}"
          data-topic="${esc(d.topic)}" data-partition="${d.partition}" data-offset="${d.offset}" data-permanent="${d.permanent ?? ""}"
          data-handled="${d.redriven ? "redriven" : d.discarded ? "discarded" : ""}">
        <td>${time(d.dead_lettered_at_ms)}</td>
        <td><code>${esc(d.error_class)}</code>${d.permanent === true ? ' <span class="tag failed" title="the stage refused the document itself: a redrive fails again unless the stage changed">permanent</span>'
          : d.permanent === false ? ' <span class="tag pending" title="a transient failure ran out of attempts: a redrive may succeed once the cause is gone">retries exhausted</span>' : ""}</td>
        <td class="message">${esc(printable(d.error_message))}${payload(d)}</td>
        <td>${d.tenant_id && d.document_id ? `<a href="#/job/${encodeURIComponent(d.tenant_id)}/${encodeURIComponent(d.document_id)}">${esc(d.document_id.slice(0, 12))}…</a>` : esc((d.document_id || "").slice(0, 12))}</td>
        <td>${several ? `${esc(d.original.topic ?? "?")} ` : ""}p${d.original.partition ?? "?"} @ ${d.original.offset ?? "?"}</td><td class="num">${d.attempts ?? "–"}</td>
        <td class="handled">${handledText(d)}</td>
        <td>${d.redriven || d.discarded ? "" : `<button type="button" class="discard" data-group="${esc(g.group)}" data-topic="${esc(d.topic)}" data-partition="${d.partition}" data-offset="${d.offset}">Discard</button>`}</td></tr>`).join("")}</tbody></table>`
    : dl && dl.error ? `<p class="error">${esc(dl.error)}</p>` : '<p class="muted">no dead letters</p>';
  return `<section class="group" data-group="${esc(g.group)}" data-lag="${b.lag_records}"
      data-dlq="${b.dlq_records}" data-members="${b.members.length}" data-replicas="${b.replicas.length}"
      data-paused="${b.paused_partitions}" data-health="${esc((g.health || {}).status || "")}">
    <h2>${esc(g.group)} <span class="tag ${esc(b.state)}">${esc(b.state)}</span>
      ${verdict(g.health)} <span class="muted">stage ${esc(g.stage)}</span></h2>
    ${g.health ? `<p class="health-reason ${esc(g.health.status)}">${esc(g.health.status)}: ${esc(g.health.reason)}
      <span class="muted">(${fmt(g.health.complete * 100)} % of the partitions' windows full; Burrow's rules, see docs/console.md)</span></p>` : ""}
    <div class="kpis">
      <div class="kpi${b.lag_records > 0 ? " alert" : ""}"><b class="lag">${fmt(b.lag_records)}</b><span>lag, records</span></div>
      <div class="kpi"><b>${fmt(b.lag_seconds, 1)} s</b><span>oldest waiting</span></div>
      <div class="kpi"><b>${fmt(r.throughput_per_second, 2)}/s</b><span>done, last minute</span></div>
      <div class="kpi"><b>${fmt(r.p50_ms)} / ${fmt(r.p99_ms)}</b><span>p50 / p99 ms (${r.latency_runs} runs, ${r.latency_window_s / 60} min)</span></div>
      <div class="kpi${b.paused_partitions > 0 ? " alert" : ""}"><b>${b.members.length} / ${b.paused_partitions}</b><span>members / paused partitions</span></div>
      <div class="kpi${waiting > 0 ? " alert" : ""}"><b>${fmt(waiting)}</b><span>dead letters not redriven</span></div>
    </div>
    <div class="charts">
      ${chart("records", "lag, records (total and per partition)", recordSeries, now, "")}
      ${chart("seconds", "lag, seconds (oldest waiting record)", secondSeries, now, "s")}
    </div>
    <h3>Partitions of ${topics.map((t) => `<code>${esc(t)}</code>`).join(" and ")}</h3>
    <table class="partitions"><thead><tr>${several ? "<th>topic</th>" : ""}<th>partition</th><th class="num">committed</th><th class="num">log end</th>
      <th class="num">lag</th><th class="num">lag s</th><th>member</th><th></th><th>health</th></tr></thead><tbody>${partRows}</tbody></table>
    <h3>Members <span class="muted">(the broker's view)</span></h3><ul class="members">${members}</ul>
    <h3>Replicas <span class="muted">(their own reports)</span></h3><ul class="members replicas">${replicas}</ul>
    <div class="dlq-head"><h3>Dead letters</h3>
      <span class="muted">${fmt(b.dlq_records)} in ${b.dlq_topics.length ? b.dlq_topics.map((t) => `<code>${esc(t)}</code>`).join(" and ") : "no dead-letter topic yet"}, ${fmt(waiting)} not redriven</span>
      <button class="redrive" data-group="${esc(g.group)}" ${waiting > 0 && !redriving.has(g.group) ? "" : "disabled"}>Redrive</button>
      <span class="redrive-result" data-group="${esc(g.group)}">${esc(dl && dl.redrive || "")}</span></div>
    ${letters}
  </section>`;
}

// Text with its control characters shown as escapes (an error message may quote bytes).
const printable = (text) => String(text ?? "").replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g,
  (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));

// What a dead letter carries: its event decoded through the registry, or a dump of bytes
// that do not decode.
function payload(d) {
  if (d.event && d.event.stage !== undefined) { // a doc.processed event (a rollup's dead letter)
    const e = d.event;
    return `<details class="payload"><summary>event</summary><dl>
      <dt>document</dt><dd><code>${esc(e.document_id)}</code></dd><dt>tenant</dt><dd>${esc(e.tenant_id)}</dd>
      <dt>stage</dt><dd>${esc(e.stage)} v${esc(e.stage_version)}</dd><dt>outcome</dt><dd>${esc(e.outcome)}</dd>
      <dt>took</dt><dd>${fmt(e.duration_ms)} ms</dd><dt>finished</dt><dd>${new Date(e.finished_at).toLocaleString("en-GB")}</dd>
      <dt>result</dt><dd><code>${esc(e.result_ref || "–")}</code></dd></dl></details>`;
  }
  if (d.event) {
    const e = d.event;
    return `<details class="payload"><summary>event</summary><dl>
      <dt>document</dt><dd><code>${esc(e.document_id)}</code></dd><dt>tenant</dt><dd>${esc(e.tenant_id)}</dd>
      <dt>file</dt><dd>${esc(e.original_file_name || "–")}</dd><dt>type</dt><dd>${esc(e.content_type)}, ${bytes(e.size_bytes)}</dd>
      <dt>uploaded</dt><dd>${new Date(e.uploaded_at).toLocaleString("en-GB")}</dd><dt>object</dt><dd><code>${esc(e.object_uri)}</code></dd>
      <dt>producer</dt><dd>${esc(e.producer_version)}</dd></dl></details>`;
  }
  if (d.payload) {
    return `<details class="payload"><summary>value (${fmt(d.payload.bytes)} bytes, not an event: ${esc(d.payload.error)})</summary>
      <pre class="dump">${esc(d.payload.dump)}</pre></details>`;
  }
  return "";
}

function handledText(d) {
  if (d.redriven) return "redriven";
  if (d.discarded) return `discarded by ${esc(d.discarded.by)} at ${time(d.discarded.at_ms)}`;
  return d.redrive_count ? `waiting (redriven ${d.redrive_count}× before)` : "waiting";
}

// A confirmation in the page's dialog (kept across the overview's redraws): resolves to the
// name typed (when `name`), `true`, or `null` when cancelled.
function ask({ title, text, ok, name }) {
  const dialog = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").innerHTML = text;
  $("#confirm-ok").textContent = ok;
  $("#confirm-name-row").hidden = !name;
  $("#confirm-name").value = sessionStorage.getItem(OPERATOR_KEY) || "";
  $("#confirm-error").textContent = "";
  dialog.showModal();
  if (name) $("#confirm-name").focus();
  return new Promise((resolve) => {
    const done = (value) => {
      $("#confirm-ok").onclick = null;
      $("#confirm-cancel").onclick = null;
      dialog.close();
      resolve(value);
    };
    $("#confirm-cancel").onclick = () => done(null);
    dialog.oncancel = () => done(null);
    $("#confirm-ok").onclick = (ev) => {
      ev.preventDefault();
      if (!name) return done(true);
      const who = $("#confirm-name").value.trim();
      if (!who) { $("#confirm-error").textContent = "Name yourself: the discard records who did it."; return; }
      sessionStorage.setItem(OPERATOR_KEY, who);
      done(who);
    };
  });
}

function stageTags(job) {
  return job.stages.map((s) => `<span class="tag ${esc(s.status)}" data-stage="${esc(s.stage)}" data-status="${esc(s.status)}"
    title="${esc(s.error || "")}">${esc(s.stage)}: ${esc(s.status)}${s.duration_ms !== undefined ? ` ${fmt(s.duration_ms)} ms` : ""}</span>`).join(" ");
}

function jobsTable(jobs, query) {
  if (!jobs.length) return query ? '<p class="muted" id="no-jobs">no job\'s document id starts with it and no file name contains it</p>'
    : '<p class="muted" id="no-jobs">no uploads yet</p>';
  return `<table class="jobs"><thead><tr><th>uploaded</th><th>tenant</th><th>document</th><th>file</th><th>type</th>
    <th class="num">size</th><th>pipeline</th><th>stages</th></tr></thead><tbody>
    ${jobs.map((j) => `<tr class="job" data-job="${esc(j.job_id)}" data-tenant="${esc(j.tenant_id)}" data-pipeline="${esc(j.pipeline)}">
      <td>${time(j.created_at_ms)}</td><td>${esc(j.tenant_id)}</td>
      <td><a href="#/job/${encodeURIComponent(j.tenant_id)}/${encodeURIComponent(j.job_id)}"><code>${esc(j.job_id.slice(0, 12))}…</code></a></td>
      <td>${esc(j.file_name || "")}</td><td>${esc(j.content_type)}</td><td class="num">${bytes(j.size_bytes)}</td>
      <td><span class="tag ${esc(j.pipeline)}">${esc(j.pipeline)}</span></td><td>${stageTags(j)}</td></tr>`).join("")}
    </tbody></table>`;
}

async function refreshDeadLetters(g) {
  const b = g.broker;
  const known = deadLetters.get(g.group);
  if (b.error || (known && known.depth === b.dlq_records && known.waiting === g.dlq_waiting)) return;
  const entry = { depth: b.dlq_records, waiting: g.dlq_waiting, letters: [], redrive: known && known.redrive };
  if (b.dlq_records > 0) {
    try {
      entry.letters = (await apiJson(`/v1/admin/groups/${encodeURIComponent(g.group)}/dead-letters?limit=10`)).dead_letters;
    } catch (e) {
      if (e instanceof Unauthorized) throw e;
      entry.error = e.message;
    }
  }
  deadLetters.set(g.group, entry);
}

let jobQuery = ""; // the job search box: a document id's start or part of a file name

async function overview(mine) {
  const jobsPath = "/v1/admin/jobs?limit=25" + (jobQuery ? "&q=" + encodeURIComponent(jobQuery) : "");
  const [groups, jobs] = await Promise.all([apiJson("/v1/admin/groups"), apiJson(jobsPath)]);
  for (const g of groups.groups) {
    await refreshDeadLetters(g);
    if (!g.broker.error) await seed(g.group).catch((e) => { if (e instanceof Unauthorized) throw e; });
  }
  if (mine !== generation) return false;
  const ranges = RANGES.map(([label, secs]) => `<button type="button" class="range${secs === rangeS ? " on" : ""}"
      data-range="${secs}" aria-pressed="${secs === rangeS}">${label}</button>`).join("");
  // The search box stays put across redraws (typing is not interrupted): only the parts
  // around it are redrawn.
  if (!$("#groups-area")) {
    $("#main").innerHTML = `<div id="groups-area"></div>
      <h2 class="jobs-head"><span id="jobs-title"></span>
        <form id="job-search" role="search"><input id="job-query" type="search" placeholder="document id or file name"
          autocomplete="off" spellcheck="false" maxlength="200" aria-label="find a job"></form></h2>
      <div id="jobs-area"></div>`;
    $("#job-query").value = jobQuery;
    $("#job-search").addEventListener("submit", (ev) => {
      ev.preventDefault();
      jobQuery = $("#job-query").value.trim();
      tick();
    });
    $("#job-query").addEventListener("search", () => { // the field's clear button
      jobQuery = $("#job-query").value.trim();
      tick();
    });
  }
  $("#groups-area").innerHTML = `<h2 class="groups-head">Consumer groups
      <span class="ranges" title="the charts' time range">${ranges}</span></h2>
    <div class="groups">${groups.groups.map((g) => groupCard(g, groups.now_ms)).join("")
      || '<p class="muted">no groups are watched (ingest --console-group)</p>'}</div>`;
  $("#jobs-title").textContent = jobQuery ? `Jobs matching “${jobQuery}”` : "Recent jobs";
  $("#jobs-area").innerHTML = jobsTable(jobs.jobs, jobQuery);
  for (const row of document.querySelectorAll("tr.job")) {
    row.addEventListener("click", (ev) => {
      if (ev.target.closest("a")) return;
      location.hash = `#/job/${encodeURIComponent(row.dataset.tenant)}/${encodeURIComponent(row.dataset.job)}`;
    });
  }
  for (const button of document.querySelectorAll("button.range")) {
    button.addEventListener("click", () => {
      rangeS = Number(button.dataset.range);
      sessionStorage.setItem(RANGE_KEY, String(rangeS));
      tick();
    });
  }
  for (const button of document.querySelectorAll("button.redrive")) {
    button.addEventListener("click", () => redrive(button.dataset.group, button));
  }
  for (const button of document.querySelectorAll("button.discard")) {
    button.addEventListener("click", () => discard(button.dataset.group, button.dataset.topic, Number(button.dataset.partition), Number(button.dataset.offset)));
  }
  return true;
}

async function redrive(group, button) {
  if (redriving.has(group)) return;
  const dl = deadLetters.get(group) || { letters: [], waiting: 0 };
  const waiting = dl.letters.filter((d) => !d.redriven && !d.discarded);
  const permanent = waiting.filter((d) => d.permanent === true);
  const classes = [...new Set(permanent.map((d) => d.error_class))];
  const warn = permanent.length
    ? `<p class="warning"><b>${permanent.length} of the ${waiting.length} shown failed permanently</b>
       (${classes.map((c) => `<code>${esc(c)}</code>`).join(", ")}): the stage refused the document itself, so they
       will fail again unless the stage was fixed since. If nothing changed, discard them instead.</p>` : "";
  const sure = await ask({ title: `Redrive ${fmt(dl.waiting)} dead letter(s) of ${group}?`,
    text: `<p>Each is sent back to its topic for this group only (the other groups pass it by) and is redriven
      at most 3 times; those redriven or discarded before are left out.</p>${warn}`, ok: "Redrive" });
  if (!sure) return;
  redriving.add(group);
  button.disabled = true;
  const out = document.querySelector(`.redrive-result[data-group="${CSS.escape(group)}"]`);
  if (out) out.textContent = "redriving…";
  let text;
  try {
    const r = await apiJson(`/v1/admin/groups/${encodeURIComponent(group)}/dead-letters/redrive`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    text = `redriven ${r.redriven} of ${r.read} read; left out: ${r.already_redriven} redriven or discarded before, `
      + `${r.exhausted} redriven 3 times already (they stay)`;
  } catch (e) {
    text = "redrive failed: " + e.message;
  } finally {
    redriving.delete(group);
  }
  const entry = deadLetters.get(group) || { letters: [] };
  entry.redrive = text;
  entry.depth = -1; // read the dead letters again
  deadLetters.set(group, entry);
  const now = document.querySelector(`.redrive-result[data-group="${CSS.escape(group)}"]`);
  if (now) now.textContent = text;
}

async function discard(group, topic, partition, offset) {
  const who = await ask({ title: `Discard the dead letter at partition ${partition}, offset ${offset} of ${topic}?`,
    text: "<p>It is marked handled: it stays in the dead-letter topic, no longer counts as waiting, and no redrive sends it back. Your name and the time are recorded.</p>",
    ok: "Discard", name: true });
  if (!who) return;
  const entry = deadLetters.get(group) || { letters: [] };
  try {
    const r = await apiJson(`/v1/admin/groups/${encodeURIComponent(group)}/dead-letters/${partition}/${offset}/discard?topic=${encodeURIComponent(topic)}`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ by: who }) });
    entry.redrive = r.discarded ? `discarded p${partition} @ ${offset} as ${who}` : `p${partition} @ ${offset} was handled already`;
  } catch (e) {
    if (e instanceof Unauthorized) return showLogin(e.message);
    entry.redrive = "discard failed: " + e.message;
  }
  entry.depth = -1; // read the dead letters again
  deadLetters.set(group, entry);
  tick();
}

async function jobPage(tenant, id, mine) {
  const job = await apiJson(`/v1/admin/jobs/${encodeURIComponent(tenant)}/${encodeURIComponent(id)}`);
  if (mine !== generation) return false;
  const stages = job.stages.map((s) => `<tr data-stage="${esc(s.stage)}" data-status="${esc(s.status)}">
    <td>${esc(s.stage)}</td><td><span class="tag ${esc(s.status)}">${esc(s.status)}</span></td><td class="num">${s.stage_version ?? "–"}</td>
    <td class="num">${s.attempts ?? "–"}</td><td class="num">${s.duration_ms !== undefined ? fmt(s.duration_ms) + " ms" : "–"}</td>
    <td>${time(s.finished_at_ms)}</td><td class="message">${esc(s.error || "")}</td></tr>`).join("");
  const pages = (job.pages || []).map((p) => `<tr><td>${p.page}</td><td>${esc(p.source)}</td>
    <td class="num">${p.confidence === null || p.confidence === undefined ? "–" : fmt(p.confidence, 2)}</td><td class="num">${fmt(p.text.length)}</td></tr>`).join("");
  $("#main").innerHTML = `<p><a href="#/">← all groups</a></p>
    <h2>Job <code>${esc(job.job_id)}</code> <span class="tag ${esc(job.pipeline)}" id="pipeline">${esc(job.pipeline)}</span></h2>
    <p class="muted">tenant ${esc(job.tenant_id)} · ${esc(job.file_name || "unnamed")} · ${esc(job.content_type)} ·
      ${bytes(job.size_bytes)} · uploaded ${new Date(job.created_at_ms).toLocaleString("en-GB")} · ${job.uploads} upload(s) · upload ${esc(job.status)}</p>
    <div class="job-page">
      <div>${job.thumbnail_url ? '<img id="thumbnail" alt="first page">' : '<p class="muted">no thumbnail</p>'}</div>
      <div>
        <table class="stages"><thead><tr><th>stage</th><th>status</th><th class="num">version</th><th class="num">attempts</th>
          <th class="num">run time</th><th>finished</th><th>error</th></tr></thead><tbody>${stages}</tbody></table>
        <h3>Summary</h3><p id="summary">${job.summary ? esc(job.summary) : '<span class="muted">none (the ocr-embeddings stage writes it)</span>'}</p>
        ${pages ? `<h3>Pages</h3><table><thead><tr><th>page</th><th>source</th><th class="num">confidence</th><th class="num">characters</th></tr></thead><tbody>${pages}</tbody></table>` : ""}
        <h3>Text</h3>${job.text ? `<pre class="text" id="text">${esc(job.text.slice(0, 20000))}${job.text.length > 20000 ? "\n…" : ""}</pre>` : '<p class="muted">no text yet</p>'}
      </div>
    </div>`;
  if (job.thumbnail_url) {
    const blob = await (await api(job.thumbnail_url)).blob();
    // The user may have left the page while the thumbnail came.
    const img = $("#thumbnail");
    if (mine !== generation || !img) return false;
    if (thumbnailUrl) URL.revokeObjectURL(thumbnailUrl);
    thumbnailUrl = URL.createObjectURL(blob);
    img.src = thumbnailUrl;
  }
  return job.pipeline === "processing" || job.pipeline === "not_started";
}

async function tick() {
  clearTimeout(timer);
  const mine = ++generation;
  const m = location.hash.match(/^#\/job\/([^/]+)\/([^/]+)$/);
  let again = true;
  try {
    again = m ? await jobPage(decodeURIComponent(m[1]), decodeURIComponent(m[2]), mine) : await overview(mine);
    if (mine !== generation) return; // a newer chain took over while this one waited
    status("updated " + new Date().toLocaleTimeString("en-GB"));
  } catch (e) {
    if (mine !== generation) return;
    if (e instanceof Unauthorized) return showLogin(e.message);
    status(e.message, true);
  }
  if (again) timer = setTimeout(tick, POLL_MS);
}

function start() {
  $("#login").hidden = true;
  $("#sign-out").hidden = false;
  tick();
}

$("#login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
  $("#token").value = "";
  start();
});
$("#sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin("");
});
window.addEventListener("hashchange", tick);
if (sessionStorage.getItem(TOKEN_KEY)) start(); else showLogin("");
