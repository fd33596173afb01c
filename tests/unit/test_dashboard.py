"""deploy/grafana/ and docker-compose.yml: the dashboard's queries are well-formed PromQL whose
metric names can be read out (:func:`dashboard_metric_names`; tests/integration/test_metrics.py
checks each against what a running broker's /metrics exports), Grafana is provisioned with the
dashboard and a Prometheus data source of the uid its panels name, and the broker has an
external listener published for host applications beside the one the compose network uses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from kcoord.broker.config import Config

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "kcoord.json"

FUNCTIONS = frozenset(
    {"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "histogram_quantile"}
)
"""The PromQL functions and aggregations the dashboard may use."""
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
"""Keywords followed by a parenthesized list of label names."""
KEYWORDS = frozenset({"bool", "and", "or", "unless", "offset"})
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_LABEL_VALUES = re.compile(r"^label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*[A-Za-z_]\w*\s*\)$")


def _balanced(expr: str) -> bool:
    closing = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for ch in expr:
        if ch in "([{":
            stack.append(ch)
        elif ch in closing and (not stack or stack.pop() != closing[ch]):
            return False
    return not stack


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads; AssertionError if it is not well-formed (as
    far as this reader checks: balanced brackets, known functions, label lists after
    ``by``/``on``..., nothing but names, numbers and operators between)."""
    bare = _STRING.sub('""', expr)
    assert _balanced(bare), f"unbalanced brackets: {expr}"
    bare = re.sub(r"\{[^{}]*\}", " ", bare)  # label matchers
    bare = re.sub(r"\[[^\[\]]*\]", " ", bare)  # ranges ([5m], [$__rate_interval])
    assert "{" not in bare and "[" not in bare, f"nested matchers or ranges: {expr}"
    names: set[str] = set()
    pos = 0
    while pos < len(bare):
        ch = bare[pos]
        if ch.isspace() or ch in "()+-*/,<>=!^%":
            pos += 1
            continue
        number = re.match(r"\d+(\.\d+)?", bare[pos:])
        if number:
            pos += number.end()
            continue
        ident = _IDENT.match(bare, pos)
        assert ident, f"unexpected {bare[pos:]!r} in: {expr}"
        word, pos = ident.group(), ident.end()
        rest = bare[pos:].lstrip()
        if word in LABEL_LISTS and (rest.startswith("(") or not word.startswith("group_")):
            assert rest.startswith("("), f"{word} without its label list: {expr}"
            close = rest.index(")")
            labels = [x.strip() for x in rest[1:close].split(",") if x.strip()]
            assert all(_IDENT.fullmatch(x) for x in labels), f"bad label list: {expr}"
            pos = len(bare) - len(rest) + close + 1
        elif rest.startswith("(") or re.match(r"(by|without)\s*\(", rest):
            assert word in FUNCTIONS, f"unknown function {word}: {expr}"
        elif word not in KEYWORDS and word not in LABEL_LISTS:
            names.add(word)
    return names


def _dashboard() -> dict[str, Any]:
    with open(DASHBOARD) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def dashboard_metric_names() -> set[str]:
    """Every metric name the dashboard's panels and variables query."""
    doc = _dashboard()
    names: set[str] = set()
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            found = metric_names(target["expr"])
            assert found, f"panel {panel['title']!r} queries no metric: {target['expr']}"
            names |= found
    for var in doc["templating"]["list"]:
        query = var["query"]["query"]
        match = _LABEL_VALUES.match(query)
        assert match, f"variable {var['name']}: {query}"
        names.add(match.group(1))
    return names


def test_the_reader_finds_names_and_refuses_what_it_cannot_read() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, api) (rate(kcoord_request_latency_seconds_bucket'
        '{api=~"$api", x="a{b"}[$__rate_interval]))) + on (api) group_left up * 2'
    )
    assert metric_names(expr) == {"kcoord_request_latency_seconds_bucket", "up"}
    for bad in ("sum(a", "frobnicate(a)", "a{b=\"c\"", "sum by a (b)", "a ? b"):
        try:
            metric_names(bad)
        except (AssertionError, ValueError):
            continue
        raise AssertionError(f"read as PromQL: {bad}")


def test_every_panel_queries_kcoord_series_through_the_provisioned_data_source() -> None:
    doc = _dashboard()
    with open(ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml") as f:
        (source,) = yaml.safe_load(f)["datasources"]
    uids = set()
    titles = [p["title"] for p in doc["panels"] if p["type"] != "row"]
    assert len(titles) == len(set(titles)) >= 10
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        uids.add(panel["datasource"]["uid"])
        uids.update(t["datasource"]["uid"] for t in panel["targets"])
    assert uids == {source["uid"]}
    names = dashboard_metric_names()
    # what the issue asks the dashboard to show
    for wanted in (
        "kafka_brokers",
        "kafka_topic_partition_current_offset",
        "kafka_consumergroup_lag",
        "kafka_consumergroup_lag_seconds",
        "kafka_consumergroup_members",
        "kcoord_group_rebalances_total",
        "kcoord_offset_commits_total",
        "kcoord_request_latency_seconds_bucket",
    ):
        assert wanted in names
    assert all(n.startswith(("kafka_", "kcoord_", "process_")) for n in names), names


def test_compose_provisions_grafana_and_publishes_an_external_listener() -> None:
    with open(ROOT / "docker-compose.yml") as f:
        services = yaml.safe_load(f)["services"]
    grafana = services["grafana"]
    mounts = dict(v.removesuffix(":ro").split(":", 1) for v in grafana["volumes"])
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    provisioning = ROOT / "deploy/grafana/provisioning"
    assert (provisioning / "datasources" / "prometheus.yml").is_file()
    with open(provisioning / "dashboards" / "kcoord.yml") as f:
        (provider,) = yaml.safe_load(f)["providers"]
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    assert DASHBOARD.parent == ROOT / "deploy/grafana/dashboards"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
    with open(provisioning / "datasources" / "prometheus.yml") as f:
        (source,) = yaml.safe_load(f)["datasources"]
    prometheus_port = services["prometheus"]["ports"][0].split(":")[-1]
    assert source["url"] == f"http://prometheus:{prometheus_port}"

    from kcoord.broker.net.listeners import parse_listeners

    broker = services["kcoord"]
    config = Config.load(environ={k: str(v) for k, v in broker["environment"].items()})
    listeners = {lst.name: lst for lst in parse_listeners(config)}
    internal, external = listeners["INTERNAL"], listeners["EXTERNAL"]
    assert (internal.advertised_host, internal.advertised_port) == ("kcoord", internal.port)
    assert external.advertised_host == "localhost"
    published = {tuple(p.split(":")) for p in broker["ports"]}
    assert (str(external.advertised_port), str(external.port)) in published
    assert not any(port == str(internal.port) for _, port in published)  # not for the host
    consumer = services["consumer"]["environment"]["BOOTSTRAP_SERVERS"]
    assert consumer == f"kcoord:{internal.port}"
