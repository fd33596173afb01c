"""Prometheus metrics and the operator's HTTP endpoints: ``/metrics``, ``/healthz``, ``/readyz``
(and the web console's paths, answered by broker/console/).

Served by ``kcoord serve --metrics-port N`` from the broker's own event loop (a tiny HTTP/1.1
server, whose connections broker/metrics/http.py bounds). A scrape first reads the coordinator's state into a snapshot, in slices between which
the loop serves its clients (broker/metrics/group_state.py), then renders the snapshot in the
worker thread (its series per group partition and per topic partition are most of a big
response).

Two kinds of metrics:

- event metrics, updated as things happen through the broker's hooks: requests and their
  latency by API, completed rebalances and their duration, log append and fsync latency, the
  load time of each ``__consumer_offsets`` partition;
- state metrics, computed at scrape time from the shards (:class:`_CoordinatorCollector`):
  groups by state, committed, expired and deleted offsets, and kafka_exporter's consumer-group
  series (``kafka_consumergroup_current_offset``, ``kafka_consumergroup_lag``,
  ``kafka_consumergroup_members``, with its labels ``consumergroup``, ``topic``, ``partition``)
  with ``kafka_consumergroup_lag_seconds`` beside them (lag as broker/metrics/lag.py computes
  it). Only ``metrics.max.groups`` groups get series of their own, the others are summed into
  ``consumergroup="__other__"`` (see broker/metrics/group_state.py for the rule);
- kafka_exporter's broker and topic series (``kafka_brokers``, ``kafka_topic_partitions``,
  ``kafka_topic_partition_*``), bounded by ``metrics.max.partitions``, each partition reported
  by its leader only in a cluster (broker/metrics/topic_series.py);
- share groups (KIP-932): groups by state, members, and per share partition the records in
  flight, acquired and archived, bounded the same way (broker/metrics/share_state.py), beside
  counters the share layer keeps (acknowledgements by type, lock timeouts, share requests) and
  two event histograms (share partition load time, share-state write latency).

Completed rebalances count by group, group type and trigger
(``kcoord_group_rebalances_total{group,type,trigger}``): the first ``metrics.max.groups`` groups
to rebalance get series of their own (kept for the broker's life, as a counter's series must
be), every later one counts under ``group="__other__"``.

Label values that clients choose are bounded the same way: the principals refused by the ACLs
(``kcoord_authorization_denied_total``) get series of their own for the first
:data:`MAX_PRINCIPALS` of them no longer than :data:`MAX_PRINCIPAL_CHARS`, and every other
refusal counts under ``principal="__other__"``. A principal can be any string a client sends
(an unsigned OAUTHBEARER token names whom it likes), and a series, once made, lives as long as
the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kcoord.coordinator.output import RebalanceCompleted
from kcoord.protocol.apis import ApiKey

from ..console.login import CHALLENGE, ConsoleLogin
from ..console.routes import Console
from ..console.views import ConsoleState
from ..net.offload import off_loop
from ..services import MetricsHooks
from ..txn.data import OpenTxns
from .group_state import OTHER, GroupsSnapshot, group_metrics, read_groups
from .http import Answer, HttpConnections, HttpLimits, Request
from .lag import RecordTimes
from .share_state import SharesSnapshot, read_shares, share_metrics
from .topic_series import TopicsSnapshot, read_topics, topic_metrics

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..cluster.peers import Peers
    from ..cluster.view import ClusterView, MemberFigures
    from ..config import Config
    from ..data.topics import TopicStore
    from ..groups.runtime import GroupRuntime
    from ..share.partitions import SharePartitionManager
    from ..share.state_runtime import ShareStateRuntime

log = logging.getLogger("kcoord.metrics")

_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


MAX_PRINCIPALS = 100
"""Principals with ``kcoord_authorization_denied_total`` series of their own: the first ones
refused (kept for the broker's life, as Prometheus counters are)."""
MAX_PRINCIPAL_CHARS = 256
"""A longer principal is never a label value (a TLS subject with a few fields fits)."""
OTHER_PRINCIPAL = "__other__"
"""The principal label of the refusals of every other principal (no principal has this name:
they are ``User:...``)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def api_name(api_key: int) -> str:
    """Kafka's request name for an API key (``OFFSET_COMMIT`` -> ``OffsetCommit``)."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(word.capitalize() for word in name.split("_"))


@dataclass(frozen=True, slots=True)
class CoordinatorState:
    """What a scrape reads the state metrics from."""

    runtime: GroupRuntime
    topics: TopicStore
    producers: Sized
    """The producer states held (``DataApi.producers``)."""
    config: Config
    """Read at each scrape for ``metrics.max.groups`` (groups with series of their own)."""
    transactions: Callable[[], list[OpenTxns]] | None = None
    """The partitions with open transactions (``AllProducers.open_transactions``)."""
    cluster: Callable[[], MemberFigures] | None = None
    """This node's part in the cluster (cluster mode: ``ClusterMember.figures``)."""
    shares: SharePartitionManager | None = None
    """The share partitions held here and the share counters (the console reads them too)."""
    share_state: ShareStateRuntime | None = None
    """The share coordinator (``__share_group_state``'s pruning)."""
    view: ClusterView | None = None
    """The live nodes and who leads each partition (the topic series); None: no topic series."""
    peers: Peers | None = None
    """Requests to the other nodes (cluster mode: the console asks them for their groups)."""


class BrokerMetrics:
    """Every metric of one broker, in its own registry (so several brokers can share a process).

    Built before the parts it measures, which are handed its :meth:`hooks`; the state it
    reports at scrape time is read from what :meth:`observe` is given once they exist."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: they only add noise to every scrape
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kcoord_requests", "Requests received, by API.", ["api"], registry=r
        )
        self.request_latency = Histogram(
            "kcoord_request_latency_seconds",
            "Time from a request's arrival to its response being ready, by API.",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.connections_refused = Counter(
            "kcoord_connections_refused",
            "Connections closed by a limit, for being idle or slow, or after a failed login.",
            ["reason"],
            registry=r,
        )
        self.authorization_denied = Counter(
            "kcoord_authorization_denied",
            f"Operations the ACLs refused, by principal (the first {MAX_PRINCIPALS}, the others"
            f' as "{OTHER_PRINCIPAL}") and resource type.',
            ["principal", "resource_type"],
            registry=r,
        )
        self.rebalances = Counter(
            "kcoord_group_rebalances",
            "Completed rebalances (classic and consumer groups) by group (the first"
            f' metrics.max.groups groups to rebalance, the others as "{OTHER}"), group type and'
            " trigger.",
            ["group", "type", "trigger"],
            registry=r,
        )
        self.rebalance_duration = Histogram(
            "kcoord_group_rebalance_duration_seconds",
            "Time from a rebalance's start to a Stable group (or Empty at a new generation).",
            buckets=_REBALANCE_BUCKETS,
            registry=r,
        )
        self.rebalance_by_trigger = Histogram(
            "kcoord_group_rebalance_trigger_seconds",
            "Rebalance duration by what started it (member_joined, member_left, member_expired,"
            " subscription_changed, metadata_changed, other) and group type.",
            ["trigger", "type"],
            buckets=_REBALANCE_BUCKETS,
            registry=r,
        )
        self.log_append = Histogram(
            "kcoord_log_append_seconds",
            "Time to append a batch of records to a partition log (without fsync).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.log_flush = Histogram(
            "kcoord_log_flush_seconds",
            "Time of one group-commit fsync round over the dirty logs.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.partition_load = Histogram(
            "kcoord_offsets_partition_load_seconds",
            "Time to load one __consumer_offsets partition at start-up.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.share_partition_load = Histogram(
            "kcoord_share_partition_load_seconds",
            "Time to load one share partition's state, or initialize it (Kafka: PartitionLoadTimeMs).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.share_state_write = Histogram(
            "kcoord_share_coordinator_write_seconds",
            "Time of one share-state write until durable (Kafka: share coordinator write-total,"
            " write-latency-avg and -max).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        ProcessCollector(registry=r)
        self._coordinator = _CoordinatorCollector()
        r.register(self._coordinator)
        self._denied_principals: set[str] = set()
        self._rebalanced_groups: set[str] = set()
        self.record_times = RecordTimes()
        """Timestamps read for lag in seconds, shared by the scrapes and the web console."""
        self._requests_by_key: dict[int, Counter] = {}
        self._latency_by_key: dict[int, Histogram] = {}

    def hooks(self) -> MetricsHooks:
        """The hooks through which the broker's parts report to these metrics."""
        return MetricsHooks(
            enabled=True,
            request=self.request,
            response=self.response_since,
            log_append=self.log_append.observe,
            log_flush=self.log_flush.observe,
            partition_load=self.partition_load.observe,
            rebalance=self.rebalance,
            refused=self.refused,
            denied=self.denied,
            share_partition_load=self.share_partition_load.observe,
            share_state_write=self.share_state_write.observe,
        )

    def observe(self, state: CoordinatorState) -> None:
        """Read the state metrics from ``state`` (before the first scrape)."""
        self._coordinator.source = state

    @property
    def state(self) -> CoordinatorState | None:
        """What :meth:`observe` was given (the web console reads it too)."""
        return self._coordinator.source

    # hooks ------------------------------------------------------------------------------------
    def refused(self, reason: str) -> None:
        self.connections_refused.labels(reason).inc()

    def denied(self, principal: str, resource_type: str) -> None:
        known = self._denied_principals
        if principal not in known:
            if len(known) < MAX_PRINCIPALS and len(principal) <= MAX_PRINCIPAL_CHARS:
                known.add(principal)
            else:
                principal = OTHER_PRINCIPAL
        self.authorization_denied.labels(principal, resource_type).inc()

    def request(self, api_key: int) -> None:
        child = self._requests_by_key.get(api_key)
        if child is None:
            child = self._requests_by_key[api_key] = self.requests.labels(api_name(api_key))
        child.inc()

    def response(self, api_key: int, seconds: float) -> None:
        child = self._latency_by_key.get(api_key)
        if child is None:
            child = self._latency_by_key[api_key] = self.request_latency.labels(api_name(api_key))
        child.observe(seconds)

    def response_since(self, api_key: int, started: float) -> None:
        """:meth:`response` for a request that arrived at ``started`` (``time.perf_counter()``)."""
        self.response(api_key, time.perf_counter() - started)

    def rebalance(self, done: RebalanceCompleted) -> None:
        group, known = done.group_id, self._rebalanced_groups
        if group not in known:
            source = self._coordinator.source
            cap = int(source.config["metrics.max.groups"]) if source is not None else 0
            if len(known) < cap:
                known.add(group)
            else:
                group = OTHER
        self.rebalances.labels(group, done.group_type, done.trigger).inc()
        self.rebalance_duration.observe(done.duration_ms / 1000.0)
        self.rebalance_by_trigger.labels(done.trigger, done.group_type).observe(
            done.duration_ms / 1000.0
        )

    async def exposition(self) -> bytes:
        """The whole ``/metrics`` response: the coordinator's state is read first (in slices),
        the collectors of live state then run on the loop, and the families made from the
        snapshots (the bulk of a big response) are built and the text written in the worker
        thread."""
        collector = self._coordinator
        source = collector.source
        assert source is not None, "BrokerMetrics.observe() comes before the first scrape"
        max_groups = int(source.config["metrics.max.groups"])
        snapshot = await read_groups(
            source.runtime, source.topics, max_groups, self.record_times, _now_ms()
        )
        shares = await read_shares(source.runtime, source.shares, max_groups)
        topics = None
        if source.view is not None:
            max_partitions = int(source.config["metrics.max.partitions"])
            topics = await read_topics(source.topics, source.view, max_partitions)
        # Collected right away (no other scrape can come between): the families read from
        # live state here, on the loop; those made from the snapshots (a series per group
        # partition and per topic partition, tens of thousands of samples) in the worker.
        collector.shares = shares
        try:
            collected = _Collected(list(self.registry.collect()), snapshot, topics)
        finally:
            collector.shares = None
        return await off_loop(generate_latest, collected)


class _Collected(Collector):
    """Metric families to write out with ``generate_latest`` in the worker thread: those
    already collected on the loop, and, in the place the coordinator's collector gives them
    (:data:`_SNAPSHOT_FAMILIES`), those made from the snapshots, which nothing changes any
    more."""

    def __init__(
        self, metrics: list[Metric], groups: GroupsSnapshot, topics: TopicsSnapshot | None
    ) -> None:
        self.metrics = metrics
        self.groups = groups
        self.topics = topics

    def collect(self) -> Iterator[Metric]:
        for metric in self.metrics:
            if metric is _SNAPSHOT_FAMILIES:
                yield from group_metrics(self.groups)
                if self.topics is not None:
                    yield from topic_metrics(self.topics)
            else:
                yield metric


_SNAPSHOT_FAMILIES = GaugeMetricFamily("kcoord_snapshot_families", "(never written out)")
"""Where the families made from a scrape's snapshots go among the others (:class:`_Collected`)."""


class _CoordinatorCollector(Collector):
    """State metrics read from live state (producers, share counters, transactions, the
    cluster), and the place of those made from the snapshots :meth:`BrokerMetrics.exposition`
    has just read (rendered by :class:`_Collected`)."""

    def __init__(self) -> None:
        self.source: CoordinatorState | None = None
        self.shares: SharesSnapshot | None = None

    def describe(self) -> list[Metric]:
        return []  # computed at scrape time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        source = self.source
        assert source is not None
        runtime = source.runtime
        yield _SNAPSHOT_FAMILIES  # the groups' and topics' series, made in the worker
        yield GaugeMetricFamily(
            "kcoord_producer_ids",
            "Idempotent producer states held for de-duplication (one per partition written).",
            value=len(source.producers),
        )
        if self.shares is not None:
            yield from share_metrics(self.shares, source.shares, source.share_state)
        if source.transactions is not None:
            yield from _transaction_metrics(source.transactions())
        if source.cluster is not None:
            yield from _cluster_metrics(source.cluster())
        if runtime.load_seconds is not None:
            yield GaugeMetricFamily(
                "kcoord_offsets_load_seconds",
                "Time to load every __consumer_offsets partition at start-up.",
                value=runtime.load_seconds,
            )


def _cluster_metrics(f: MemberFigures) -> Iterator[Metric]:
    yield GaugeMetricFamily("kcoord_cluster_nodes", "Live nodes of the cluster, as this node sees them.",
                            value=f.live_nodes)
    yield GaugeMetricFamily("kcoord_cluster_partitions_led", "Partitions this node leads.",
                            value=f.led)
    yield CounterMetricFamily("kcoord_cluster_partitions_taken",
                              "Partitions this node took (each raising its leader epoch).",
                              value=f.taken)
    yield CounterMetricFamily("kcoord_cluster_handovers",
                              "Partitions this node handed over to another (clean hand-overs).",
                              value=f.handed_over)
    yield CounterMetricFamily("kcoord_cluster_fenced",
                              "Partitions this node lost to a successor while it led them.",
                              value=f.fenced)


def _transaction_metrics(partitions: list[OpenTxns]) -> Iterator[Metric]:
    """Per partition with open transactions: how many, and the oldest one's age (a stuck
    last stable offset shows there first)."""
    ongoing = GaugeMetricFamily(
        "kcoord_partition_ongoing_transactions",
        "Open transactions in a partition (they hold back its last stable offset).",
        labels=["topic", "partition"],
    )
    age = GaugeMetricFamily(
        "kcoord_partition_oldest_transaction_age_seconds",
        "Age of the oldest open transaction in a partition.",
        labels=["topic", "partition"],
    )
    now_ms = time.time() * 1000
    for p in partitions:
        labels = [p.topic, str(p.partition)]
        ongoing.add_metric(labels, p.count)
        age.add_metric(labels, max(0.0, (now_ms - p.oldest_start_ms) / 1000))
    yield ongoing
    yield age


# HTTP -------------------------------------------------------------------------------------------
class MetricsServer:
    """``/metrics`` (Prometheus text format), ``/healthz`` (200 while the Kafka listener is up)
    and ``/readyz`` (200 once every offsets partition is loaded, else 503), over the bounded
    connections of broker/metrics/http.py (``limits``: the defaults unless given).

    ``serving`` says whether the Kafka listener is up; ``runtime`` is the group runtime, whose
    shards say whether their offsets partition is loaded."""

    def __init__(
        self,
        metrics: BrokerMetrics,
        host: str,
        port: int,
        *,
        serving: Callable[[], bool],
        runtime: GroupRuntime,
        login: ConsoleLogin | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self.metrics = metrics
        self.login = login
        """Set when the broker has an authorizer: the console then asks who is looking."""
        self._serving = serving
        self._runtime = runtime
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._console: Console | None = None
        self.connections = HttpConnections(self._handle, limits or HttpLimits(), self._refused)
        """The HTTP connections: their bounds, and how many are held."""

    @property
    def console(self) -> Console | None:
        """The web console, once the metrics observe the broker's state."""
        if self._console is None and self.metrics.state is not None:
            source = self.metrics.state
            self._console = Console(
                ConsoleState(
                    source.runtime,
                    source.topics,
                    _now_ms,
                    self.metrics.record_times,
                    shares=source.shares,
                    view=source.view,
                    peers=source.peers,
                    figures=source.cluster,
                )
            )
        return self._console

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self.connections.serve, self.host, self.port, reuse_address=True
        )
        log.info("metrics on http://%s:%d/metrics (also /healthz, /readyz)", self.host, self.bound_port)

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def base_url(self, host: str | None = None) -> str:
        """``http://host:port`` where this server is bound (at ``host`` if given)."""
        host = self.host if host is None else host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.bound_port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def respond(
        self,
        method: str,
        path: str,
        authorization: str | None = None,
        host: str = "",
        request: Request | None = None,
    ) -> Answer:
        """Status, content type and body for a request (401 for a console path without a
        good login, when the console asks for one; a POST is one of the console's actions)."""
        if method in ("GET", "HEAD") and path.split("?", 1)[0] == "/metrics":
            return 200, CONTENT_TYPE_LATEST, await self.metrics.exposition()
        console = self.console
        if method in ("GET", "HEAD", "POST") and console is not None and console.handles(path):
            viewer = None
            if self.login is not None:
                viewer = await self.login.viewer(authorization, host)
                if viewer is None:
                    return 401, "text/plain; charset=utf-8", b"log in with a kcoord user\n"
            answer = await console.respond(
                path, viewer, method=method, authorization=authorization, host=host,
                headers=request.headers if request else None, body=request.body if request else b"",
            )  # fmt: skip
            if answer is not None:
                return answer
        return self.answer(method, path)

    def answer(self, method: str, path: str) -> Answer:
        """:meth:`respond` for every request but a read of ``/metrics`` (which awaits)."""
        path = path.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"method not allowed\n"
        if path == "/healthz":
            if self._serving():
                return 200, "text/plain; charset=utf-8", b"ok\n"
            return 503, "text/plain; charset=utf-8", b"not serving\n"
        if path == "/readyz":
            runtime = self._runtime
            done = sum(sr.loaded for sr in runtime.shards)
            total = len(runtime.shards)
            if self._serving() and done == total:
                return 200, "text/plain; charset=utf-8", b"ready\n"
            body = f"loading {done}/{total} offsets partitions\n".encode()
            return 503, "text/plain; charset=utf-8", body
        return 404, "text/plain; charset=utf-8", b"not found: try /, /metrics, /healthz, /readyz\n"

    async def _handle(self, request: Request) -> tuple[Answer, str]:
        answer = await self.respond(
            request.method, request.path, request.authorization, request.host, request
        )
        challenge = f"WWW-Authenticate: {CHALLENGE}\r\n" if answer[0] == 401 else ""
        return answer, challenge

    def _refused(self, reason: str) -> None:
        self.metrics.refused(reason)
