// kcoord console: the message browser (#/messages/<topic>/<partition>), one page of records from
// /api/messages, by offset, by time or the newest; keys, values and headers as text, JSON or hex.
"use strict";

const browsing = { format: "auto", mode: "newest", value: "", limit: 20, committed: false };

function shownBytes(b, format) {
  if (b === null || b === undefined) return el("span", { class: "muted" }, "null");
  const more = b.truncated ? el("span", { class: "muted" }, ` … (${b.size} bytes)`) : null;
  let f = format;
  if (f === "auto") f = b.json ? "json" : b.text !== null ? "text" : "hex";
  if (f === "json" && b.json) return el("pre", { class: "json" }, JSON.stringify(JSON.parse(b.text), null, 2));
  if ((f === "text" || f === "json") && b.text !== null) return el("span", { class: "text" }, b.text, more);
  return el("code", { class: "hex" }, b.hex.replace(/(..)/g, "$1 ").trim(), more);
}

function messagesPage(topic, partition) {
  const table = el("div", { id: "messages-result" });
  const message = el("p", { id: "messages-status", class: "muted" });
  const part = el("input", { id: "msg-partition", type: "number", min: 0, value: partition, size: 4 });
  const mode = el("select", { id: "msg-mode", onchange: (e) => { browsing.mode = e.target.value; } },
    [["newest", "newest"], ["offset", "from offset"], ["timestamp", "from time (UTC)"]].map(([v, label]) =>
      el("option", { value: v, selected: browsing.mode === v }, label)));
  const value = el("input", { id: "msg-value", placeholder: "offset or 2026-11-27 16:20:05", size: 22, value: browsing.value });
  const limit = el("input", { id: "msg-limit", type: "number", min: 1, max: 100, value: browsing.limit, size: 4 });
  const committed = el("label", {}, el("input", { id: "msg-committed", type: "checkbox", checked: browsing.committed }),
    " read_committed");
  const format = el("select", { id: "msg-format", onchange: (e) => { browsing.format = e.target.value; show(); } },
    ["auto", "text", "json", "hex"].map((f) => el("option", { value: f, selected: browsing.format === f }, f)));
  let page = null;

  function show() {
    if (!page) return;
    table.replaceChildren(el("div", { class: "scroll" }, el("table", { id: "messages" },
      el("thead", {}, el("tr", {}, ["Offset", "Timestamp", "Type", "Key", "Value", "Headers"].map((h) => el("th", {}, h)))),
      el("tbody", {}, page.messages.map((m) => el("tr", { "data-offset": m.offset },
        el("td", { class: "num offset" }, m.offset), el("td", { class: "timestamp" }, time(m.timestamp)),
        el("td", { class: "ts-type" }, m.timestamp_type), el("td", { class: "key wrap" }, shownBytes(m.key, browsing.format)),
        el("td", { class: "value wrap" }, shownBytes(m.value, browsing.format)),
        el("td", { class: "headers wrap" }, m.headers.map((h) => el("div", {}, el("b", {}, h.key), ": ",
          shownBytes(h.value, browsing.format))))))))));
  }

  async function load(from) {
    browsing.mode = mode.value; browsing.value = value.value; browsing.limit = Number(limit.value) || 20;
    browsing.committed = committed.querySelector("input").checked;
    const q = new URLSearchParams({ topic, partition: String(Number(part.value) || 0), limit: String(browsing.limit),
      isolation: browsing.committed ? "read_committed" : "read_uncommitted" });
    try {
      if (from !== undefined) q.set("offset", String(from));
      else if (browsing.mode === "offset") q.set("offset", String(Number(value.value) || 0));
      else if (browsing.mode === "timestamp") q.set("timestamp", String(parseTime(value.value)));
      const r = await fetch("/api/messages?" + q, { cache: "no-store" });
      const answer = await r.json();
      if (!r.ok) throw new Error(answer.error || "HTTP " + r.status);
      page = answer;
      show();
      message.textContent = `${page.messages.length} message(s) from offset ${page.first_offset}; log ${page.log_start}` +
        ` – ${page.high_watermark} (last stable ${page.last_stable_offset}), ${page.isolation}; values shown up to` +
        ` ${page.max_bytes} bytes`;
      message.className = "muted";
      next.disabled = page.next_offset >= (browsing.committed ? page.last_stable_offset : page.high_watermark);
    } catch (e) {
      message.textContent = "Could not read: " + e.message;
      message.className = "flag";
    }
  }

  const next = el("button", { id: "msg-next", disabled: true, onclick: () => load(page.next_offset) }, "Next page");
  load();
  return [
    el("h1", {}, "Messages of ", el("span", { id: "msg-topic" }, topic)),
    el("div", { class: "controls" }, "partition ", part, mode, value, "limit ", limit, committed, "show as ", format,
      el("button", { id: "msg-load", onclick: () => load() }, "Load"), next),
    message, table,
  ];
}
