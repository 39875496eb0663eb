// The overlord console: polls GET /console/api/overview every 2 s and redraws in place; every
// action goes to the same Druid API other clients use. Data is only ever set as text, never as
// HTML: record samples, names and messages may come from anyone who can write to a topic.
"use strict";

const API = "/druid/indexer/v1";
const POLL_MS = 2000;
let lastOverview = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows, numeric = []) {
  if (!rows.length) return el("p", { class: "muted" }, "none");
  return el("table", {},
    el("tr", {}, headers.map((h) => el("th", {}, h))),
    rows.map((row) => el("tr", {}, row.map((cell, i) =>
      el("td", numeric.includes(i) ? { class: "n" } : {}, cell)))));
}

const fmt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : n ?? "");
const offsets = (o) => Object.entries(o || {}).map(([p, v]) => `${p}:${v}`).join(", ");

async function api(method, path, body) {
  const options = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  return { ok: response.ok, status: response.status, data, headers: response.headers };
}

function say(text, isError = false) {
  const box = document.getElementById("message");
  box.className = isError ? "error" : "";
  box.textContent = text;
}

async function act(label, method, path, body) {
  if (!window.confirm(`${label}?`)) return;
  const answer = await api(method, path, body);
  if (answer.ok) say(`${label}: done`);
  else say(`${label}: ${answer.data?.errorMessage || answer.data?.error || answer.status}`, true);
  refresh();
}

// --- charts --------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
const SPAN_S = 3600;

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

const clock = (t) => new Date(t * 1000).toLocaleTimeString("en-GB");

function chart({ stepSeconds: step, points }, lines, label, css, describe, bars) {
  // The last hour in fixed steps: each line is a value per step (a lag band is its min and max line),
  // bars are stacked counts per step; hovering a step shows its values (an SVG <title>).
  const width = 380, height = 110, left = 46, right = 6, top = 14, bottom = 16, now = Date.now() / 1000;
  const x = (t) => left + (width - left - right) * (1 - (now - t) / SPAN_S);
  const values = points.flatMap((p) => [...lines.map((l) => l.pick(p)), bars ? bars.reduce((n, b) => n + b.pick(p), 0)
    : null]).filter((v) => v !== null && v !== undefined);
  const ymax = Math.max(1, ...values);
  const y = (v) => height - bottom - (height - bottom - top) * v / ymax;
  const svg = svgEl("svg", { class: `chart ${css}`, width, height, role: "img", "aria-label": `${label}, last hour` });
  svg.append(svgEl("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    svgEl("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }));
  for (const [tx, ty, text, anchor] of [[left - 3, top + 4, fmt(Math.round(ymax)), "end"],
    [left - 3, height - bottom, "0", "end"], [left, height - 3, "-60 min", "start"],
    [(left + width - right) / 2, height - 3, "-30 min", "middle"], [width - right, height - 3, "now", "end"],
    [left + 4, top - 3, label, "start"]]) {
    svg.append(svgEl("text", { x: tx, y: ty, "text-anchor": anchor }, text));
  }
  const barWidth = Math.max(1, (width - left - right) * step / SPAN_S);
  for (const p of points) {
    let base = 0;
    for (const b of bars || []) {
      const n = b.pick(p);
      if (n) {
        svg.append(svgEl("rect", { class: b.cls, x: x(p.t), y: y(base + n), width: barWidth,
          height: y(base) - y(base + n) }));
      }
      base += n;
    }
  }
  for (const line of lines) {
    const coords = points.filter((p) => line.pick(p) !== null && line.pick(p) !== undefined)
      .map((p) => `${x(p.t + step / 2).toFixed(1)},${y(line.pick(p)).toFixed(1)}`);
    svg.append(svgEl("polyline", { class: line.cls, points: coords.join(" ") }));
  }
  for (const p of points) {  // hover targets, one per step
    const target = svgEl("rect", { class: "hover", x: x(p.t), y: top, width: barWidth, height: height - top - bottom });
    target.append(svgEl("title", {}, `${clock(p.t)}: ${describe(p)}`));
    svg.append(target);
  }
  return svg;
}

function supervisorCharts(series) {
  const lag = (p) => p.lagMin === null ? "no poll" : p.lagMin === p.lagMax ? `lag ${fmt(p.lag)}`
    : `lag ${fmt(p.lagMin)}–${fmt(p.lagMax)} (last ${fmt(p.lag)})`;
  return el("div", { class: "charts" },
    chart(series, [{ pick: (p) => p.lagMax, cls: "max" }, { pick: (p) => p.lagMin, cls: "min" }],
      "lag (records), min and max per 10 s", "lag", lag),
    chart(series, [{ pick: (p) => p.rate, cls: "last" }], "records/s (1 min)", "rate",
      (p) => p.rate === null ? "no poll" : `${fmt(Math.round(p.rate))} records/s (max ${fmt(Math.round(p.rateMax))})`),
    chart(series, [], "tasks ended: published, failed", "tasks",
      (p) => `${p.published} published, ${p.failed} failed` + (p.taskSecondsMax === null ? ""
        : `, longest ${p.taskSecondsMax.toFixed(1)} s`),
      [{ pick: (p) => p.published, cls: "ok" }, { pick: (p) => p.failed, cls: "bad" }]));
}

// --- sections ------------------------------------------------------------------------------

function supervisorCard(s) {
  const p = s.payload, id = s.id, c = p.counters;
  const bad = !p.healthy;
  const waited = p.minimumLagMillis || {};
  const partitions = Object.entries(p.latestOffsets).map(([part, latest]) => [
    part, fmt(p.committedOffsets[part] ?? "-"), fmt(latest), fmt(p.minimumLag[part] ?? "-"),
    ((waited[part] ?? 0) / 1000).toFixed(1)]);
  const path = `${API}/supervisor/${encodeURIComponent(id)}`;
  return el("div", { class: "card supervisor", "data-id": id },
    el("h3", {}, id, el("span", { class: `state ${p.state}${bad ? " bad" : ""}`, "data-role": "state" }, p.state),
      el("span", { class: "muted" }, p.detailedState)),
    el("p", {}, "topic ", el("b", {}, p.stream), ` → datasource `, el("b", {}, p.dataSource),
      `; taskCount ${p.taskCount}, replicas ${p.replicas}; lag `,
      el("b", { "data-role": "lag" }, fmt(p.aggregateLag)), " records",
      p.maxLagMillis ? ` (oldest waiting ${(p.maxLagMillis / 1000).toFixed(1)} s)` : "",
      `; ${fmt(c.processedPerSecond["1m"])} records/s (1 min), ${fmt(c.processedPerSecond["5m"])} (5 min); `,
      `processed ${fmt(c.processed)}, unparseable ${fmt(c.unparseable)}, thrown away ${fmt(c.thrownAway)}`),
    supervisorCharts(s.series),
    el("div", { class: "actions" },
      el("button", { onclick: () => showHistory(id) }, "Spec history"),
      p.suspended
        ? el("button", { class: "write", onclick: () => act(`Resume ${id}`, "POST", `${path}/resume`) }, "Resume")
        : el("button", { class: "write", onclick: () => act(`Suspend ${id}`, "POST", `${path}/suspend`) }, "Suspend"),
      el("button", { class: "write", onclick: () => editSpec(id) }, "Edit spec"),
      el("button", { class: "write", onclick: () => act(`Compact ${p.dataSource}`, "POST",
        `${API}/compact/${encodeURIComponent(p.dataSource)}`, {}) }, "Compact"),
      el("button", { class: "danger write", onclick: () => act(`Reset the offsets of ${id} (re-reads or skips records)`,
        "POST", `${path}/reset`) }, "Reset"),
      el("button", { class: "danger write", onclick: () => act(`Terminate ${id}`, "POST", `${path}/terminate`) },
        "Terminate")),
    el("h3", {}, "Partitions"),
    table(["partition", "committed", "latest", "lag", "oldest waiting (s)"], partitions, [1, 2, 3, 4]),
    ...stoppedPartitions(p, id, path),
    el("h3", {}, "Active tasks"),
    table(["task", "start", "end", "running (s)"],
      p.activeTasks.map((t) => [taskLinks(t.id), offsets(t.startingOffsets), offsets(t.endOffsets), t.runningSeconds]),
      [3]),
    el("h3", {}, "Recent tasks"),
    el("div", { "data-role": "recent-tasks" }, table(["task", "status", "seconds", "detail"],
      p.recentTasks.slice(0, 5).map((t) => [taskLinks(t.id), el("span", { class: t.status === "FAILED" ? "bad" : "" },
        t.status), t.durationSeconds.toFixed(1), t.statusDetail]), [2])),
    p.recentErrors.length ? el("h3", { class: "bad" }, "Recent errors") : null,
    p.recentErrors.length ? table(["last", "times", "since", "message"], p.recentErrors.map((e) =>
      [e.timestamp, e.count, e.firstTimestamp, e.message]), [1]) : null,
    p.resolvedErrors?.length ? kept(el("details", { "data-role": "resolved-errors" },
      el("summary", {}, `${p.resolvedErrors.length} resolved errors`), table(["resolved", "last", "times", "message"],
        p.resolvedErrors.map((e) => [e.resolvedTimestamp, e.timestamp, e.count, e.message]), [2])),
    `resolved-${id}`) : null);
}

function stoppedPartitions(p, id, path) {
  const stopped = Object.entries(p.stoppedPartitions || {});
  if (!stopped.length) return [];
  const readFrom = (part, offset) => act(`Read partition ${part} of ${id} from offset ${offset}`, "POST",
    `${path}/resetOffsets`, { type: "kafka", partitions: { type: "end", stream: p.stream,
      partitionOffsetMap: { [part]: offset } } });
  return [el("h3", { class: "bad" }, "Stopped partitions"),
    table(["partition", "why", ""], stopped.map(([part, why]) => [part, why,
      el("button", { class: "danger write", "data-role": "read-from-earliest",
        onclick: () => readFrom(part, p.earliestOffsets[part] ?? 0) },
        `Read from its earliest offset (${fmt(p.earliestOffsets[part] ?? 0)})`)]))];
}

function taskLinks(id) {
  // The task's id opens its log (plain text, live while it runs); "report" its Druid ingestion report.
  const base = `${API}/task/${encodeURIComponent(id)}`;
  return [el("a", { href: `${base}/log`, target: "_blank", rel: "noopener", "data-role": "task-log" }, id), " ",
    el("a", { href: `${base}/reports`, target: "_blank", rel: "noopener", class: "muted" }, "report")];
}

function taskRows(tasks) {
  return tasks.map((t) => {
    const r = t.report || {};
    const samples = (r.badSamples || []).map((b) =>
      el("pre", { class: "sample" }, `partition ${b.partition} offset ${b.offset}: ${b.reason}: ${b.value ?? ""}`));
    return [taskLinks(t.id), t.type, t.dataSource, el("span", { class: t.status === "FAILED" ? "bad" : "" }, t.status),
      t.type === "index_kafka" ? `${offsets(t.startOffsets)} → ${offsets(t.endOffsets)}` : "",
      t.duration >= 0 ? (t.duration / 1000).toFixed(1) : "running",
      fmt(r.records ?? r.inputSegments ?? ""), fmt(r.rowsOut ?? r.outputSegments ?? ""),
      r.unparseable ? kept(el("details", {}, el("summary", {}, `${fmt(r.unparseable)} unparseable`), samples),
        `errors-${t.id}`) : "",
      t.statusDetail || ""];
  });
}

const openDetails = new Set();
function kept(details, key) {
  // A <details> that stays open across the poll's redraws once the user opened it.
  details.open = openDetails.has(key);
  details.addEventListener("toggle", () => (details.open ? openDetails.add(key) : openDetails.delete(key)));
  return details;
}

const COORDINATOR = "/druid/coordinator/v1";

async function editJson(label, current, save, remove) {
  // Ask for a JSON value (prefilled with the current one); an emptied box removes it, when it can be removed.
  const text = window.prompt(`${label} (JSON${remove ? "; empty to remove" : ""})`, JSON.stringify(current));
  if (text === null) return;
  if (!text.trim() && remove) return act(`Remove the ${label}`, ...remove);
  let value;
  try { value = JSON.parse(text); } catch (e) { return say(`${label}: not JSON: ${e.message}`, true); }
  await act(`Save the ${label}`, "POST", save, value);
}

function compactionLine(c) {
  const config = c.config;
  const which = !config ? "off (OVERLORD_AUTO_COMPACTION=false and no config)"
    : `${c.defaultConfig ? "default config" : "own config"}: intervals settle ${config.skipOffsetFromLatest} ` +
      "after the newest, fresh ones are tiered";
  const last = c.lastRun ? `; last run ${c.lastRun.status} at ${new Date(c.lastRun.started).toLocaleTimeString()}` +
    (c.lastRun.detail ? ` (${c.lastRun.detail})` : "") : "; not run yet";
  const next = c.nextRun ? `; next run ${new Date(c.nextRun).toLocaleTimeString()}` : "";
  return `compaction: ${which}; ${fmt(c.segmentCountAwaitingCompaction)} segments awaiting${last}${next}`;
}

function datasourceCard(d) {
  const name = encodeURIComponent(d.name), c = d.compaction;
  const rules = d.rules.length ? d.rules.map((r) => r.type + (r.period ? ` ${r.period}` : "") +
    (r.interval ? ` ${r.interval}` : "")).join(", ") : "none (the _default rules: keep everything)";
  return el("div", { class: "card datasource", "data-name": d.name },
    el("h3", {}, d.name),
    el("p", {}, `${fmt(d.segmentCount)} visible segments, ${fmt(d.rows)} rows in ${fmt(d.intervalCount)} intervals`),
    el("p", { "data-role": "compaction" }, compactionLine(c)),
    el("p", { "data-role": "rules" }, `retention rules: ${rules}`),
    el("div", { class: "actions write" },
      el("button", { onclick: () => editJson(`compaction config of ${d.name}`,
        c.config && !c.defaultConfig ? c.config : { dataSource: d.name, skipOffsetFromLatest: "PT1H" },
        `${COORDINATOR}/config/compaction`, ["DELETE", `${COORDINATOR}/config/compaction/${name}`]) },
        "Compaction config…"),
      el("button", { onclick: () => editJson(`retention rules of ${d.name}`,
        d.rules.length ? d.rules : [{ type: "loadByPeriod", period: "P30D" }, { type: "dropForever" }],
        `${COORDINATOR}/rules/${name}`) }, "Retention rules…"),
      el("button", { onclick: () => act(`Restore the dropped segments of ${d.name} (until they are killed)`, "POST",
        `${COORDINATOR}/datasources/${name}`) }, "Restore dropped"),
      el("button", { class: "danger", onclick: () => act(`Drop every segment of ${d.name} (queries stop seeing ` +
        "them; ingestion goes on)", "DELETE", `${COORDINATOR}/datasources/${name}`) }, "Drop datasource")),
    table(["interval", "segments", "rows", "bytes", "version", "compaction", ""],
      d.intervals.map((i) => [i.interval, i.segments, fmt(i.rows), fmt(i.bytes), i.version,
        `${i.settled ? "settled" : "fresh"}${i.awaitingCompaction ? `, ${i.awaitingCompaction} awaiting` : ""}`,
        el("button", { class: "danger small write", "data-role": "drop-interval",
          onclick: () => act(`Drop ${d.name} ${i.interval}`, "POST", `${COORDINATOR}/datasources/${name}/markUnused`,
            { interval: i.interval }) }, "Drop")]), [1, 2, 3, 4]));
}

const HEALTH_NAMES = { spark: "ingestion's Spark", residentRunners: "the resident runners",
  queryEngine: "the query engine" };

function render(o) {
  lastOverview = o;
  document.getElementById("leader").textContent = (o.leader ? "leader" : "standby (read-only)") +
    (o.role === "read" ? "; your role: read" : "");
  document.body.classList.toggle("read-only", o.role === "read");
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  const broken = Object.entries(o.health).filter(([, part]) => part.healthy === false);
  document.getElementById("health").replaceChildren(...broken.map(([name, part]) =>
    el("p", { class: "error", "data-role": "unhealthy" }, `${HEALTH_NAMES[name] || name} cannot run: ${part.error || "down"}`)));
  document.getElementById("supervisor-list").replaceChildren(
    ...(o.supervisors.length ? o.supervisors.map(supervisorCard) : [el("p", { class: "muted" }, "no supervisors")]));
  const names = o.datasources.map((d) => d.name), choice = document.getElementById("task-datasource");
  if (choice.dataset.names !== names.join("\n")) {  // rebuilt only when datasources come or go: the choice stays
    choice.dataset.names = names.join("\n");
    choice.replaceChildren(el("option", { value: "" }, "all"),
      ...names.map((n) => el("option", { selected: n === taskFilter.datasource }, n)));
  }
  document.getElementById("datasource-list").replaceChildren(
    ...(o.datasources.length ? o.datasources.map(datasourceCard) : [el("p", { class: "muted" }, "none")]));
  const sql = document.getElementById("sql-text");
  if (!sql.value && o.datasources.length) sql.value = `SELECT COUNT(*) AS "rows" FROM "${o.datasources[0].name}"`;
}

// The task list: filtered and paged on the server, the choices kept across polls.
const taskFilter = { datasource: "", status: "", type: "", sinceSeconds: "", page: 0 };

function renderTasks(answer) {
  document.getElementById("task-list").replaceChildren(table(
    ["task", "type", "datasource", "status", "offsets", "seconds", "in", "out", "parse errors", "detail"],
    taskRows(answer.tasks), [5, 6, 7]));
  document.getElementById("task-page").textContent = `page ${answer.page + 1}`;
  document.getElementById("task-newer").disabled = answer.page === 0;
  document.getElementById("task-older").disabled = !answer.more;
}

async function refreshTasks() {
  const query = new URLSearchParams(Object.entries(taskFilter).filter(([, v]) => v !== ""));
  const answer = await api("GET", `/console/api/tasks?${query}`);
  if (answer.ok) renderTasks(answer.data);
  else say(`tasks: ${answer.data?.errorMessage || answer.status}`, true);
}

for (const [id, key] of [["task-datasource", "datasource"], ["task-status", "status"], ["task-type", "type"],
  ["task-since", "sinceSeconds"]]) {
  document.getElementById(id).addEventListener("change", (event) => {
    Object.assign(taskFilter, { [key]: event.target.value, page: 0 });
    refreshTasks();
  });
}
for (const [id, step] of [["task-newer", -1], ["task-older", 1]]) {
  document.getElementById(id).addEventListener("click", () => {
    taskFilter.page = Math.max(0, taskFilter.page + step);
    refreshTasks();
  });
}

let timer = null;
async function refresh() {
  clearTimeout(timer);
  try {
    const [answer] = await Promise.all([api("GET", "/console/api/overview"), refreshTasks()]);
    if (answer.ok) render(answer.data);
    else say(`overview: ${answer.data?.errorMessage || answer.status}`, true);
  } catch (e) {
    say(`overlord unreachable: ${e}`, true);
  }
  timer = setTimeout(refresh, POLL_MS);
}

// --- spec editor and SQL -------------------------------------------------------------------

async function editSpec(id) {
  const answer = await api("GET", `${API}/supervisor/${encodeURIComponent(id)}`);
  if (!answer.ok) return say(`spec of ${id}: ${answer.data?.errorMessage || answer.status}`, true);
  delete answer.data.suspended;
  document.getElementById("spec").value = JSON.stringify(answer.data, null, 2);
  document.getElementById("submit").scrollIntoView();
}

function pathSteps(path) {
  // "spec.ioConfig.consumerProperties[\"sasl.password\"]" -> ["spec", "ioConfig", "consumerProperties", "sasl.password"]
  const steps = [];
  for (const [, name, index, quoted] of path.matchAll(/\.?([^.[\]"]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]/g)) {
    steps.push(index !== undefined ? Number(index) : quoted !== undefined ? JSON.parse(quoted) : name);
  }
  return steps;
}

function locate(text, steps) {
  // Where in the JSON text the path's last step is ([start, end) of its key, or of the array element); null if absent.
  let i = 0;
  const space = () => { while (/\s/.test(text[i] ?? "")) i++; };
  const string = () => {
    const start = i++;
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    return [start, ++i];
  };
  const members = (close, each) => {  // each(k) at the k-th member: a value (from find) or undefined to go on
    i++;
    for (let k = 0; ; k++) {
      space();
      if (text[i] === close) return null;
      const found = each(k);
      if (found !== undefined) return found;
      space();
      if (text[i] !== ",") return null;
      i++;
    }
  };
  const skip = () => {
    space();
    if (text[i] === '"') string();
    else if (text[i] === "{") members("}", () => { string(); space(); i++; skip(); }) ?? i++;
    else if (text[i] === "[") members("]", () => { skip(); }) ?? i++;
    else while (i < text.length && !/[,\]}\s]/.test(text[i])) i++;
  };
  const find = (depth) => {
    space();
    const step = steps[depth], last = depth === steps.length - 1;
    if (text[i] === "{" && typeof step === "string") {
      return members("}", () => {
        const key = string();
        space();
        i++;
        if (JSON.parse(text.slice(...key)) === step) return last ? key : find(depth + 1);
        skip();
        return undefined;
      });
    }
    if (text[i] === "[" && typeof step === "number") {
      return members("]", (k) => {
        space();
        const begin = i;
        if (k === step) return last ? (skip(), [begin, i]) : find(depth + 1);
        skip();
        return undefined;
      });
    }
    return null;
  };
  try { return steps.length ? find(0) : null; } catch (e) { return null; }
}

function showAt(path) {
  // Select the field a JSON path names in the editor; a field that is missing: the nearest one around it.
  const editor = document.getElementById("spec"), steps = pathSteps(path);
  let at = null;
  for (let n = steps.length; n > 0 && !at; n--) at = locate(editor.value, steps.slice(0, n));
  editor.focus();
  if (!at) return;
  editor.setSelectionRange(at[0], at[1]);
  const line = editor.value.slice(0, at[0]).split("\n").length - 1;
  editor.scrollTop = Math.max(0, line * parseFloat(getComputedStyle(editor).lineHeight) - editor.clientHeight / 3);
}

async function submitSpec() {
  const errors = document.getElementById("spec-errors");
  const text = document.getElementById("spec").value;
  errors.replaceChildren();
  try { JSON.parse(text); } catch (e) {
    errors.append(el("li", { "data-path": "$" }, el("code", {}, "$"), `: not JSON: ${e.message}`));
    return;
  }
  if (!window.confirm("Submit this spec?")) return;
  const answer = await api("POST", `${API}/supervisor`, text);
  if (answer.ok) {
    say(`supervisor ${answer.data.id} submitted`);
    refresh();
    return;
  }
  const found = answer.data?.errors || [{ path: "$", message: answer.data?.errorMessage || String(answer.status) }];
  for (const e of found) {
    errors.append(el("li", { "data-path": e.path, onclick: () => showAt(e.path) }, el("code", {}, e.path), `: ${e.message}`));
  }
  say("the spec was refused: see the errors under the editor", true);
}

// The SQL box: each run's time and engine, a history kept in this browser, downloads as CSV or JSON.
const HISTORY_KEY = "overlord.sqlHistory";
const sqlHistory = () => JSON.parse(localStorage.getItem(HISTORY_KEY) || "[]");

function renderSqlHistory() {
  const list = sqlHistory();
  document.getElementById("sql-history").replaceChildren(list.length ? el("details", {},
    el("summary", {}, `history (${list.length}, kept in this browser)`),
    el("ul", {}, list.map((h) => el("li", {}, el("a", { href: "#sql", "data-role": "history-query",
      onclick: () => { document.getElementById("sql-text").value = h.query; } }, h.query),
    el("span", { class: "muted" }, ` ${h.at}: ${h.outcome}`))))) : "");
}

function remember(query, outcome) {
  const list = [{ query, outcome, at: new Date().toLocaleString() }, ...sqlHistory().filter((h) => h.query !== query)];
  localStorage.setItem(HISTORY_KEY, JSON.stringify(list.slice(0, 30)));
  renderSqlHistory();
}

async function runSql() {
  const out = document.getElementById("sql-result");
  out.replaceChildren(el("p", { class: "muted" }, "running…"));
  const query = document.getElementById("sql-text").value, started = performance.now();
  const answer = await api("POST", "/druid/v2/sql", { query, resultFormat: "array", header: true });
  const ms = Math.round(performance.now() - started);
  if (!answer.ok) {
    const message = answer.data?.errorMessage || answer.data?.error || String(answer.status);
    out.replaceChildren(el("p", { class: "error" }, message));
    remember(query, `refused in ${fmt(ms)} ms`);
    return;
  }
  const [header, ...rows] = answer.data;
  const engine = answer.headers.get("X-Overlord-Query-Engine");
  const summary = `${fmt(rows.length)} rows in ${fmt(ms)} ms` + (engine ? ` on ${engine}` : "");
  out.replaceChildren(table(header || [], rows), el("p", { class: "muted", "data-role": "sql-timing" }, summary));
  remember(query, summary);
}

async function explainSql() {
  // Druid's EXPLAIN PLAN FOR: the Spark SQL the query becomes, the segments its time filter reads, Spark's plan.
  const out = document.getElementById("sql-result");
  const query = `EXPLAIN PLAN FOR ${document.getElementById("sql-text").value}`;
  const answer = await api("POST", "/druid/v2/sql", { query, resultFormat: "object" });
  if (!answer.ok) {
    return out.replaceChildren(el("p", { class: "error" }, answer.data?.errorMessage || String(answer.status)));
  }
  const plan = JSON.parse(answer.data[0].PLAN);
  out.replaceChildren(table(["datasource", "segments", "read", "bytes read"], Object.entries(plan.datasources)
    .map(([name, d]) => [name, fmt(d.segments), fmt(d.segmentsRead), fmt(d.bytesRead)]), [1, 2, 3]),
  el("h3", {}, "Spark SQL"), el("pre", { class: "sample", "data-role": "spark-sql" }, plan.sparkSql),
  el("h3", {}, "Spark's plan"), el("pre", { class: "sample" }, plan.sparkPlan));
}

async function downloadSql(resultFormat, extension) {
  const query = document.getElementById("sql-text").value;
  const response = await fetch("/druid/v2/sql", { method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify({ query, resultFormat, header: resultFormat === "csv" }) });
  if (!response.ok) return say(`download: ${(await response.json()).errorMessage || response.status}`, true);
  const link = el("a", { href: URL.createObjectURL(await response.blob()), download: `query.${extension}` });
  document.body.append(link);
  link.click();
  link.remove();
}

// --- spec history and diff ---------------------------------------------------------------

function lineDiff(a, b) {
  // The lines of b against a: [" ", kept], ["-", removed], ["+", added] (longest common subsequence).
  const n = a.length, m = b.length, common = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      common[i][j] = a[i] === b[j] ? common[i + 1][j + 1] + 1 : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      out.push([" ", a[i]]);
      i++;
      j++;
    } else if (j < m && (i >= n || common[i][j + 1] >= common[i + 1][j])) out.push(["+", b[j++]]);
    else out.push(["-", a[i++]]);
  }
  return out;
}

const specLines = (spec) => JSON.stringify(spec, null, 2).split("\n");

function diffView(before, after) {
  const changed = lineDiff(specLines(before), specLines(after));
  return el("pre", { class: "diff" }, changed.map(([mark, line]) =>
    el("span", { class: mark === "+" ? "add" : mark === "-" ? "del" : "" }, `${mark} ${line}\n`)));
}

async function showHistory(id) {
  const box = document.getElementById("spec-history");
  const answer = await api("GET", `${API}/supervisor/${encodeURIComponent(id)}/history`);
  if (!answer.ok) return say(`history of ${id}: ${answer.data?.errorMessage || answer.status}`, true);
  const versions = answer.data;  // newest first
  const shown = el("div", { "data-role": "diff" });
  const rows = versions.map((v, k) => [v.version, v.author ?? "", v.terminated ? "terminated"
    : v.suspended ? "suspended" : "running",
  k + 1 < versions.length ? el("button", { class: "small", "data-role": "diff-previous",
    onclick: () => shown.replaceChildren(el("h3", {}, `${versions[k + 1].version} → ${v.version}`),
      diffView(versions[k + 1].spec, v.spec)) }, "diff with the previous") : "the first"]);
  box.replaceChildren(el("h3", {}, `Spec history of ${id}`, el("button", { class: "small",
    onclick: () => box.replaceChildren() }, "close")), table(["version", "by", "state", ""], rows), shown);
  box.scrollIntoView();
}

// --- the data loader: topic → sample → schema → preview → supervisor -------------------------

const TIME_NAMES = /^(__time|ts|timestamp|time|event_?time|created_?at|date)$/i;
const loaderValue = (id) => document.getElementById(id).value.trim();

function loaderSpec() {
  // The supervisor spec the loader's choices make (JSON records, a count metric and one sum per chosen field).
  const ts = loaderValue("load-ts");
  const roles = [...document.querySelectorAll("#load-fields select[data-field]")]
    .map((s) => [s.dataset.field, s.value]).filter(([field]) => field !== ts);
  return { type: "kafka", spec: {
    dataSchema: {
      dataSource: loaderValue("load-datasource"),
      timestampSpec: { column: ts, format: loaderValue("load-ts-format") },
      dimensionsSpec: { dimensions: roles.filter(([, role]) => role === "dimension").map(([field]) => field) },
      metricsSpec: [{ type: "count", name: "count" }, ...roles.filter(([, role]) => role.endsWith("Sum"))
        .map(([field, role]) => ({ type: role, name: `sum_${field}`, fieldName: field }))],
      granularitySpec: { type: "uniform", segmentGranularity: loaderValue("load-segment-gran").toUpperCase(),
        queryGranularity: loaderValue("load-query-gran").toUpperCase(),
        rollup: document.getElementById("load-rollup").checked } },
    ioConfig: { type: "kafka", topic: loaderValue("load-topic"), inputFormat: loaderInputFormat(),
      useEarliestOffset: loaderValue("load-start") === "earliest" },
    tuningConfig: { type: "kafka" } } };
}

function loaderInputFormat() {
  // JSON, or Avro or Protobuf values in Confluent's wire format with their schemas in a registry.
  const format = loaderValue("load-format"), auth = loaderValue("load-registry-auth");
  if (format === "json") return { type: "json" };
  const decoder = { type: "schema_registry", url: loaderValue("load-registry"),
    ...(auth ? { config: { "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": auth } } : {}) };
  return format === "avro" ? { type: "avro_stream", avroBytesDecoder: decoder }
    : { type: "protobuf", protoBytesDecoder: decoder };
}

async function sampler(spec) {
  return api("POST", `${API}/sampler`, { type: "kafka", spec: spec.spec, samplerConfig: { numRows: 200 } });
}

function refusal(answer) {
  const found = answer.data?.errors || [{ path: "$", message: answer.data?.errorMessage || String(answer.status) }];
  return el("ul", { class: "error", "data-role": "refusal" },
    found.map((e) => el("li", {}, el("code", {}, e.path), `: ${e.message}`)));
}

const shownValue = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v)
  : typeof v === "number" && !Number.isInteger(v) ? +v.toPrecision(12) : v);  // no 649.1099999999999

function guessRole(values) {
  const present = values.filter((v) => v !== null && v !== undefined);
  if (present.length && present.every((v) => Number.isInteger(v))) return "longSum";
  if (present.length && present.every((v) => typeof v === "number")) return "doubleSum";
  if (present.some((v) => typeof v === "object" && !Array.isArray(v))) return "ignore";
  return "dimension";
}

async function sampleTopic() {
  const topic = loaderValue("load-topic"), out = document.getElementById("load-raw");
  if (!topic) return say("Load data: name a topic", true);
  out.replaceChildren(el("p", { class: "muted" }, "sampling…"));
  document.getElementById("load-datasource").value ||= topic.replace(/[^A-Za-z0-9_-]/g, "_");
  const first = loaderSpec();  // a first look: discovery, any time column
  first.spec.dataSchema.timestampSpec = { column: "timestamp", format: "auto" };
  first.spec.dataSchema.dimensionsSpec = { dimensions: [] };
  first.spec.dataSchema.dataSource ||= "sample";
  const answer = await sampler(first);
  if (!answer.ok) return out.replaceChildren(refusal(answer));
  const records = answer.data.data, inputs = records.filter((d) => d.input).map((d) => d.input);
  const fields = [...new Set(inputs.flatMap((i) => Object.keys(i)))];
  if (!records.length) return out.replaceChildren(el("p", { class: "muted" }, `no records in ${topic} yet`));
  out.replaceChildren(el("p", {}, `${records.length} records sampled from ${topic}` +
    (records.length > inputs.length ? `, ${records.length - inputs.length} not a JSON object` : "") +
    (records.length > 10 ? "; the first 10:" : "")), el("div", { class: "scroll" },
    table(["partition", "offset", ...fields, "not a JSON object"], records.slice(0, 10).map((d) =>
      [d.partition, d.offset, ...fields.map((f) => shownValue(d.input?.[f])), d.raw ?? ""]), [0, 1])));
  const timeColumn = fields.find((f) => TIME_NAMES.test(f)) || fields[0];
  document.getElementById("load-ts").replaceChildren(...fields.map((f) =>
    el("option", { selected: f === timeColumn }, f)));
  document.getElementById("load-fields").replaceChildren(table(["field", "example", "use as"], fields.map((f) => {
    const values = inputs.map((i) => i[f]);
    const role = guessRole(values);
    return [f, String(shownValue(values.find((v) => v !== undefined)) ?? ""), el("select", { "data-field": f },
      ["dimension", "longSum", "doubleSum", "ignore"].map((r) => el("option", { selected: r === role }, r)))];
  })));
  document.getElementById("load-schema").hidden = false;
  document.getElementById("load-result").replaceChildren();
}

async function previewSpec() {
  const out = document.getElementById("load-result");
  out.replaceChildren(el("p", { class: "muted" }, "previewing…"));
  const answer = await sampler(loaderSpec());
  if (!answer.ok) return out.replaceChildren(refusal(answer));
  const { numRowsRead, numRowsIndexed, data, rollup, logicalSegmentSchema } = answer.data;
  const bad = data.filter((d) => d.unparseable);
  const columns = logicalSegmentSchema.map((c) => c.name);
  out.replaceChildren(
    el("p", { "data-role": "preview-counts" }, `${fmt(numRowsRead)} records read, ${fmt(numRowsIndexed)} parsed, ` +
      `${fmt(bad.length)} unparseable → ${fmt(rollup.rows.length)} rows ${rollup.rollup ? "after rollup" : ""}`),
    bad.length ? table(["partition", "offset", "why", "record"], bad.slice(0, 10).map((d) =>
      [d.partition, d.offset, d.error, d.raw ?? JSON.stringify(d.input)])) : null,
    el("div", { class: "scroll", "data-role": "preview-rows" }, table(columns, rollup.rows.slice(0, 100).map((r) =>
      columns.map((c) => (c === "__time" ? new Date(r[c]).toISOString() : shownValue(r[c])))))));
}

async function submitLoaded() {
  const out = document.getElementById("load-result"), spec = loaderSpec();
  if (!spec.spec.dataSchema.dimensionsSpec.dimensions.length) {
    return say("Load data: choose at least one dimension (none would discover every field)", true);
  }
  if (!window.confirm(`Start supervisor ${spec.spec.dataSchema.dataSource} on ${spec.spec.ioConfig.topic}?`)) return;
  const answer = await api("POST", `${API}/supervisor`, spec);
  if (!answer.ok) return out.replaceChildren(refusal(answer));
  say(`supervisor ${answer.data.id} submitted`);
  refresh();
  document.getElementById("supervisors").scrollIntoView();
}

function editLoaded() {
  document.getElementById("spec").value = JSON.stringify(loaderSpec(), null, 2);
  document.getElementById("submit").scrollIntoView();
}

document.getElementById("load-sample").addEventListener("click", sampleTopic);
document.getElementById("load-format").addEventListener("change", (event) => {
  for (const label of document.querySelectorAll("[data-registry]")) label.hidden = event.target.value === "json";
});
document.getElementById("load-preview").addEventListener("click", previewSpec);
document.getElementById("load-submit").addEventListener("click", submitLoaded);
document.getElementById("load-edit").addEventListener("click", editLoaded);
document.getElementById("submit-spec").addEventListener("click", submitSpec);
document.getElementById("run-sql").addEventListener("click", runSql);
document.getElementById("sql-explain").addEventListener("click", explainSql);
document.getElementById("sql-csv").addEventListener("click", () => downloadSql("csv", "csv"));
document.getElementById("sql-json").addEventListener("click", () => downloadSql("object", "json"));
renderSqlHistory();
refresh();
