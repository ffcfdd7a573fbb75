"""Kafka's authorization decision: deny wins, implied operations, wildcards, prefixes, hosts,
super users and allow.everyone.if.no.acl.found; and the properties that hold for any ACLs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from weir.broker.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from weir.broker.authz.decision import AclIndex, Policy, authorize, authorize_any, parse_super_users

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
OPS = AclOperation
NOBODY_ELSE = Policy()


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = PatternType.LITERAL,
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry(principal, host, operation, permission),
    )


def allowed(
    bindings: list[AclBinding],
    operation: AclOperation,
    name: str = "orders",
    principal: str = "User:alice",
    host: str = "10.0.0.1",
    policy: Policy = NOBODY_ELSE,
    resource_type: ResourceType = TOPIC,
) -> bool:
    return authorize(AclIndex(bindings), policy, principal, host, operation, resource_type, name)


def test_an_allow_grants_its_operation_and_nothing_else() -> None:
    rules = [acl("orders", OPS.WRITE)]
    assert allowed(rules, OPS.WRITE)
    assert not allowed(rules, OPS.READ)
    assert not allowed(rules, OPS.WRITE, name="payments")
    assert not allowed(rules, OPS.WRITE, principal="User:bob")


def test_describe_and_describe_configs_are_implied() -> None:
    for implying in (OPS.READ, OPS.WRITE, OPS.DELETE, OPS.ALTER):
        assert allowed([acl("orders", implying)], OPS.DESCRIBE)
    assert allowed([acl("orders", OPS.ALTER_CONFIGS)], OPS.DESCRIBE_CONFIGS)
    assert not allowed([acl("orders", OPS.DESCRIBE)], OPS.READ)
    assert not allowed([acl("orders", OPS.CREATE)], OPS.DESCRIBE)


def test_deny_wins_and_a_denied_read_does_not_deny_describe() -> None:
    rules = [acl("orders", OPS.ALL), acl("orders", OPS.READ, DENY)]
    assert not allowed(rules, OPS.READ)
    assert allowed(rules, OPS.WRITE)
    assert allowed([acl("orders", OPS.READ), acl("orders", OPS.READ, DENY)], OPS.DESCRIBE)
    assert allowed([acl("orders", OPS.WRITE), acl("orders", OPS.READ, DENY)], OPS.DESCRIBE)
    assert not allowed([acl("*", OPS.ALL), acl("orders", OPS.ALL, DENY)], OPS.DESCRIBE)


def test_wildcards_prefixes_and_hosts() -> None:
    assert allowed([acl("*", OPS.READ)], OPS.READ, name="anything")
    assert allowed([acl("*", OPS.READ, principal="User:*")], OPS.READ, principal="User:bob")
    prefixed = [acl("logs-", OPS.READ, pattern=PatternType.PREFIXED)]
    assert allowed(prefixed, OPS.READ, name="logs-app")
    assert not allowed(prefixed, OPS.READ, name="log")
    assert not allowed([acl("logs-", OPS.READ)], OPS.READ, name="logs-app")
    on_host = [acl("orders", OPS.READ, host="10.0.0.1")]
    assert allowed(on_host, OPS.READ, host="10.0.0.1")
    assert not allowed(on_host, OPS.READ, host="10.0.0.2")
    denied_prefix = [
        acl("*", OPS.READ),
        acl("secret-", OPS.READ, DENY, pattern=PatternType.PREFIXED),
    ]
    assert not allowed(denied_prefix, OPS.READ, name="secret-plans")
    assert allowed(denied_prefix, OPS.READ, name="public")


def test_super_users_and_resources_without_acls() -> None:
    policy = Policy(parse_super_users(" User:admin ;User:ops;"))
    assert policy.super_users == {"User:admin", "User:ops"}
    assert allowed([acl("orders", OPS.ALL, DENY, principal="User:*")], OPS.READ,
                   principal="User:admin", policy=policy)  # fmt: skip
    assert not allowed([], OPS.READ)
    open_policy = Policy(allow_everyone_if_no_acl_found=True)
    assert allowed([], OPS.READ, policy=open_policy)
    assert allowed([acl("payments", OPS.READ, DENY)], OPS.READ, policy=open_policy)
    assert not allowed([acl("orders", OPS.WRITE, principal="User:bob")], OPS.READ,
                       policy=open_policy)  # fmt: skip


def test_a_resource_type_is_its_own_namespace() -> None:
    assert not allowed([acl("orders", OPS.READ)], OPS.READ, resource_type=GROUP)


def test_write_on_any_topic_for_idempotent_producers() -> None:
    def any_write(bindings: list[AclBinding], principal: str = "User:alice") -> bool:
        return authorize_any(AclIndex(bindings), NOBODY_ELSE, principal, "10.0.0.1",
                             OPS.WRITE, TOPIC)  # fmt: skip

    assert any_write([acl("orders", OPS.WRITE)])
    assert any_write([acl("logs-", OPS.ALL, pattern=PatternType.PREFIXED)])
    assert not any_write([acl("orders", OPS.READ)])
    assert not any_write([acl("orders", OPS.WRITE)], principal="User:bob")
    assert not any_write([acl("orders", OPS.WRITE), acl("*", OPS.WRITE, DENY)])


# ---- properties ---------------------------------------------------------------------------

names = st.sampled_from(["orders", "orders-eu", "logs", "*", "ord"])
operations = st.sampled_from([op for op in AclOperation if op > AclOperation.ANY])
bindings = st.builds(
    acl,
    name=names,
    operation=operations,
    permission=st.sampled_from([ALLOW, DENY]),
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    host=st.sampled_from(["*", "10.0.0.1", "10.0.0.2"]),
    pattern=st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
)
requests = st.tuples(
    operations.filter(lambda op: op is not OPS.ALL),
    st.sampled_from(["orders", "orders-eu", "logs"]),
    st.sampled_from(["User:alice", "User:bob"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
)


@given(st.lists(bindings, max_size=8), requests)
def test_a_matching_deny_always_refuses(rules: list[AclBinding], request: tuple) -> None:
    operation, name, principal, host = request
    deny = acl(name, operation, DENY, principal=principal, host=host)
    assert not allowed([*rules, deny], operation, name, principal, host)


@given(st.lists(bindings, max_size=8), bindings, requests)
def test_an_allow_never_takes_away_and_a_deny_never_grants(
    rules: list[AclBinding], extra: AclBinding, request: tuple
) -> None:
    operation, name, principal, host = request
    before = allowed(rules, operation, name, principal, host)
    after = allowed([*rules, extra], operation, name, principal, host)
    if extra.entry.permission is ALLOW:
        assert after or not before
    else:
        assert before or not after


@given(st.lists(bindings, max_size=8), requests)
def test_a_super_user_may_do_everything(rules: list[AclBinding], request: tuple) -> None:
    operation, name, principal, host = request
    policy = Policy(frozenset({principal}))
    assert allowed(rules, operation, name, principal, host, policy)
