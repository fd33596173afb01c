// kcoord console: a group's lag sparkline and its actions (reset offsets with a dry run first,
// delete the group, delete its offsets of a topic). Uses console.js's el, svg, time, post.
"use strict";

function lagSparkline(history) {
  const samples = history || [];
  const width = 240, height = 40, pad = 3;
  const root = svg("svg", { id: "lag-sparkline", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "data-samples": samples.length, "aria-label": "lag over the last samples" });
  if (!samples.length) return el("p", { class: "muted", id: "lag-sparkline" }, "No lag sample yet.");
  const lags = samples.map((s) => s[1]);
  const top = Math.max(...lags, 1);
  const t0 = samples[0][0], span = Math.max(samples[samples.length - 1][0] - t0, 1);
  const points = samples.map(([t, lag]) =>
    `${(pad + ((t - t0) / span) * (width - 2 * pad)).toFixed(1)},${(height - pad - (lag / top) * (height - 2 * pad)).toFixed(1)}`);
  root.append(svg("title", {}, `${samples.length} samples, ${time(t0)} → ${time(samples[samples.length - 1][0])};` +
    ` lag now ${lags[lags.length - 1]}, at most ${Math.max(...lags)}`));
  root.append(svg("polyline", { class: "spark", points: points.join(" ") }));
  return el("div", { class: "sparkline" }, root,
    el("span", { class: "muted" }, ` now ${lags[lags.length - 1]} · max ${Math.max(...lags)} · ${samples.length} samples`));
}

function parseTime(text) {
  // epoch milliseconds, or a date and time in UTC ("2026-11-27 16:20:05"), or ISO 8601 with a zone
  const t = text.trim();
  if (/^\d+$/.test(t)) return Number(t);
  const iso = t.replace(" ", "T").replace(/\s*UTC$/, "");
  const ms = Date.parse(/(Z|[+-]\d\d:?\d\d)$/.test(iso) ? iso : iso + "Z");
  if (Number.isNaN(ms)) throw new Error(`not a time: ${text} (e.g. 2026-11-27 16:20:05, in UTC)`);
  return ms;
}

function groupActions(g) {
  if (g.type === "share") return [];
  const base = "/api/groups/" + encodeURIComponent(g.group);
  const topics = [...new Set(g.partitions.map((p) => p.topic))].sort();
  const message = el("p", { id: "action-message", role: "status" });
  const say = (text, bad) => { message.textContent = text; message.className = bad ? "flag" : "ok"; };
  const topic = el("select", { id: "reset-topic" }, el("option", { value: "" }, "every partition with an offset"),
    topics.map((t) => el("option", { value: t }, `every partition of ${t}`)));
  const to = el("select", { id: "reset-to" }, ["earliest", "latest", "offset", "timestamp"].map((v) => el("option", { value: v }, v)));
  const value = el("input", { id: "reset-value", placeholder: "offset, or time (UTC)", size: 22 });
  const result = el("div", { id: "reset-result" });
  const spec = () => {
    const s = { to: to.value };
    if (topic.value) s.topic = topic.value;
    if (to.value === "offset") s.offset = Number(value.value);
    if (to.value === "timestamp") s.timestamp = parseTime(value.value);
    return s;
  };
  const planTable = (offsets, done) => el("table", { id: done ? "reset-done" : "reset-plan" },
    el("thead", {}, el("tr", {}, ["Topic", "Partition", "Current", "New", "Log start", "Log end", done ? "Result" : null]
      .filter((h) => h !== null).map((h, i) => el("th", { class: i >= 1 && i <= 5 ? "num" : "" }, h)))),
    el("tbody", {}, offsets.map((o) => el("tr", { "data-topic": o.topic, "data-partition": o.partition },
      el("td", {}, o.topic), el("td", { class: "num" }, o.partition), el("td", { class: "num current" }, o.current ?? "–"),
      el("td", { class: "num new" }, o.new), el("td", { class: "num" }, o.log_start), el("td", { class: "num" }, o.log_end),
      done ? el("td", { class: "error" }, o.error) : null))));
  const preview = async () => {
    try {
      const s = spec();
      const plan = await post(base + "/reset-offsets", { ...s, execute: false });
      const confirm = el("button", { id: "reset-confirm", class: "danger", onclick: async () => {
        try {
          const done = await post(base + "/reset-offsets", { ...s, execute: true });
          result.replaceChildren(planTable(done.offsets, true));
          say(done.executed ? `Offsets of ${done.offsets.length} partition(s) reset.` : "Some offsets were not reset.", !done.executed);
        } catch (e) { say("Reset refused: " + e.message, true); }
      } }, `Reset ${plan.offsets.length} partition(s)`);
      result.replaceChildren(el("p", { class: "muted" }, "Dry run: nothing changed yet."), planTable(plan.offsets, false), confirm);
      say("");
    } catch (e) { result.replaceChildren(); say("Reset refused: " + e.message, true); }
  };
  const confirmDelete = el("button", { id: "delete-group-confirm", class: "danger", hidden: true, onclick: async () => {
    try {
      await post(base + "/delete", {});
      say(`Group ${g.group} deleted.`);
    } catch (e) { say("Delete refused: " + e.message, true); }
    confirmDelete.hidden = true;
  } }, `Really delete group ${g.group}`);
  const offsetsTopic = el("select", { id: "offsets-topic" }, topics.map((t) => el("option", { value: t }, t)));
  return [
    el("h2", {}, "Actions"),
    el("section", { id: "group-actions" },
      el("div", { class: "action" }, el("b", {}, "Reset offsets "), "of ", topic, " to ", to, " ", value, " ",
        el("button", { id: "reset-preview", onclick: preview }, "Preview (dry run)"),
        el("span", { class: "muted" }, " only while the group has no members"), result),
      el("div", { class: "action" }, el("b", {}, "Delete offsets "), "of topic ", offsetsTopic, " ",
        el("button", { id: "delete-offsets", onclick: async () => {
          try {
            const done = await post(base + "/delete-offsets", { topic: offsetsTopic.value });
            say(`Offsets of ${done.topic} deleted (partitions ${done.partitions.join(", ")}).`);
          } catch (e) { say("Delete refused: " + e.message, true); }
        } }, "Delete offsets")),
      el("div", { class: "action" }, el("b", {}, "Delete the group "),
        el("button", { id: "delete-group", onclick: () => { confirmDelete.hidden = false; } }, "Delete group…"), " ", confirmDelete),
      message),
  ];
}
