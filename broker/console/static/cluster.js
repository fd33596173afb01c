// kcoord console: the cluster page (#/cluster) from /api/cluster: the nodes (live and dead), what
// each leads per topic (counts and ranges, a topic expands to its partitions and leader epochs),
// and every group of the cluster with the node coordinating it, linked to that node's console.
"use strict";

const clusterUi = { expanded: new Set(), filter: "" };

function nodeName(id) {
  return id === null || id === undefined ? "no leader" : "node " + id;
}

// A group's page on the console of the node coordinating it: this console's own page for its
// groups, the other node's console (as it registered it) for the rest, no link when unknown.
function groupHref(node, group) {
  const page = "#/group/" + encodeURIComponent(group);
  if (!node) return null;
  if (node.this) return page;
  return node.console ? node.console.replace(/\/?$/, "/") + page : null;
}

function clusterPage(data) {
  const byId = new Map(data.nodes.filter((n) => n.alive).map((n) => [n.node_id, n]));
  const live = data.nodes.filter((n) => n.alive).length;
  const summary = data.clustered
    ? `${live} live node(s), ${data.nodes.length - live} dead · this is node ${data.node_id} · controller node ${data.controller_id}`
    : `Cluster mode is off (storage on files): node ${data.node_id} alone leads every partition.`;
  const nodes = el("table", { id: "nodes-table" },
    el("thead", {}, el("tr", {}, ["Node", "Address", "Rack", "Console", "State", "Last heartbeat", "Partitions",
      "Group shards", "Transaction shards", "Groups"].map((h, i) => el("th", { class: i >= 6 ? "num" : "" }, h)))),
    el("tbody", {}, data.nodes.map((n) => el("tr", { "data-node": n.node_id, class: n.alive ? "alive" : "dead" },
      el("td", {}, nodeName(n.node_id), n.this ? el("span", { class: "muted" }, " (this node)") : null,
        n.controller ? el("span", { class: "muted" }, " (controller)") : null),
      el("td", {}, n.host === null ? "–" : `${n.host}:${n.port}`), el("td", {}, n.rack ?? "–"),
      el("td", {}, n.console && n.alive ? el("a", { class: "console", href: n.console }, n.console) : n.console ?? "–"),
      el("td", { class: "node-state" }, n.alive ? "alive" : "dead"),
      el("td", { class: "num" }, n.heartbeat_age_ms === null ? "–" : ago(n.heartbeat_age_ms) + " ago"),
      el("td", { class: "num partitions" }, n.partitions), el("td", { class: "num group-shards" }, n.group_shards),
      el("td", { class: "num txn-shards" }, n.transaction_shards), el("td", { class: "num groups" }, n.groups)))));
  const me = data.nodes.find((n) => n.this && n.figures);
  const figures = me ? el("p", { class: "muted", id: "node-figures" },
    `This node: ${me.figures.led} partitions led, ${me.figures.taken} taken, ${me.figures.handed_over} handed over,` +
    ` ${me.figures.fenced} lost to a successor (fenced).`) : null;
  const unreachable = data.unreachable.length ? el("ul", { id: "unreachable", class: "flag" },
    data.unreachable.map((u) => el("li", { "data-node": u.node_id }, `${nodeName(u.node_id)} unreachable: ${u.error}`))) : null;
  const loading = data.loading.length ? el("p", { class: "muted", id: "loading" },
    data.loading.map(nodeName).join(", ") + ": some coordinator shards still loading; their groups show once loaded.") : null;

  const rows = [];
  for (const e of data.leadership) {
    const key = e.node_id + "\u0000" + e.topic;
    const open = clusterUi.expanded.has(key);
    rows.push(el("tr", { class: "led", "data-node": e.node_id ?? "", "data-topic": e.topic },
      el("td", {}, nodeName(e.node_id)),
      el("td", {}, el("button", { class: "expand", "aria-expanded": String(open), title: "partitions",
        onclick: () => { open ? clusterUi.expanded.delete(key) : clusterUi.expanded.add(key); render(); } }, open ? "▾" : "▸"),
      " ", e.topic, e.internal ? el("span", { class: "muted" }, " (internal)") : null),
      el("td", { class: "num count" }, e.count), el("td", { class: "ranges wrap" }, e.ranges)));
    if (open) {
      rows.push(el("tr", { class: "partition" }, el("td", {}), el("td", { colspan: 3, class: "wrap" },
        e.partitions.map(([p, epoch]) => `${p} (epoch ${epoch < 0 ? "–" : epoch})`).join(", "))));
    }
  }
  const leadership = el("table", { id: "leadership-table" },
    el("thead", {}, el("tr", {}, ["Leader", "Topic", "Partitions", "Which"].map((h, i) => el("th", { class: i === 2 ? "num" : "" }, h)))),
    el("tbody", {}, rows));

  const shown = data.groups.filter((g) => g.group.toLowerCase().includes(clusterUi.filter.toLowerCase()));
  const groups = el("table", { id: "cluster-groups" },
    el("thead", {}, el("tr", {}, ["Group", "Type", "State", "Coordinator", "Shard"].map((h, i) => el("th", { class: i === 4 ? "num" : "" }, h)))),
    el("tbody", {}, shown.map((g) => {
      const href = groupHref(byId.get(g.coordinator), g.group);
      return el("tr", { "data-group": g.group, "data-coordinator": g.coordinator },
        el("td", {}, href ? el("a", { href }, g.group) : g.group), el("td", {}, g.type), el("td", { class: "state" }, g.state),
        el("td", { class: "coordinator" }, nodeName(g.coordinator)), el("td", { class: "num" }, g.shard));
    })));
  const filter = el("input", { id: "filter", type: "search", placeholder: "filter groups", value: clusterUi.filter,
    oninput: (e) => { clusterUi.filter = e.target.value; render(true); } });
  return [
    el("h1", {}, "Cluster"),
    el("p", { class: "muted", id: "cluster-summary" }, summary),
    el("h2", {}, "Nodes"), el("div", { class: "scroll" }, nodes), figures, unreachable, loading,
    el("h2", {}, "Who leads what"), el("div", { class: "scroll" }, leadership),
    el("h2", {}, "Groups in the cluster"),
    el("div", { class: "controls" }, filter, el("span", { class: "muted", id: "cluster-groups-count" },
      `${shown.length} shown of ${data.groups_total}` + (data.truncated ? " (list truncated)" : ""))),
    el("div", { class: "scroll" }, groups),
  ].filter((node) => node !== null);
}
