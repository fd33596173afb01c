// kcoord console: plain JavaScript, no build step. Reads /api/* and redraws every POLL_MS.
// Every time shown is UTC, as "2026-11-27 16:20:05 UTC" (time()); durations are relative.
// actions.js (a group's actions and lag sparkline), messages.js (the message browser) and
// cluster.js (the cluster page) use the helpers here; they load after this file, so start()
// runs once the page is parsed.
"use strict";

const POLL_MS = 2000;
const view = document.getElementById("view");
const status = document.getElementById("status");
const extra = document.getElementById("extra"); // a page's forms, not redrawn by the polls
const ui = { sort: { key: "group", dir: 1 }, filter: "", type: "", onlyStuck: false,
  showInternal: false, expanded: new Set() };
let timer = null;
let generation = 0; // drops answers of a page the user has left

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function ago(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d";
}

function seconds(v) {
  return v === null || v === undefined ? "–" : v.toFixed(v < 10 ? 1 : 0) + " s";
}

function time(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

// ---- groups -----------------------------------------------------------------------------------
const GROUP_COLUMNS = [
  ["group", "Group"], ["type", "Type"], ["state", "State"], ["protocol", "Protocol / assignor"],
  ["members", "Members", true], ["lag", "Lag (messages)", true], ["lag_seconds", "Lag (s)", true],
  ["since_rebalance_ms", "Since last rebalance", true], ["rebalances_last_hour", "Rebalances (1 h)", true],
];

function sortRows(rows) {
  const { key, dir } = ui.sort;
  return rows.slice().sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === y) return a.group < b.group ? -1 : 1;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * dir;
  });
}

function groupsPage(data) {
  const shown = sortRows(data.groups.filter((g) =>
    g.group.toLowerCase().includes(ui.filter.toLowerCase()) &&
    (!ui.type || g.type === ui.type) && (!ui.onlyStuck || g.stuck)));
  const stuck = data.groups.filter((g) => g.stuck).length;
  const head = el("tr", {}, GROUP_COLUMNS.map(([key, label, num]) => el("th", {
    class: "sortable" + (num ? " num" : "") + (ui.sort.key === key ? (ui.sort.dir > 0 ? " sorted-asc" : " sorted-desc") : ""),
    "data-key": key,
    onclick: () => { ui.sort = { key, dir: ui.sort.key === key ? -ui.sort.dir : 1 }; render(); },
  }, label)), el("th", {}, "Flag"));
  const body = el("tbody", {}, shown.map((g) => el("tr", { "data-group": g.group, class: g.stuck ? "stuck" : "" },
    el("td", {}, el("a", { href: "#/group/" + encodeURIComponent(g.group) }, g.group)),
    el("td", {}, g.type), el("td", { class: "state" }, g.state), el("td", {}, g.protocol ?? "–"),
    el("td", { class: "num members" }, g.members), el("td", { class: "num lag" }, g.lag ?? "–"),
    el("td", { class: "num lag-seconds" }, seconds(g.lag_seconds)),
    el("td", { class: "num" }, ago(g.since_rebalance_ms)), el("td", { class: "num" }, g.rebalances_last_hour),
    el("td", { class: "flag" }, g.stuck ? "stuck rebalancing " + ago(data.now_ms - g.rebalancing_since_ms) : ""))));
  const filter = el("input", { id: "filter", type: "search", placeholder: "filter groups", value: ui.filter,
    oninput: (e) => { ui.filter = e.target.value; render(true); } });
  const type = el("select", { id: "type-filter", onchange: (e) => { ui.type = e.target.value; render(); } },
    ["", "classic", "consumer", "share"].map((t) => el("option", { value: t, selected: ui.type === t }, t || "all types")));
  const onlyStuck = el("label", {}, el("input", { id: "stuck-filter", type: "checkbox", checked: ui.onlyStuck,
    onchange: (e) => { ui.onlyStuck = e.target.checked; render(); } }), " stuck only");
  return [
    el("h1", {}, "Groups"),
    el("div", { class: "controls" }, filter, type, onlyStuck,
      el("span", { class: "muted", id: "groups-count" },
        `${shown.length} shown of ${data.total}` + (data.truncated ? " (list truncated)" : "") +
        ` · ${stuck} stuck (rebalancing over ${data.stuck_ms / 1000} s)`)),
    el("table", { id: "groups-table" }, el("thead", {}, head), body),
  ];
}

// ---- one group --------------------------------------------------------------------------------
function short(id) {
  return id.length > 22 ? id.slice(0, 21) + "…" : id;
}

function timeline(g) {
  const events = g.rebalances.slice();
  if (g.rebalance_under_way) {
    events.push({ under_way: true, start_ms: g.rebalance_under_way.start_ms, end_ms: g.now_ms,
      duration_ms: g.now_ms - g.rebalance_under_way.start_ms, reason: g.rebalance_under_way.reason, trigger: "under-way" });
  }
  if (!events.length) return el("p", { class: "muted" }, "No rebalance seen since the broker started.");
  const width = 1000, labelW = 470, rowH = 22, top = 18;
  const t0 = Math.min(...events.map((e) => e.start_ms)), t1 = Math.max(...events.map((e) => e.end_ms));
  const span = Math.max(t1 - t0, 1);
  const x = (t) => labelW + ((t - t0) / span) * (width - labelW - 10);
  const root = svg("svg", { viewBox: `0 0 ${width} ${top + rowH * events.length + 6}`, role: "img",
    "aria-label": "rebalance timeline" });
  root.append(svg("text", { x: labelW, y: 12 }, time(t0)));
  root.append(svg("text", { x: width - 10, y: 12, "text-anchor": "end" }, time(t1)));
  events.forEach((e, i) => {
    const y = top + i * rowH;
    const label = e.under_way
      ? `rebalancing now: ${e.reason}`
      : `gen ${e.generation} · ${e.trigger}${e.member ? " " + short(e.member) : ""} · ${e.members_before}→${e.members_after} members · ${e.partitions_moved} moved · ${e.duration_ms} ms`;
    const bx = x(e.start_ms), bw = Math.max(x(e.end_ms) - bx, 3);
    const title = svg("title", {}, `${e.reason}\n${time(e.start_ms)} → ${time(e.end_ms)}`);
    root.append(svg("g", { class: "event " + e.trigger, "data-trigger": e.trigger, "data-member": e.member || "",
      "data-generation": e.generation ?? "" }, title,
      svg("line", { class: "axis", x1: labelW, x2: width - 10, y1: y + rowH / 2, y2: y + rowH / 2 }),
      svg("text", { x: 0, y: y + 15 }, label),
      svg("rect", { class: "bar", x: bx, y: y + 4, width: bw, height: rowH - 8, rx: 2 })));
  });
  return root;
}

function num(v, digits) {
  if (v === null || v === undefined) return "–";
  return digits === undefined ? String(v) : v.toFixed(digits);
}

// A share group (KIP-932): members, share partitions and their in-flight records.
function shareGroupPage(g) {
  const cards = el("div", { class: "cards" },
    [["Type", g.type], ["State", g.state], ["Assignor", g.protocol], ["Group epoch", g.epoch], ["Members", g.members],
      ["Lag (messages)", num(g.lag)], ["Acknowledgements/s", num(g.acks_per_second, 1)]].map(([k, v]) =>
      el("div", { class: "card" }, el("span", { class: "muted" }, k), el("b", { "data-field": k }, v))));
  const members = el("table", { id: "members" },
    el("thead", {}, el("tr", {}, ["Member", "Client", "Host", "Rack", "Epoch", "Assignment", "Last heartbeat"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, g.members_detail.map((m) => el("tr", { "data-member": m.member_id },
      el("td", {}, m.member_id), el("td", {}, m.client_id), el("td", {}, m.host), el("td", {}, m.rack ?? "–"),
      el("td", { class: "num" }, m.epoch),
      el("td", {}, Object.entries(m.assignment).map(([t, ps]) => `${t}(${ps.join(",")})`).join(" ") || "–"),
      el("td", {}, m.last_heartbeat_ms ? ago(g.now_ms - m.last_heartbeat_ms) + " ago" : "–")))));
  const heads = ["Topic", "Partition", "Members", "Start offset", "End offset", "Log end", "In flight", "Acquired",
    "Archived", "Lag", "Acks/s"];
  const partitions = el("table", { id: "share-partitions" },
    el("thead", {}, el("tr", {}, heads.map((h, i) => el("th", { class: i === 1 || i >= 3 ? "num" : "" }, h)))),
    el("tbody", {}, g.partitions.map((p) => el("tr", { "data-topic": p.topic, "data-partition": p.partition },
      el("td", {}, p.topic), el("td", { class: "num" }, p.partition), el("td", {}, p.members.length),
      el("td", { class: "num start-offset" }, num(p.start_offset)), el("td", { class: "num end-offset" }, num(p.end_offset)),
      el("td", { class: "num log-end" }, num(p.log_end)), el("td", { class: "num in-flight" }, num(p.in_flight)),
      el("td", { class: "num acquired" }, num(p.acquired)), el("td", { class: "num archived" }, num(p.archived)),
      el("td", { class: "num lag" }, num(p.lag)), el("td", { class: "num acks" }, num(p.acks_per_second, 1))))));
  const runRows = [];
  for (const p of g.partitions) {
    for (const r of p.runs) {
      runRows.push(el("tr", { "data-topic": p.topic, "data-partition": p.partition, "data-state": r.state },
        el("td", {}, p.topic), el("td", { class: "num" }, p.partition), el("td", { class: "num" }, r.first_offset),
        el("td", { class: "num" }, r.last_offset), el("td", {}, r.state), el("td", { class: "num" }, r.delivery_count),
        el("td", {}, r.member_id ?? "–"),
        el("td", {}, r.lock_deadline_ms ? "in " + ago(Math.max(r.lock_deadline_ms - g.now_ms, 0)) : "–")));
    }
    if (p.runs_total > p.runs.length) {
      runRows.push(el("tr", {}, el("td", { colspan: 8, class: "muted" },
        `${p.topic}-${p.partition}: ${p.runs_total - p.runs.length} more runs`)));
    }
  }
  const runs = runRows.length
    ? el("table", { id: "in-flight-runs" },
      el("thead", {}, el("tr", {}, ["Topic", "Partition", "First offset", "Last offset", "State", "Deliveries",
        "Member", "Lock"].map((h) => el("th", {}, h)))),
      el("tbody", {}, runRows))
    : el("p", { class: "muted", id: "in-flight-runs" }, "No record in flight.");
  return [
    el("h1", {}, "Share group ", el("span", { id: "group-name" }, g.group)),
    cards,
    el("h2", {}, "Members"), members,
    el("h2", {}, "Share partitions"), partitions,
    el("h2", {}, "In-flight records"), runs,
  ];
}

function groupPage(g) {
  if (g.type === "share") return shareGroupPage(g);
  const gen = g.type === "consumer" ? ["Group epoch", g.epoch] : ["Generation", g.generation];
  const cards = el("div", { class: "cards" },
    [["Type", g.type], ["State", g.state], ["Protocol / assignor", g.protocol ?? "–"], gen, ["Members", g.members],
      ["Lag (messages)", g.lag], ["Lag (s)", seconds(g.lag_seconds)], ["Since last rebalance", ago(g.since_rebalance_ms)],
      ["Rebalances (1 h)", g.rebalances_last_hour]].map(([k, v]) =>
      el("div", { class: "card" }, el("span", { class: "muted" }, k), el("b", { "data-field": k }, v))));
  const members = el("table", { id: "members" },
    el("thead", {}, el("tr", {}, ["Member", "Instance", "Client", "Host", g.type === "consumer" ? "Epoch" : "Generation",
      "Assignment", "Last heartbeat"].map((h) => el("th", {}, h)))),
    el("tbody", {}, g.members_detail.map((m) => el("tr", { "data-member": m.member_id },
      el("td", {}, m.member_id + (m.leader ? " (leader)" : "")), el("td", {}, m.instance_id ?? "–"),
      el("td", {}, m.client_id), el("td", {}, m.host), el("td", { class: "num" }, m.epoch ?? m.generation),
      el("td", {}, Object.entries(m.assignment).map(([t, ps]) => `${t}(${ps.join(",")})`).join(" ") || "–"),
      el("td", {}, m.last_heartbeat_ms ? ago(g.now_ms - m.last_heartbeat_ms) + " ago" : "–")))));
  const partitions = el("table", { id: "partitions" },
    el("thead", {}, el("tr", {}, ["Topic", "Partition", "Member", "Committed", "Log start", "Log end", "Lag", "Lag (s)"]
      .map((h, i) => el("th", { class: i >= 3 || i === 1 ? "num" : "" }, h)))),
    el("tbody", {}, g.partitions.map((p) => el("tr", { "data-topic": p.topic, "data-partition": p.partition },
      el("td", {}, p.topic), el("td", { class: "num" }, p.partition), el("td", {}, p.member_id ?? "–"),
      el("td", { class: "num committed" }, p.committed ?? "–"), el("td", { class: "num" }, p.log_start ?? "–"),
      el("td", { class: "num log-end" }, p.log_end ?? "–"), el("td", { class: "num lag" }, p.lag ?? "–"),
      el("td", { class: "num lag-seconds", "data-seconds": p.lag_seconds ?? "" }, seconds(p.lag_seconds))))));
  const events = el("table", { id: "rebalances" },
    el("thead", {}, el("tr", {}, ["Start", "End", "Duration", "Trigger", "Member", "Generation/epoch", "Members",
      "Moved", "Reason"].map((h) => el("th", {}, h)))),
    el("tbody", {}, g.rebalances.slice().reverse().map((e) => el("tr", { "data-trigger": e.trigger },
      el("td", {}, time(e.start_ms)), el("td", {}, time(e.end_ms)), el("td", { class: "num" }, e.duration_ms + " ms"),
      el("td", {}, e.trigger), el("td", { class: "wrap" }, e.member ?? "–"), el("td", { class: "num" }, e.generation),
      el("td", { class: "num" }, `${e.members_before} → ${e.members_after}`), el("td", { class: "num" }, e.partitions_moved),
      el("td", { class: "wrap" }, e.reason)))));
  return [
    el("h1", {}, "Group ", el("span", { id: "group-name" }, g.group),
      g.stuck ? el("span", { class: "flag" }, " stuck rebalancing") : null),
    cards,
    el("h2", {}, "Rebalance timeline"), el("div", { id: "timeline" }, timeline(g)),
    el("h2", {}, "Lag (messages), recent"), lagSparkline(g.lag_history),
    el("h2", {}, "Members"), el("div", { class: "scroll" }, members),
    el("h2", {}, "Partitions"), el("div", { class: "scroll" }, partitions),
    el("h2", {}, "Rebalances (newest first)"), el("div", { class: "scroll" }, events),
  ];
}

// ---- topics -----------------------------------------------------------------------------------
function groupLinks(names, total) {
  return [names.map((name, i) => [i ? ", " : "", el("a", { href: "#/group/" + encodeURIComponent(name) }, name)]),
    total > names.length ? ` … (${total} in all)` : ""];
}

function topicsPage(data) {
  const rows = [];
  const internal = data.topics.filter((t) => t.internal).length;
  for (const t of data.topics) {
    if (t.internal && !ui.showInternal) continue;
    const open = ui.expanded.has(t.topic);
    const groups = [...new Set(t.partitions.flatMap((p) => p.groups))].sort();
    const groupCount = Math.max(groups.length, ...t.partitions.map((p) => p.group_count));
    rows.push(el("tr", { class: "topic", "data-topic": t.topic },
      el("td", {}, el("button", { class: "expand", "aria-expanded": String(open), title: "partitions",
        onclick: () => { open ? ui.expanded.delete(t.topic) : ui.expanded.add(t.topic); render(); } }, open ? "▾" : "▸"),
      " ", t.topic, t.internal ? el("span", { class: "muted" }, " (internal)") : null),
      el("td", { class: "num" }, t.partition_count), el("td", { class: "num" }, "–"),
      el("td", { class: "num log-end" }, t.partitions.reduce((n, p) => n + p.log_end - p.log_start, 0)),
      el("td", { class: "num" }, t.size_bytes),
      el("td", { class: "groups" }, groupLinks(groups, groupCount)),
      el("td", {}, el("a", { class: "browse", href: "#/messages/" + encodeURIComponent(t.topic) + "/0" }, "messages"))));
    if (!open) continue;
    for (const p of t.partitions) {
      rows.push(el("tr", { class: "partition", "data-topic": t.topic, "data-partition": p.partition },
        el("td", { class: "indent" }, `partition ${p.partition}`), el("td", { class: "num" }, p.partition),
        el("td", { class: "num" }, `${p.log_start} – ${p.log_end}`), el("td", { class: "num" }, p.log_end - p.log_start),
        el("td", { class: "num" }, p.size_bytes), el("td", { class: "groups" }, groupLinks(p.groups, p.group_count)),
        el("td", {}, el("a", { class: "browse", href: `#/messages/${encodeURIComponent(t.topic)}/${p.partition}` }, "messages"))));
    }
  }
  const toggle = el("label", {}, el("input", { id: "internal-toggle", type: "checkbox", checked: ui.showInternal,
    onchange: (e) => { ui.showInternal = e.target.checked; render(); } }), ` show internal topics (${internal})`);
  return [
    el("h1", {}, "Topics"),
    el("div", { class: "controls" }, toggle, el("span", { class: "muted" },
      `${data.total} topics` + (data.truncated ? " (partitions list truncated)" : ""))),
    el("div", { class: "scroll" }, el("table", { id: "topics-table" },
      el("thead", {}, el("tr", {}, ["Topic", "Partitions", "Offsets", "Messages", "Size (bytes)", "Groups", ""]
        .map((h, i) => el("th", { class: i >= 1 && i <= 4 ? "num" : "" }, h)))),
      el("tbody", {}, rows))),
  ];
}

// ---- routing and polling ----------------------------------------------------------------------
let last = null; // the newest data of the current page, to redraw after a sort or filter

function route() {
  const hash = location.hash || "#/groups";
  if (hash.startsWith("#/group/")) return { page: "group", id: decodeURIComponent(hash.slice(8)) };
  if (hash === "#/topics") return { page: "topics" };
  if (hash === "#/cluster") return { page: "cluster" };
  if (hash.startsWith("#/messages/")) {
    const [topic, partition] = hash.slice(11).split("/");
    return { page: "messages", topic: decodeURIComponent(topic || ""), partition: Number(partition || 0) };
  }
  return { page: "groups" };
}

function render(keepFocus) {
  if (!last) return;
  const r = route();
  const focused = keepFocus && document.activeElement && document.activeElement.id;
  const caret = focused ? document.activeElement.selectionStart : null;
  let nodes;
  if (r.page === "groups") nodes = groupsPage(last);
  else if (r.page === "topics") nodes = topicsPage(last);
  else if (r.page === "cluster") nodes = clusterPage(last);
  else nodes = last.missing ? [el("h1", {}, "No group ", r.id)] : groupPage(last);
  view.replaceChildren(...nodes);
  if (r.page === "group" && !last.missing && !extra.hasChildNodes()) extra.replaceChildren(...groupActions(last));
  if (focused) {
    const again = document.getElementById(focused);
    if (again) { again.focus(); if (caret !== null && again.setSelectionRange) again.setSelectionRange(caret, caret); }
  }
  document.getElementById("nav-groups").classList.toggle("active", r.page === "groups" || r.page === "group");
  document.getElementById("nav-topics").classList.toggle("active", r.page === "topics" || r.page === "messages");
  document.getElementById("nav-cluster").classList.toggle("active", r.page === "cluster");
}

// Each poll's timings (fetch and parse, then render), newest last, for bench/console.py.
const timings = (window.consoleTimings = []);

async function poll() {
  const mine = generation;
  const t0 = performance.now();
  const r = route();
  // the page's own ?stuck_ms= (the stuck threshold) goes to the API
  const stuck = new URLSearchParams(location.search).get("stuck_ms");
  const query = stuck !== null && (r.page === "groups" || r.page === "group") ? "?stuck_ms=" + encodeURIComponent(stuck) : "";
  const path = (r.page === "groups" ? "/api/groups" : r.page === "topics" ? "/api/topics"
    : r.page === "cluster" ? "/api/cluster" : "/api/groups/" + encodeURIComponent(r.id)) + query;
  try {
    const data = await getJSON(path);
    if (mine !== generation) return;
    last = data === null ? { missing: true } : data;
    const t1 = performance.now();
    const typing = document.activeElement && document.activeElement.id === "filter";
    render(typing);
    const t2 = performance.now();
    const entry = { page: r.page, started_ms: t0, fetch_ms: t1 - t0, render_ms: t2 - t1 };
    timings.push(entry);
    if (timings.length > 100) timings.shift();
    // the frame after the render has been laid out and painted
    requestAnimationFrame(() => setTimeout(() => { entry.painted_ms = performance.now(); }, 0));
    status.textContent = "updated " + time(Date.now());
    document.body.dataset.updated = String(Date.now());
  } catch (e) {
    status.textContent = "update failed: " + e.message;
  }
  if (mine === generation) timer = setTimeout(poll, POLL_MS);
}

function start() {
  generation += 1;
  clearTimeout(timer);
  last = null;
  extra.replaceChildren();
  const r = route();
  if (r.page === "messages") { // loaded on demand, not polled
    view.replaceChildren();
    extra.replaceChildren(...messagesPage(r.topic, r.partition));
    document.getElementById("nav-topics").classList.add("active");
    document.getElementById("nav-groups").classList.remove("active");
    return;
  }
  view.replaceChildren(el("p", {}, "Loading…"));
  poll();
}

// ---- actions (POST with the session's CSRF token) ---------------------------------------------
let session = null;

async function post(path, body) {
  if (session === null) session = await getJSON("/api/session");
  const r = await fetch(path, { method: "POST", cache: "no-store", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-CSRF-Token": session.csrf_token } });
  const answer = await r.json().catch(() => ({ error: "HTTP " + r.status }));
  if (!r.ok) throw new Error(answer.error || "HTTP " + r.status);
  return answer;
}

window.addEventListener("hashchange", start);
window.addEventListener("DOMContentLoaded", start);
