"""The ACL authorizer's decisions (Kafka's StandardAuthorizer rules), the filters of
DescribeAcls/DeleteAcls, CreateAcls' validation, and the ACL file's round trip."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kcoord.broker.security.acl.model import (
    CLUSTER_NAME,
    Acl,
    AclAuthorizer,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    invalid_reason,
    operations_bits,
)
from kcoord.broker.security.acl.store import (
    AclStore,
    encode_acls,
    load_acls,
    parse_acls,
    with_added,
    without_matching,
)
from kcoord.storage.file_engine import FileEngine

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(rtype: ResourceType, name: str, op: Operation, permission: Permission = ALLOW,
        principal: str = "User:alice", pattern: PatternType = LIT, host: str = "*") -> Acl:
    return Acl(rtype, name, pattern, principal, host, op, permission)


def may(a: AclAuthorizer, op: Operation, rtype: ResourceType, name: str,
        principal: str = "User:alice", host: str = "10.0.0.1") -> bool:
    return a.authorize(principal, host, op, rtype, name)


def test_no_acl_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not may(AclAuthorizer(), Op.READ, T, "t")
    assert may(AclAuthorizer(allow_if_no_acl=True), Op.READ, T, "t")
    # With an ACL on the resource (for someone else), the default no longer applies.
    other = AclAuthorizer([acl(T, "t", Op.READ, principal="User:bob")], allow_if_no_acl=True)
    assert not may(other, Op.READ, T, "t")
    assert may(other, Op.READ, T, "another-topic")


def test_an_allow_matches_its_principal_host_operation_and_resource_only() -> None:
    a = AclAuthorizer([acl(T, "t", Op.READ, host="10.0.0.1")])
    assert may(a, Op.READ, T, "t")
    assert not may(a, Op.WRITE, T, "t")
    assert not may(a, Op.READ, T, "t2")
    assert not may(a, Op.READ, G, "t")
    assert not may(a, Op.READ, T, "t", principal="User:bob")
    assert not may(a, Op.READ, T, "t", host="10.0.0.2")


def test_deny_wins_over_allow_and_all_covers_every_operation() -> None:
    a = AclAuthorizer([
        acl(G, "team-", Op.ALL, pattern=PRE),
        acl(G, "team-secret", Op.READ, DENY),
    ])
    assert may(a, Op.READ, G, "team-a")
    assert may(a, Op.DELETE, G, "team-a")
    assert not may(a, Op.READ, G, "team-secret")
    assert may(a, Op.DELETE, G, "team-secret")  # the DENY is of READ only
    assert not may(a, Op.READ, G, "other")
    everyone_denied = AclAuthorizer([acl(T, "t", Op.ALL), acl(T, "*", Op.ALL, DENY, "User:*")])
    assert not may(everyone_denied, Op.READ, T, "t")


def test_read_write_delete_alter_imply_describe_but_a_deny_implies_nothing() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert may(AclAuthorizer([acl(T, "t", op)]), Op.DESCRIBE, T, "t"), op
    assert not may(AclAuthorizer([acl(T, "t", Op.CREATE)]), Op.DESCRIBE, T, "t")
    assert may(AclAuthorizer([acl(T, "t", Op.ALTER_CONFIGS)]), Op.DESCRIBE_CONFIGS, T, "t")
    denied_read = AclAuthorizer([acl(T, "t", Op.DESCRIBE), acl(T, "t", Op.READ, DENY)])
    assert may(denied_read, Op.DESCRIBE, T, "t")
    assert not may(denied_read, Op.READ, T, "t")


def test_wildcards_prefixes_and_super_users() -> None:
    a = AclAuthorizer(
        [acl(T, "*", Op.READ, principal="User:*"), acl(T, "logs-", Op.WRITE, pattern=PRE)],
        super_users=["User:admin"],
    )
    assert may(a, Op.READ, T, "anything", principal="User:carol")
    assert may(a, Op.WRITE, T, "logs-app")
    assert not may(a, Op.WRITE, T, "log")
    assert not may(a, Op.WRITE, T, "metrics")
    assert may(a, Op.DELETE, C, CLUSTER_NAME, principal="User:admin")
    # A literal ACL named like a prefix of the resource does not match it.
    assert not may(AclAuthorizer([acl(T, "logs", Op.READ)]), Op.READ, T, "logs-app")


def test_refusals_are_reported_unless_quiet() -> None:
    seen: list[tuple[str, str]] = []
    a = AclAuthorizer([acl(T, "t", Op.READ)], denied=lambda p, r: seen.append((p, r)))
    assert a.authorize("User:bob", "h", Op.READ, T, "t") is False
    assert a.authorize("User:bob", "h", Op.DESCRIBE, G, "g", quiet=True) is False
    assert seen == [("User:bob", "TOPIC")]


def test_authorized_operations_bits() -> None:
    a = AclAuthorizer([acl(G, "g", Op.READ)])
    bits = a.authorized_operations("User:alice", "h", G, "g")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    # Kafka 4's group operations: the configs ones came with group configs (GROUP resource).
    group_ops = (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
    assert operations_bits(G) == sum(1 << op for op in group_ops)
    assert AclAuthorizer(super_users=["User:alice"]).authorized_operations(
        "User:alice", "h", G, "g"
    ) == operations_bits(G)


def test_some_write_allows_an_idempotent_producer() -> None:
    a = AclAuthorizer([acl(T, "out-", Op.WRITE, pattern=PRE), acl(T, "x", Op.READ, principal="User:bob")])
    assert a.allows_some("User:alice", "h", Op.WRITE, T)
    assert not a.allows_some("User:bob", "h", Op.WRITE, T)


def _f(rtype: ResourceType = ResourceType.ANY, name: str | None = None,
       pattern: PatternType = PatternType.ANY, principal: str | None = None,
       op: Operation = Op.ANY, permission: Permission = Permission.ANY) -> AclFilter:
    return AclFilter(rtype, name, pattern, principal, None, op, permission)


def test_filters_select_as_kafka_does() -> None:
    lit = acl(T, "orders", Op.READ)
    star = acl(T, "*", Op.READ)
    pre = acl(T, "ord", Op.WRITE, pattern=PRE)
    other = acl(G, "orders", Op.READ, principal="User:bob")
    every = [lit, star, pre, other]
    assert [a for a in every if _f().matches(a)] == every
    assert [a for a in every if _f(T, "orders").matches(a)] == [lit]
    assert [a for a in every if _f(T, "orders", PatternType.MATCH).matches(a)] == [lit, star, pre]
    assert [a for a in every if _f(pattern=PRE).matches(a)] == [pre]
    assert [a for a in every if _f(principal="User:bob").matches(a)] == [other]
    assert [a for a in every if _f(op=Op.WRITE).matches(a)] == [pre]
    assert _f(ResourceType.UNKNOWN).invalid_reason() is not None
    assert _f().invalid_reason() is None


@pytest.mark.parametrize(
    "bad",
    [
        acl(ResourceType.ANY, "t", Op.READ),
        acl(T, "t", Op.ANY),
        acl(T, "t", Op.READ, Permission.ANY),
        acl(T, "t", Op.READ, pattern=PatternType.MATCH),
        acl(T, "", Op.READ),
        acl(C, "other", Op.ALTER),
        acl(T, "t", Op.READ, principal="alice"),
        acl(G, "g", Op.WRITE),
        acl(T, "*", Op.READ, pattern=PRE),
    ],
)
def test_createacls_refuses_what_kafka_refuses(bad: Acl) -> None:
    assert invalid_reason(bad) is not None


def exactly(a: Acl) -> AclFilter:
    return AclFilter(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                     a.operation, a.permission)


def test_the_acl_file_round_trips_and_failed_writes_change_nothing(tmp_path: Path) -> None:
    authorizer = AclAuthorizer()
    store = AclStore(FileEngine(tmp_path), authorizer)
    first, second = acl(T, "t", Op.READ), acl(C, CLUSTER_NAME, Op.ALTER, DENY, "User:bob", host="1.2.3.4")

    async def scenario() -> None:
        await store.add([first, second, first])
        assert sorted(load_acls(FileEngine(tmp_path)), key=str) == sorted([first, second], key=str)
        assert await store.remove([exactly(first), None]) == [[first], []]
        assert load_acls(FileEngine(tmp_path)) == [second]
        assert authorizer.acls() == [second]
        # The file cannot be replaced (a directory took its name): nothing changes.
        (tmp_path / "acls.json").unlink()
        (tmp_path / "acls.json").mkdir()
        (tmp_path / "acls.json" / "x").write_text("")
        with pytest.raises(OSError):
            await store.add([first])
        assert authorizer.acls() == [second]
        with pytest.raises(OSError):
            await store.remove([exactly(second)])
        assert authorizer.acls() == [second]

    asyncio.run(scenario())


def test_acl_changes_are_made_on_the_stored_document() -> None:
    """What a node adds or deletes is applied to the document as stored (which may hold
    another node's change), never to what the node last knew."""
    mine, theirs, also = acl(T, "t", Op.READ), acl(G, "g", Op.READ), acl(T, "u", Op.WRITE)
    stored = encode_acls([theirs])
    added = with_added(stored, [mine, mine])
    assert added is not None and parse_acls(added) == [theirs, mine]
    assert with_added(added, [theirs]) is None  # nothing new: nothing to write
    assert parse_acls(with_added(None, [also])) == [also]
    # A filter matches what is stored, another node's ACLs included.
    any_topic = AclFilter(T, None, PatternType.ANY, None, None, Op.ANY, Permission.ANY)
    both = encode_acls([theirs, mine, also])
    left, matched = without_matching(both, [any_topic, None, exactly(also)])
    assert parse_acls(left) == [theirs]
    assert matched == [[mine, also], [], [also]]
    assert without_matching(stored, [exactly(mine)]) == (None, [[]])
