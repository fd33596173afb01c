"""The ACL APIs: DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1-v3.

Answered as Kafka answers them: SECURITY_DISABLED when no authorizer is configured
(``authorizer.class.name``), CLUSTER_AUTHORIZATION_FAILED without DESCRIBE (DescribeAcls) or
ALTER (CreateAcls, DeleteAcls) on the cluster, INVALID_REQUEST for an ACL or filter that cannot
be used, KAFKA_STORAGE_ERROR when the ACL file cannot be written (nothing changed then).
Changes are durable before the answer and apply to the next request.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from kcoord.protocol.errors import ErrorCode
from kcoord.storage.files import describe_error

from ...net.connection import RequestContext
from .model import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    invalid_reason,
)
from .store import AclStore

log = logging.getLogger("kcoord.acl")

_DISABLED = "No authorizer is configured (authorizer.class.name)."


def _enum(kind: Any, value: int) -> Any:
    """The enum member for a wire value; UNKNOWN (0) for a value Kafka does not define."""
    try:
        return kind(value)
    except ValueError:
        return kind(0)


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter),
        f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        _enum(Operation, f.operation),
        _enum(Permission, f.permission_type),
    )


class AclApi:
    def __init__(self, store: AclStore | None) -> None:
        self.store = store

    def _refused(self, ctx: RequestContext, op: Operation) -> tuple[int, str] | None:
        if self.store is None:
            return ErrorCode.security_disabled, _DISABLED
        if not ctx.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster is needed."
        return None

    def describe_acls(self, ctx: RequestContext, req: Any) -> Any:
        refused = self._refused(ctx, Operation.DESCRIBE)
        acl_filter = _filter(req)
        reason = acl_filter.invalid_reason()
        if refused is None and reason is not None:
            refused = ErrorCode.invalid_request, reason
        if refused is not None or self.store is None:
            code, message = refused or (ErrorCode.security_disabled, _DISABLED)
            return ctx.respond(
                throttle_time=0, error_code=code, error_message=message, resources=[]
            )
        by_resource: dict[tuple[int, str, int], list[Acl]] = defaultdict(list)
        for acl in self.store.authorizer.acls():
            if acl_filter.matches(acl):
                by_resource[(acl.resource_type, acl.resource_name, acl.pattern_type)].append(acl)
        return ctx.respond(
            throttle_time=0,
            error_code=0,
            error_message=None,
            resources=[
                dict(
                    resource_type=rtype,
                    resource_name=name,
                    pattern_type=pattern,
                    acls=[
                        dict(principal=a.principal, host=a.host, operation=a.operation,
                             permission_type=a.permission)
                        for a in acls
                    ],
                )
                for (rtype, name, pattern), acls in by_resource.items()
            ],
        )

    async def create_acls(self, ctx: RequestContext, req: Any) -> Any:
        refused = self._refused(ctx, Operation.ALTER)
        results: list[tuple[int, str | None]] = []
        valid: list[Acl] = []
        for c in req.creations:
            if refused is not None:
                results.append(refused)
                continue
            acl = Acl(
                _enum(ResourceType, c.resource_type),
                c.resource_name,
                _enum(PatternType, c.resource_pattern_type),
                c.principal,
                c.host,
                _enum(Operation, c.operation),
                _enum(Permission, c.permission_type),
            )
            reason = invalid_reason(acl)
            if reason is None:
                valid.append(acl)
                results.append((0, None))
            else:
                results.append((ErrorCode.invalid_request, reason))
        if valid:
            assert self.store is not None
            try:
                await self.store.add(valid)
            except OSError as e:
                log.error("could not store ACLs: %s", describe_error(e))
                failed = (ErrorCode.kafka_storage_error, "The ACLs could not be stored.")
                results = [failed if r[0] == 0 else r for r in results]
        return ctx.respond(
            throttle_time=0,
            results=[dict(error_code=code, error_message=message) for code, message in results],
        )

    async def delete_acls(self, ctx: RequestContext, req: Any) -> Any:
        refused = self._refused(ctx, Operation.ALTER)
        filters: list[AclFilter | None] = []
        errors: list[tuple[int, str | None]] = []
        for f in req.filters:
            acl_filter = _filter(f)
            reason = acl_filter.invalid_reason()
            if refused is not None or reason is not None:
                errors.append(refused or (ErrorCode.invalid_request, reason))
                filters.append(None)
            else:
                errors.append((0, None))
                filters.append(acl_filter)
        matched: list[list[Acl]] = [[] for _ in filters]
        if self.store is not None:
            try:
                # matched against the stored document, which may hold other nodes' new ACLs
                matched = await self.store.remove(filters)
            except OSError as e:
                log.error("could not store ACLs: %s", describe_error(e))
                failed = (ErrorCode.kafka_storage_error, "The ACLs could not be stored.")
                errors = [failed if code == 0 else (code, m) for code, m in errors]
        return ctx.respond(
            throttle_time=0,
            filter_results=[
                dict(
                    error_code=code,
                    error_message=message,
                    matching_acls=[
                        dict(
                            error_code=0, error_message=None, resource_type=a.resource_type,
                            resource_name=a.resource_name, pattern_type=a.pattern_type,
                            principal=a.principal, host=a.host, operation=a.operation,
                            permission_type=a.permission,
                        )
                        for a in acls
                    ],
                )
                for (code, message), acls in zip(errors, matched, strict=True)
            ],
        )
