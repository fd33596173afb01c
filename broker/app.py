"""The broker process: builds every part of the broker, wires them together and runs them.

It owns the config, the topic registry, the flusher, the group, transaction and share-state
runtimes, the metrics and the listening socket, and maps each API key to its handler. Each part
is handed the few services it uses (``broker/services.py``), never the broker: nothing but the
command line imports this module.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from kcoord.protocol.apis import ApiKey
from kcoord.storage.engine import Documents

from .admin_api.cluster import ClusterApi
from .admin_api.configs import ConfigApi
from .cluster.documents import SharedDocuments
from .cluster.identity import NodeIdentity
from .cluster.led_engine import LedEngine
from .cluster.peers import Peers
from .cluster.view import ClusterView
from .config import Config
from .console.login import ConsoleLogin
from .data.api import DataApi
from .data.flusher import Flusher
from .data.producers_api import ProducersApi
from .data.reopening import LogReopener
from .data.retention import LogRetention
from .data.storage_engine import open_engine
from .data.topic_configs import CONFIGS_FILE, TopicConfigs
from .data.topic_names import SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from .data.topics import INTERNAL_TOPICS, OFFSETS_TOPIC, PartitionLimits, TopicStore
from .groups.api import GroupApi
from .groups.consumer_api import ConsumerGroupApi
from .groups.deleted_topics import DeletedTopicOffsets
from .groups.group_configs import CONFIGS_FILE as GROUP_CONFIGS_FILE
from .groups.group_configs import GroupConfigs
from .groups.join_sync import JoinSyncDirect
from .groups.offset_api import OffsetApi
from .groups.runtime import GroupRuntime
from .groups.share_api import ShareGroupApi
from .groups.txn_offset_api import TxnOffsetApi
from .metrics.http import HttpLimits
from .metrics.prometheus import BrokerMetrics, CoordinatorState, MetricsServer
from .net.admission import RequestMemory
from .net.binding import bind_listeners, console_unbound
from .net.connection import Connection, ConnectionServices, DirectHandler, Handler
from .net.limits import ConnectionLimits
from .net.listeners import parse_listeners, server_ssl_context
from .security.acl.api import AclApi
from .security.acl.store import FILE_NAME as ACLS_FILE
from .security.acl.store import AclStore, build_authorizer
from .security.sasl.api import SaslApi
from .security.sasl.credentials import FILE_NAME as SCRAM_FILE
from .security.sasl.credentials import CredentialStore
from .security.sasl.password_checks import PasswordChecks
from .security.sasl.users_api import UsersApi
from .services import MetricsHooks
from .share.admin_api import ShareOffsetsApi
from .share.api import ShareApi
from .share.partitions import SharePartitionManager
from .share.persister import RetryingPersister, SharePersister
from .share.remote_persister import RoutingPersister
from .share.state_api import ShareStateApi
from .share.state_runtime import ShareStateRuntime
from .txn.api import TxnApi
from .txn.markers import MarkerWriter
from .txn.producer_ids import ProducerIdBlocks
from .txn.remote import RemoteTxn, TxnVerification
from .txn.runtime import TxnRuntime

if TYPE_CHECKING:
    from kcoord.storage.postgres.engine import PostgresEngine

    from .cluster.member import ClusterMember

log = logging.getLogger("kcoord.broker")

META_PROPERTIES = "meta.properties"


def _read_cluster_id(documents: Documents, node_id: int) -> str:
    """The cluster id kept in the document ``meta.properties`` (Kafka's file), created on first
    start. If it cannot be written (a full disk) the new id is used for this run only."""
    stored = documents.read_document(META_PROPERTIES)
    if stored is not None:
        for line in stored.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id" and value.strip():
                return value.strip()
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    try:
        text = f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
        documents.write_document(META_PROPERTIES, text.encode())
    except OSError as e:
        log.warning("could not write %s (%s): cluster id %s holds for this run only",
                    META_PROPERTIES, e.strerror, cluster_id)
    return cluster_id


def _partition_exists(topics: TopicStore, name: str, partition: int) -> bool:
    topic = topics.get(name)
    return topic is not None and 0 <= partition < len(topic.partitions)


class Broker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.connections: set[Connection] = set()
        self.request_memory = RequestMemory(config["queued.max.request.bytes"])
        config.data_dir.mkdir(parents=True, exist_ok=True)
        fsync = config["log.flush.interval.messages"] == 1
        engine = self.engine = open_engine(config, fsync)
        log.info("storage: %s", engine.description)
        engine.start()
        self.cluster_id = _read_cluster_id(engine, config["node.id"])
        # Cluster mode: every node over one PostgreSQL is a node of one cluster (a single one
        # included); the topic registry sees the engine through the partitions this node leads.
        self.clustered = config.storage_url is not None
        self.listeners = parse_listeners(config)
        self.view = ClusterView(
            config["node.id"],
            tuple((lst.name, lst.advertised_host, lst.advertised_port) for lst in self.listeners),
            config["broker.rack"] or None,
            self.clustered,
        )
        self.member: ClusterMember | None = None
        if self.clustered:
            engine = LedEngine(engine)
        # Metrics exist only when served (--metrics-port): otherwise the hooks cost nothing.
        self.metrics: BrokerMetrics | None = None
        self._metrics_server: MetricsServer | None = None
        if config.metrics_port is not None:
            self.metrics = BrokerMetrics()
        hooks = self.metrics.hooks() if self.metrics is not None else MetricsHooks()
        self.topics = TopicStore(
            engine,
            config["log.segment.bytes"],
            PartitionLimits(config["max.broker.partitions"], config["max.partitions.per.request"]),
            configs=TopicConfigs(
                self.engine, lambda name: (config[name], config.source(name) == "default")
            ),
        )
        self.flusher = Flusher(
            enabled=fsync,
            on_flushed=self.topics.notify_appended,
            observe=hooks.log_flush,
        )
        self.cluster = ClusterApi(config, self.topics, self.cluster_id, self.view)
        # Kafka's group configs (GROUP config resource): read by the coordinator and the share
        # partitions at each use, changed by IncrementalAlterConfigs.
        self.group_configs = GroupConfigs(self.engine, config.__getitem__)
        self.group_configs.read()
        self.config_api = ConfigApi(config, self.topics, self.group_configs)
        self.retention = LogRetention(config, self.topics)
        self.groups = GroupRuntime(
            config, self.topics, self.flusher, hooks, self.clustered,
            overrides=self.group_configs.of,
        )
        self.deleted_offsets = DeletedTopicOffsets(self.groups)  # Kafka's onPartitionsDeleted
        self.topics.deleted_hooks.append(self.deleted_offsets.topic_deleted)
        # The transaction coordinator (issue 16): markers go to the data partitions through the
        # data plane's MarkerWriter, to __consumer_offsets through the group runtime.
        # In a cluster, markers and verifications of what other nodes lead go to them
        # (broker/txn/remote.py, over broker/cluster/peers.py).
        self.peers: Peers | None = None
        remote: RemoteTxn | None = None
        if self.clustered:
            first = self.listeners[0]
            self.peers = Peers(self.view, first.name, first.security_protocol,
                               config["broker.session.timeout.ms"] / 1000.0)
            remote = RemoteTxn(self.peers, self.view)
        self.markers = MarkerWriter(
            self.topics, self.flusher, offsets_marker=self.groups.write_txn_marker, remote=remote
        )
        producers = ProducersApi(self.topics)
        self.transactions = TxnRuntime(
            config,
            self.topics,
            self.flusher,
            write_markers=self.markers.write_markers,
            allocate_producer_id=ProducerIdBlocks(self.engine).allocate,
            clustered=self.clustered,
        )
        # The share coordinator's durable state (issue 29): __share_group_state, the
        # persister of the share partitions.
        self.share_state = ShareStateRuntime(
            config, self.topics, self.flusher, clustered=self.clustered,
            observe_write=hooks.share_state_write,
        )
        self.data = DataApi(
            config, self.topics, self.flusher, hooks,
            TxnVerification(self.transactions, self.view, remote),
            self.view,
        )
        txn = TxnApi(
            self.transactions,
            partition_exists=functools.partial(_partition_exists, self.topics),
            group_partition=self.groups.partition_of,
        )
        self.group_api = GroupApi(config, self.groups, self.view, transactions=txn)
        g = self.group_api
        # Share groups (KIP-932): the share partitions fetched here and the share sessions,
        # their state kept by the share coordinator; a member leaving its group (or fenced)
        # gives back the records it held.
        # In a cluster each state call goes to the node leading the key's __share_group_state
        # partition (broker/share/remote_persister.py; answered by broker/share/state_api.py).
        persister: SharePersister = self.share_state
        if self.peers is not None:
            persister = RoutingPersister(self.share_state, self.view, self.peers)
        self.share = SharePartitionManager(
            config, self.topics, RetryingPersister(persister), self.group_configs.of,
            leader_epoch=self._leader_epoch, observe_load=hooks.share_partition_load,
        )
        self.groups.share_member_left = self.share.member_left
        share_api = ShareApi(self.share, self.topics, self.view)
        share_offsets = ShareOffsetsApi(self.groups, self.share, self.topics)
        self.group_api.share_state_deleted = share_offsets.delete_group_state
        share_state_api = ShareStateApi(self.share_state)
        o = OffsetApi(config, self.groups, self.topics)
        cg = ConsumerGroupApi(self.groups)
        sg = ShareGroupApi(self.groups)
        self.credentials = credentials = CredentialStore(self.engine)
        # PBKDF2 work of unauthenticated clients: threads of its own, never the default
        # executor's, where the fsyncs of durable writes run.
        self.password_checks = PasswordChecks()
        sasl = SaslApi(config, credentials, self.password_checks, hooks.refused)
        users = UsersApi(credentials)
        self.authorizer = build_authorizer(config, self.engine, hooks.denied)
        acl_store = AclStore(self.engine, self.authorizer) if self.authorizer is not None else None
        acls = AclApi(acl_store)
        if isinstance(engine, LedEngine):
            shared: dict[str, Callable[[bytes | None], None]] = {
                CONFIGS_FILE: self.topics.configs.stored_elsewhere,
                GROUP_CONFIGS_FILE: self.group_configs.stored_elsewhere,
                SCRAM_FILE: credentials.stored_elsewhere,
            }
            if acl_store is not None:
                shared[ACLS_FILE] = acl_store.stored_elsewhere
            self.member = self._cluster_member(engine, SharedDocuments(self.engine, shared))
        if self.metrics is not None:
            self.metrics.observe(
                CoordinatorState(
                    self.groups,
                    self.topics,
                    self.data.producers,
                    config,
                    self.data.producers.open_transactions,
                    self.member.figures if self.member is not None else None,
                    shares=self.share,
                    share_state=self.share_state,
                    view=self.view,
                    peers=self.peers,
                )
            )
        self.handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self.cluster.api_versions,
            ApiKey.METADATA: self.cluster.metadata,
            ApiKey.CREATE_TOPICS: self.cluster.create_topics,
            ApiKey.DELETE_TOPICS: self.cluster.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.cluster.create_partitions,
            ApiKey.PRODUCE: self.data.produce,
            ApiKey.FETCH: self.data.fetch,
            ApiKey.LIST_OFFSETS: self.data.list_offsets,
            ApiKey.INIT_PRODUCER_ID: txn.init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: txn.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: txn.add_offsets_to_txn,
            ApiKey.END_TXN: txn.end_txn,
            ApiKey.LIST_TRANSACTIONS: txn.list_transactions,
            ApiKey.DESCRIBE_TRANSACTIONS: txn.describe_transactions,
            ApiKey.FIND_COORDINATOR: g.find_coordinator,
            ApiKey.JOIN_GROUP: g.join_group,
            ApiKey.SYNC_GROUP: g.sync_group,
            ApiKey.HEARTBEAT: g.heartbeat,
            ApiKey.LEAVE_GROUP: g.leave_group,
            ApiKey.LIST_GROUPS: g.list_groups,
            ApiKey.DESCRIBE_GROUPS: g.describe_groups,
            ApiKey.DELETE_GROUPS: g.delete_groups,
            ApiKey.OFFSET_COMMIT: o.offset_commit,
            ApiKey.OFFSET_FETCH: o.offset_fetch,
            ApiKey.OFFSET_DELETE: o.offset_delete,
            ApiKey.TXN_OFFSET_COMMIT: TxnOffsetApi(self.groups, self.topics).txn_offset_commit,
            ApiKey.DELETE_RECORDS: self.retention.delete_records,
            ApiKey.DESCRIBE_CONFIGS: self.config_api.describe_configs,
            ApiKey.ALTER_CONFIGS: self.config_api.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.config_api.incremental_alter_configs,
            ApiKey.SASL_HANDSHAKE: sasl.handshake,
            ApiKey.SASL_AUTHENTICATE: sasl.authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: users.describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: users.alter,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: cg.heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: cg.describe,
            ApiKey.SHARE_GROUP_HEARTBEAT: sg.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: sg.describe,
            ApiKey.DESCRIBE_ACLS: acls.describe_acls,
            ApiKey.CREATE_ACLS: acls.create_acls,
            ApiKey.DELETE_ACLS: acls.delete_acls,
            ApiKey.WRITE_TXN_MARKERS: self.markers.write_txn_markers,
            ApiKey.DESCRIBE_PRODUCERS: producers.describe_producers,
            ApiKey.SHARE_FETCH: share_api.share_fetch,
            ApiKey.SHARE_ACKNOWLEDGE: share_api.share_acknowledge,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share_offsets.describe,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: share_offsets.alter,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: share_offsets.delete,
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: share_state_api.initialize_state,
            ApiKey.READ_SHARE_GROUP_STATE: share_state_api.read_state,
            ApiKey.WRITE_SHARE_GROUP_STATE: share_state_api.write_state,
            ApiKey.DELETE_SHARE_GROUP_STATE: share_state_api.delete_state,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: share_state_api.read_state_summary,
        }
        # APIs with a hand-written hot path, tried before the generic decode (connection.py).
        # Not the heartbeats and OffsetFetch under an authorizer: its checks are on the generic path.
        self.direct_handlers: dict[int, DirectHandler] = {
            ApiKey.API_VERSIONS: self.cluster.api_versions_direct,
        }
        if self.authorizer is None:
            self.direct_handlers[ApiKey.HEARTBEAT] = g.heartbeat_direct
            self.direct_handlers.update(JoinSyncDirect(self.groups, config["socket.request.max.elements"]).handlers())
            self.direct_handlers[ApiKey.OFFSET_FETCH] = o.offset_fetch_direct
            self.direct_handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT] = cg.heartbeat_direct
        limits = ConnectionLimits(config)
        self._on_refused = hooks.refused
        ssl_context = (
            server_ssl_context(config) if any(lst.tls for lst in self.listeners) else None
        )
        self._servers_to_open = [
            (
                listener,
                ConnectionServices(
                    config=config,
                    handlers=self.handlers,
                    direct_handlers=self.direct_handlers,
                    open_connections=self.connections,
                    request_memory=self.request_memory,
                    metrics=hooks,
                    listener=listener,
                    limits=limits,
                    authorizer=self.authorizer,
                ),
                ssl_context if listener.tls else None,
            )
            for listener in self.listeners
        ]
        self._servers: list[asyncio.Server] = []
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._reopen_task: asyncio.Task[None] | None = None
        self._member_task: asyncio.Task[None] | None = None

    def _leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch this node leads ``topic``-``partition`` in (0 on one node)."""
        leader = self.view.leader(topic, partition)
        return leader.epoch if leader is not None else 0

    def _cluster_member(self, led: LedEngine, documents: SharedDocuments) -> ClusterMember:
        """This node's membership (cluster mode), holding the data directory's lock."""
        from .cluster.member import ClusterMember

        config = self.config
        self.identity = NodeIdentity(config.data_dir)
        self._previous_incarnation = self.identity.acquire()
        incarnation = uuid.uuid4()
        self.identity.record(incarnation)
        store = cast("PostgresEngine", self.engine).cluster_store(
            config["node.id"], incarnation, config["broker.session.timeout.ms"]
        )
        return ClusterMember(
            store,
            led,
            self.topics,
            self.view,
            self.flusher,
            {
                OFFSETS_TOPIC: self.groups,
                TRANSACTION_STATE_TOPIC: self.transactions,
                SHARE_GROUP_STATE_TOPIC: self.share_state,
            },
            config["broker.heartbeat.interval.ms"] / 1000.0,
            documents,
        )

    @property
    def serving(self) -> bool:
        """The Kafka listener is up (``/healthz``)."""
        return self._server is not None and self._server.is_serving()

    async def start(self) -> None:
        # Before anything else, the Kafka ports: bound (not yet listening), so that one in use
        # stops start-up before anything is loaded, and port 0 becomes a real, advertised port.
        bound = bind_listeners([listener for listener, _, _ in self._servers_to_open])
        self._servers_to_open = [
            (resolved, dataclasses.replace(services, listener=resolved), ssl_context)
            for (_, services, ssl_context), (resolved, _) in zip(
                self._servers_to_open, bound, strict=True
            )
        ]
        self.listeners = [resolved for resolved, _ in bound]
        sockets = [sockets for _, sockets in bound]
        if self.metrics is not None and self.config.metrics_port is not None:
            # First, so that /healthz and /readyz answer (503) during start-up.
            self._metrics_server = MetricsServer(
                self.metrics,
                self.config.metrics_host,
                self.config.metrics_port,
                serving=lambda: self.serving,
                runtime=self.groups,
                login=(
                    ConsoleLogin(self.authorizer, self.credentials, self.password_checks)
                    if self.authorizer is not None
                    else None
                ),
                limits=HttpLimits(
                    max_connections=self.config["metrics.max.connections"],
                    request_timeout=self.config["metrics.request.timeout.ms"] / 1000.0,
                    response_timeout=self.config["metrics.response.timeout.ms"] / 1000.0,
                ),
            )
            try:
                await self._metrics_server.start()
            except OSError as e:
                self._metrics_server = None
                console_unbound(self.config, e, sockets)  # stops start-up, or says why not
        self.topics.load(skip=INTERNAL_TOPICS)
        self.data.start()
        self.retention.start()
        await self.groups.start()
        await self.transactions.start()
        await self.share_state.start()
        self.share.start()
        self._checkpoint_task = asyncio.ensure_future(self._checkpoint_loop())
        reopener = LogReopener(
            self.topics,
            {
                OFFSETS_TOPIC: self.groups.lead,
                TRANSACTION_STATE_TOPIC: self.transactions.lead,
                SHARE_GROUP_STATE_TOPIC: self.share_state.lead,
            },
        )
        self._reopen_task = asyncio.ensure_future(reopener.run())
        loop = asyncio.get_running_loop()
        self._sweeper = asyncio.ensure_future(self._sweep_slow_requests())
        # A TLS handshake gets as long as a request to arrive (a client stopping mid-way).
        handshake_s = self.config["socket.request.receive.timeout.ms"] / 1000.0
        for (_, services, ssl_context), listener_sockets in zip(
            self._servers_to_open, sockets, strict=True
        ):
            for sock in listener_sockets:
                server = await loop.create_server(
                    functools.partial(Connection, services),
                    sock=sock,
                    backlog=1024,
                    ssl=ssl_context,
                    ssl_handshake_timeout=handshake_s if ssl_context is not None else None,
                    start_serving=self.member is None,
                )
                self._servers.append(server)
        self._server = self._servers[0]
        endpoints = tuple((lst.name, lst.advertised_host, lst.advertised_port) for lst in self.listeners)
        self.view.set_own_endpoints(endpoints)  # the bound ports (--port 0)
        if self.member is not None:
            # Bound first (the addresses are known), served once this node has taken and loaded
            # its share: a client sees it serve what Metadata says it leads.
            await self.member.join(
                endpoints,
                self.config["broker.rack"] or None,
                self._previous_incarnation,
                self.console_url(),
            )
            await self.groups.loads_done()
            for server in self._servers:
                await server.start_serving()
            self._member_task = asyncio.ensure_future(self.member.run())
        log.info(
            "kcoord serving on %s%s, data in %s, cluster %s",
            ", ".join(
                f"{lst.name}://{lst.host}:{lst.port} (advertised {lst.advertised_host}:"
                f"{lst.advertised_port})"
                for lst in self.listeners
            ),
            "".join(f", {name} {url}" for name, url in self.http_addresses().items()),
            self.config.data_dir,
            self.cluster_id,
        )

    def http_addresses(self) -> dict[str, str]:
        """The console's and the metrics' URLs, where they are served."""
        if self._metrics_server is None:
            return {}
        base = self._metrics_server.base_url()
        return {"console": f"{base}/", "metrics": f"{base}/metrics"}

    def console_url(self) -> str | None:
        """The console's URL as the other nodes' consoles link to it (cluster mode): at the
        metrics host, or at this node's first advertised host when that is a wildcard."""
        if self._metrics_server is None:
            return None
        host = self._metrics_server.host
        if host in ("", "0.0.0.0", "::"):
            host = self.listeners[0].advertised_host
        return self._metrics_server.base_url(host) + "/"

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        sock = self._server.sockets[0]
        return int(sock.getsockname()[1])

    async def _sweep_slow_requests(self) -> None:
        """Close connections whose request has been arriving for longer than
        ``socket.request.receive.timeout.ms`` (Connection.partial_since)."""
        timeout = self.config["socket.request.receive.timeout.ms"] / 1000.0
        idle = self.config["connections.max.idle.ms"] / 1000.0
        period = min(1.0, timeout / 4, idle / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            cutoff = now - timeout
            for conn in list(self.connections):
                if now - conn.last_active > idle and not conn.closed:
                    self._on_refused("idle")
                    conn.abort(f"no request for {idle * 1000:.0f} ms (connections.max.idle.ms)")
                    continue
                since = conn.partial_since
                if since is not None and since < cutoff:
                    conn.abort(
                        f"request not received within {timeout * 1000:.0f} ms"
                        f" ({conn.decoder.partial} bytes of it arrived;"
                        " socket.request.receive.timeout.ms)"
                    )

    async def _checkpoint_loop(self) -> None:
        """Write the offset checkpoints now and then (the file work in a worker thread)."""
        interval = self.config["log.flush.offset.checkpoint.interval.ms"] / 1000.0
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(self.topics.write_checkpoints, self.topics.checkpoint_snapshot())

    async def stop(self) -> None:
        if self._member_task is not None:
            self._member_task.cancel()
        if self.member is not None:
            await self.member.leave()  # hands every partition over first (controlled shutdown)
        for task in (self._sweeper, self._checkpoint_task, self._reopen_task):
            if task is not None:
                task.cancel()
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        await self.share.stop()
        await self.deleted_offsets.stop()
        await self.groups.stop()
        await self.transactions.stop()
        await self.share_state.stop()
        if self.peers is not None:
            await self.peers.close()
        self.data.stop()
        self.retention.stop()
        for server in self._servers:
            await server.wait_closed()
        self.topics.close()
        self.topics.write_checkpoints(self.topics.checkpoint_snapshot())
        self.engine.close()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        self.password_checks.close()
        if self.member is not None:
            self.identity.release()
        log.info("kcoord stopped")
