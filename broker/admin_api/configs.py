"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs: topic configs (and the broker's
settings, read-only) as Kafka's admin clients see them.

Topics (resource type 2): every topic config Kafka has (``broker/data/topic_config_defs.py``) with
its value and source (the topic's own override, else the broker's setting or its default) and,
when asked, its synonyms and documentation. IncrementalAlterConfigs SETs, DELETEs (back to the
broker's default), APPENDs to or SUBTRACTs from (``cleanup.policy``, a list) a topic's
overrides; AlterConfigs replaces them all. A change is written to ``topic-configs.json`` before
it is answered and applies at once (``segment.bytes`` to the next roll, the retention configs
at the next retention pass, ``broker/data/retention.py``, the Produce ones to the next batch).
Unknown names and values Kafka would refuse are INVALID_CONFIG with Kafka's wording.

Groups (resource type 32, Kafka's GROUP config resource, ``broker/groups/group_configs.py``): every
group config with the group's value (GROUP_CONFIG) or the broker's (DEFAULT_CONFIG), for any
group id but the empty one, whether or not the group exists, as in Kafka. IncrementalAlterConfigs
SETs and DELETEs them (APPEND and SUBTRACT are refused with INVALID_CONFIG: none is a list);
AlterConfigs replaces a group's whole set. The group's configs as they would be after the change
are checked together (INVALID_CONFIG), written to ``group-configs.json`` before the answer, and
apply at the members' next heartbeat. DESCRIBE_CONFIGS / ALTER_CONFIGS on the group are needed
(GROUP_AUTHORIZATION_FAILED).

The broker (resource type 4, named by its node id) describes its settings (those backing topic
configs under Kafka's names and types: ``log.retention.ms``, ``compression.type``,
``min.insync.replicas``, ``log.message.timestamp.type``, ...), all read-only: they
are set at start (``kcoord serve --set``), so altering them is refused with INVALID_REQUEST, as
Kafka refuses a setting that cannot change dynamically. A secret setting (``Setting.sensitive``,
e.g. ``ssl.key.password``) is answered as Kafka answers its password-type configs: a null value,
in its synonyms too, marked sensitive, whoever asks. Other resource types get
INVALID_REQUEST, and so does a resource named again in the same request. Errors are per
resource, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode

from ..data.topic_config_defs import (
    BROKER_TYPES,
    DEFS,
    TYPE_LIST,
    TYPE_LONG,
    ConfigProblem,
    check_overrides,
)
from ..data.topic_names import INTERNAL_CLEANUP_POLICY, quoted, topic_name_problem
from ..groups.group_configs import GroupConfigProblem, GroupConfigs
from ..security.acl.model import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from ..config import Config
    from ..data.topics import Topic, TopicStore
    from ..net.connection import RequestContext

log = logging.getLogger("kcoord.topics")

TOPIC = 2
BROKER = 4
GROUP = 32

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_BOOLEAN, _STRING, _INT, _PASSWORD = 1, 2, 3, 9
_SOURCE_STATIC_BROKER, _SOURCE_DEFAULT = 4, 5


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _authorize(ctx: RequestContext, r: Any, op: Operation) -> None:
    """The ACL check of a config resource: ``op`` on the topic, or on the cluster for a broker."""
    if r.resource_type == TOPIC and not ctx.allowed(op, ResourceType.TOPIC, r.resource_name):
        raise _Refused(ErrorCode.topic_authorization_failed, f"{op.name} on the topic is needed")
    if r.resource_type == BROKER and not ctx.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME):
        raise _Refused(ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster is needed")
    if r.resource_type == GROUP and not ctx.allowed(op, ResourceType.GROUP, r.resource_name):
        raise _Refused(ErrorCode.group_authorization_failed, f"{op.name} on the group is needed")


class ConfigApi:
    def __init__(self, config: Config, topics: TopicStore, groups: GroupConfigs) -> None:
        self.config = config
        self.topics = topics
        self.groups = groups

    # DescribeConfigs ------------------------------------------------------------------------------
    def describe_configs(self, ctx: RequestContext, req: Any) -> Any:
        synonyms = bool(getattr(req, "include_synonyms", False))
        docs = bool(getattr(req, "include_documentation", False))
        results = []
        seen: set[tuple[int, str]] = set()
        for r in req.resources:
            result: dict[str, Any] = dict(
                error_code=0,
                error_message=None,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=[],
            )
            try:
                _once(seen, r)
                _authorize(ctx, r, Operation.DESCRIBE_CONFIGS)
                keys = None if r.configuration_keys is None else set(r.configuration_keys)
                entries = self._describe(r.resource_type, r.resource_name)
                result["configs"] = [
                    _entry(e, synonyms, docs) for e in entries if keys is None or e[0] in keys
                ]
            except _Refused as e:
                result.update(error_code=e.code, error_message=str(e))
            results.append(result)
        return ctx.respond(throttle_time=0, results=results)

    def _describe(self, resource_type: int, name: str) -> list[tuple[Any, ...]]:
        """(name, value, read only, source, type, documentation, synonyms, sensitive) of each
        config."""
        if resource_type == TOPIC:
            topic = self._topic(name)
            return [
                (v.name, v.value, False, v.source, v.type, v.doc, v.synonyms, False)
                for v in self.topics.configs.describe(topic.topic_id, topic.name)
            ]
        if resource_type == GROUP:
            _check_group_name(name)
            return [
                (v.name, v.value, False, v.source, v.type, v.doc, v.synonyms, False)
                for v in self.groups.describe(name)
            ]
        if resource_type == BROKER:
            if name == "":
                return []  # the cluster-wide dynamic defaults: kcoord has none
            self._check_broker(name)
            return [self._broker_entry(row) for row in self.config.describe()]
        raise _Refused(ErrorCode.invalid_request, f"resource type {resource_type} is not supported")

    def _broker_entry(self, row: dict[str, Any]) -> tuple[Any, ...]:
        value = row["value"]
        source = _SOURCE_DEFAULT if row["source"] == "default" else _SOURCE_STATIC_BROKER
        name = row["name"]
        if row["sensitive"]:  # Config.describe() already left the value out
            syn = ((name, None, source),)
            return (name, None, True, source, _PASSWORD, row["doc"], syn, True)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if name in BROKER_TYPES:  # a topic config's default: the topic config's type
            kind = BROKER_TYPES[name]
        elif isinstance(value, bool):
            kind = _BOOLEAN
        elif isinstance(value, int):
            kind = TYPE_LONG if name.endswith((".ms", ".bytes")) else _INT
        else:
            kind = TYPE_LIST if name == "log.cleanup.policy" else _STRING
        return (name, text, True, source, kind, row["doc"], ((name, text, source),), False)

    def _check_broker(self, name: str) -> None:
        if name != str(self.config["node.id"]):
            raise _Refused(
                ErrorCode.invalid_request,
                f"unexpected broker id {name[:40]!r}: this is node {self.config['node.id']}",
            )

    def _topic(self, name: str) -> Topic:
        problem = topic_name_problem(name)
        if problem:
            raise _Refused(ErrorCode.invalid_topic_exception, problem)
        topic = self.topics.get(name)
        if topic is None:
            raise _Refused(ErrorCode.unknown_topic_or_partition, f"topic {quoted(name)} does not exist")
        return topic

    # IncrementalAlterConfigs, AlterConfigs --------------------------------------------------------
    async def incremental_alter_configs(self, ctx: RequestContext, req: Any) -> Any:
        return await self._alter(ctx, req, incremental=True)

    async def alter_configs(self, ctx: RequestContext, req: Any) -> Any:
        return await self._alter(ctx, req, incremental=False)

    async def _alter(self, ctx: RequestContext, req: Any, *, incremental: bool) -> Any:
        responses = []
        seen: set[tuple[int, str]] = set()
        for r in req.resources:
            entry: dict[str, Any] = dict(
                error_code=0,
                error_message=None,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            try:
                _once(seen, r)
                if r.resource_type == GROUP:
                    _group_request_checks(r.configs, incremental)
                _authorize(ctx, r, Operation.ALTER_CONFIGS)
                if r.resource_type == GROUP:
                    await self._alter_group(r, incremental, req.validate_only)
                    responses.append(entry)
                    continue
                if r.resource_type == BROKER:
                    if r.resource_name != "":
                        self._check_broker(r.resource_name)
                    raise _Refused(
                        ErrorCode.invalid_request,
                        "kcoord's broker settings are static: set them at start"
                        " (kcoord serve --set NAME=VALUE)",
                    )
                if r.resource_type != TOPIC:
                    raise _Refused(
                        ErrorCode.invalid_request,
                        f"resource type {r.resource_type} is not supported",
                    )
                topic = self._topic(r.resource_name)
                change = self._topic_change(topic, r.configs, incremental)
                if req.validate_only:
                    change(self.topics.configs.overrides(topic.topic_id, topic.name))
                else:
                    await self._apply(topic, change)
            except _Refused as e:
                entry.update(error_code=e.code, error_message=str(e))
            responses.append(entry)
        return ctx.respond(throttle_time=0, responses=responses)

    def _topic_change(
        self, topic: Topic, configs: Sequence[Any], incremental: bool
    ) -> Callable[[dict[str, str]], dict[str, str]]:
        """The request's change of a topic's overrides, as a function of the overrides as they
        stand (so that it is made on the stored ones: ``TopicConfigs.alter``)."""

        def change(current: dict[str, str]) -> dict[str, str]:
            if incremental:
                wanted = self._incremental(topic, current, configs)
            else:
                wanted = _checked((c.name, c.value) for c in configs)
            policy = INTERNAL_CLEANUP_POLICY.get(topic.name)
            if policy is not None and wanted.setdefault("cleanup.policy", policy) != policy:
                raise _Refused(
                    ErrorCode.invalid_config,
                    f"cleanup.policy of {topic.name} must stay {policy} (its coordinator"
                    " reads it back)",
                )
            return wanted

        return change

    def _incremental(
        self, topic: Topic, current: dict[str, str], changes: Iterable[Any]
    ) -> dict[str, str]:
        wanted = dict(current)
        seen: set[str] = set()
        described = self.topics.configs.describe(topic.topic_id, topic.name, own=current)
        effective = {v.name: v.value for v in described}
        for c in changes:
            if c.name in seen:
                raise _Refused(ErrorCode.invalid_request, f"config {c.name[:80]!r} appears twice")
            seen.add(c.name)
            d = DEFS.get(c.name)
            if d is None:
                _checked([(c.name, c.value)])  # Kafka's "Unknown topic config name"
                continue
            op = c.config_operation
            if op == SET:
                wanted[c.name] = _checked([(c.name, c.value)])[c.name]
            elif op == DELETE:
                wanted.pop(c.name, None)
            elif op in (APPEND, SUBTRACT):
                if d.type != TYPE_LIST:
                    raise _Refused(
                        ErrorCode.invalid_config,
                        f"Config value {'append' if op == APPEND else 'subtract'} is not allowed"
                        f" for config key: {c.name}",
                    )
                items = [p for p in effective[c.name].split(",") if p]
                given = [p.strip() for p in (c.value or "").split(",") if p.strip()]
                if op == APPEND:
                    items += [p for p in given if p not in items]
                else:
                    items = [p for p in items if p not in given]
                wanted[c.name] = _checked([(c.name, ",".join(items))])[c.name]
            else:
                raise _Refused(ErrorCode.invalid_request, f"unknown config operation {op}")
        return _checked(wanted.items())  # the configs together (compaction lags)

    async def _alter_group(self, r: Any, incremental: bool, validate_only: bool) -> None:
        """IncrementalAlterConfigs or AlterConfigs of one group (module docstring)."""
        group_id = r.resource_name
        _check_group_name(group_id)

        def change(current: dict[str, str]) -> dict[str, str]:
            wanted: dict[str, str | None] = dict(current) if incremental else {}
            for c in r.configs:
                op = c.config_operation if incremental else SET
                if op == SET:
                    wanted[c.name] = c.value
                elif op == DELETE:
                    wanted.pop(c.name, None)
                else:  # APPEND, SUBTRACT (others were refused by _group_request_checks)
                    verb = "append to" if op == APPEND else "subtract from"
                    raise _Refused(
                        ErrorCode.invalid_config,
                        f"cannot {verb} group config {c.name[:80]!r}: it is not a list",
                    )
            try:
                return self.groups.check(wanted)
            except GroupConfigProblem as e:
                raise _Refused(ErrorCode.invalid_config, str(e)) from None

        if validate_only:
            change(self.groups.stored(group_id))
            return
        try:
            # made on the group's configs as stored (another node may have changed them)
            checked = await asyncio.to_thread(self.groups.alter, group_id, change)
        except OSError as e:
            raise _Refused(
                ErrorCode.kafka_storage_error, f"the change could not be stored: {e}"
            ) from e
        log.info("group %r configs now %s", group_id, checked or "the broker's settings")

    async def _apply(
        self, topic: Topic, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        configs = self.topics.configs
        try:
            wanted = await asyncio.to_thread(configs.alter, topic.topic_id, topic.name, change)
        except OSError as e:
            raise _Refused(ErrorCode.kafka_storage_error, f"the change could not be stored: {e}") from e
        configs.changed()
        settings = self.topics.settings_of(topic)
        for plog in topic.partitions:
            plog.set_segment_bytes(settings.segment_bytes)
        log.info("topic %s configs now %s", topic.name, wanted or "the broker's defaults")


def _once(seen: set[tuple[int, str]], resource: Any) -> None:
    """A resource named twice in one request: INVALID_REQUEST for the repeats (as Kafka's
    AlterConfigs; for DescribeConfigs it also bounds the answer to one copy per resource)."""
    key = (resource.resource_type, resource.resource_name)
    if key in seen:
        raise _Refused(ErrorCode.invalid_request, "the resource appears more than once")
    seen.add(key)


def _check_group_name(name: str) -> None:
    if name == "":
        raise _Refused(ErrorCode.invalid_request, "a group's configs need its id: none was given")


def _group_request_checks(configs: Iterable[Any], incremental: bool) -> None:
    """What Kafka refuses in a change of a group's configs before looking at the values:
    a name given twice, a null value to set, an unknown operation (INVALID_REQUEST)."""
    names: set[str] = set()
    for c in configs:
        if c.name in names:
            raise _Refused(ErrorCode.invalid_request, f"config {c.name[:80]!r} appears twice")
        names.add(c.name)
        op = c.config_operation if incremental else SET
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise _Refused(ErrorCode.invalid_request, f"unknown config operation {op}")
        if op != DELETE and c.value is None:
            raise _Refused(ErrorCode.invalid_request, f"config {c.name[:80]!r}: a null value")


def _checked(configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    try:
        return check_overrides(configs)
    except ConfigProblem as e:
        raise _Refused(ErrorCode.invalid_config, str(e)) from None


def _entry(e: tuple[Any, ...], synonyms: bool, docs: bool) -> dict[str, Any]:
    name, value, read_only, source, kind, doc, syn, sensitive = e
    return dict(
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == _SOURCE_DEFAULT,
        config_source=source,
        is_sensitive=sensitive,
        synonyms=[dict(name=n, value=v, source=s) for n, v, s in syn] if synonyms else [],
        config_type=kind,
        documentation=doc if docs else None,
    )
