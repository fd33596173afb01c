"""ACLs and the decision made from them: Kafka's authorization model, as plain objects.

An :class:`Acl` says that a principal (``User:alice``, or ``User:*`` for everyone) from a host
(or ``*``) is allowed or denied one operation (or ALL) on the resources a pattern names: one
resource (LITERAL), every resource whose name starts with a prefix (PREFIXED), or every resource
of its type (LITERAL ``*``). :class:`AclAuthorizer` decides as Kafka's StandardAuthorizer does:

* a super user may do anything;
* a matching DENY wins over any ALLOW;
* an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and an ALLOW of ALTER_CONFIGS
  allows DESCRIBE_CONFIGS (DENY ACLs imply nothing);
* with no ACL at all on the resource, ``allow.everyone.if.no.acl.found`` decides (false: deny);
  with ACLs on it but none allowing, the answer is no.

:class:`AclFilter` is what DescribeAcls and DeleteAcls select ACLs with. Nothing here does I/O:
``broker/security/acl/store.py`` keeps the ACLs on disk, ``broker/security/acl/api.py`` serves the three ACL APIs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
"""The one CLUSTER resource's name."""

_IMPLIES_DESCRIBE = frozenset(
    (Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER)
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset((Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS))

SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
        Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}
"""The operations that mean something for each resource type (authorized-operations fields)."""

def operations_bits(rtype: ResourceType) -> int:
    """The bit field of every operation on ``rtype``: what anyone may do without an authorizer."""
    bits = 0
    for op in SUPPORTED_OPERATIONS.get(rtype, ()):
        bits |= 1 << op
    return bits


UNKNOWN_OPERATIONS = -(2**31)
"""An authorized-operations field that was not asked for (Kafka's Integer.MIN_VALUE)."""


@dataclass(frozen=True, slots=True)
class Acl:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def names(self, name: str) -> bool:
        """Whether this ACL's pattern covers the resource called ``name``."""
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def decides(self, principals: tuple[str, str], host: str, op: Operation) -> Permission | None:
        """ALLOW or DENY if this ACL (already known to cover the resource) applies to this
        principal, host and operation; None if it says nothing about them."""
        if self.principal not in principals or self.host not in (WILDCARD, host):
            return None
        mine = self.operation
        if mine != Operation.ALL and mine != op:
            if self.permission != Permission.ALLOW:
                return None  # only ALLOW ACLs imply other operations
            if op == Operation.DESCRIBE:
                implied = mine in _IMPLIES_DESCRIBE
            elif op == Operation.DESCRIBE_CONFIGS:
                implied = mine in _IMPLIES_DESCRIBE_CONFIGS
            else:
                implied = False
            if not implied:
                return None
        return self.permission

    def to_json(self) -> dict[str, object]:
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, d: dict[str, str]) -> Acl:
        return cls(
            ResourceType[d["resource_type"]],
            d["resource_name"],
            PatternType[d["pattern_type"]],
            d["principal"],
            d["host"],
            Operation[d["operation"]],
            Permission[d["permission"]],
        )


def invalid_reason(acl: Acl) -> str | None:
    """Why CreateAcls must refuse this ACL, or None if it may be stored (Kafka's checks)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "the resource type must be a specific type"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "the pattern type must be LITERAL or PREFIXED"
    if acl.operation in (Operation.UNKNOWN, Operation.ANY):
        return "the operation must be a specific operation or ALL"
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        return "the permission must be ALLOW or DENY"
    if not acl.resource_name:
        return "the resource name must not be empty"
    if acl.resource_type == ResourceType.CLUSTER and (
        acl.resource_name != CLUSTER_NAME or acl.pattern_type != PatternType.LITERAL
    ):
        return f"the cluster resource is LITERAL {CLUSTER_NAME!r}"
    if acl.pattern_type == PatternType.PREFIXED and acl.resource_name == WILDCARD:
        return "a PREFIXED pattern cannot be '*'"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return f"the principal {acl.principal!r} is not of the form Type:name"
    if not acl.host:
        return "the host must not be empty (use '*' for any host)"
    if acl.operation != Operation.ALL and acl.operation not in SUPPORTED_OPERATIONS.get(
        acl.resource_type, ()
    ):
        return f"{acl.operation.name} is not an operation on a {acl.resource_type.name}"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: None (or ANY) in a field matches anything."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches(self, acl: Acl) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.operation != Operation.ANY and acl.operation != self.operation:
            return False
        if self.permission != Permission.ANY and acl.permission != self.permission:
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        pattern, name = self.pattern_type, self.resource_name
        if pattern == PatternType.MATCH:
            # Every ACL that would apply to the resource named (a literal name is required).
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)
        if pattern != PatternType.ANY and acl.pattern_type != pattern:
            return False
        return name is None or acl.resource_name == name

    def invalid_reason(self) -> str | None:
        """Why the filter cannot be used (an UNKNOWN field), or None."""
        for field in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if field == 0:
                return f"the filter's {type(field).__name__} is UNKNOWN"
        return None


class AclAuthorizer:
    """Decides whether a principal from a host may perform an operation on a resource.

    Holds the ACLs by resource type; ``denied`` is told of every refusal (metrics)."""

    def __init__(
        self,
        acls: Iterable[Acl] = (),
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
        denied: Callable[[str, str], None] | None = None,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._denied = denied
        self._by_type: dict[ResourceType, list[Acl]] = defaultdict(list)
        self._all: set[Acl] = set()
        self.add(acls)

    def acls(self) -> list[Acl]:
        return sorted(self._all, key=_order)

    def add(self, acls: Iterable[Acl]) -> list[Acl]:
        """Store these ACLs; returns those that were new."""
        new = []
        for acl in acls:
            if acl not in self._all:
                self._all.add(acl)
                self._by_type[acl.resource_type].append(acl)
                new.append(acl)
        return new

    def remove(self, acls: Iterable[Acl]) -> None:
        for acl in acls:
            if acl in self._all:
                self._all.discard(acl)
                self._by_type[acl.resource_type].remove(acl)

    def authorize(
        self,
        principal: str,
        host: str,
        op: Operation,
        rtype: ResourceType,
        name: str,
        quiet: bool = False,
    ) -> bool:
        """Whether it is allowed; a refusal is reported to ``denied`` unless ``quiet``."""
        if self._decide(principal, host, op, rtype, name):
            return True
        if self._denied is not None and not quiet:
            self._denied(principal, rtype.name)
        return False

    def _decide(
        self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        principals = (principal, "User:*")
        found = allowed = False
        for acl in self._by_type.get(rtype, ()):
            if not acl.names(name):
                continue
            found = True
            verdict = acl.decides(principals, host, op)
            if verdict == Permission.DENY:
                return False
            if verdict == Permission.ALLOW:
                allowed = True
        return allowed or (not found and self.allow_if_no_acl)

    def allows_some(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Whether some ACL allows ``op`` on some resource of the type to the principal (the
        check of KIP-679's idempotent producers: WRITE on any topic)."""
        if principal in self.super_users:
            return True
        principals = (principal, "User:*")
        return any(
            acl.permission == Permission.ALLOW
            and acl.operation in (op, Operation.ALL)
            and acl.decides(principals, host, op) == Permission.ALLOW
            for acl in self._by_type.get(rtype, ())
        )

    def authorized_operations(
        self, principal: str, host: str, rtype: ResourceType, name: str
    ) -> int:
        """The bit field (bit n for operation code n) of what the principal may do on it."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self._decide(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits


def _order(acl: Acl) -> tuple[int, str, int, str, str, int, int]:
    return (
        acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
        acl.operation, acl.permission,
    )
