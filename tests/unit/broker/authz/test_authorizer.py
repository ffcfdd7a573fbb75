"""The authorizer over its store: bindings validated as CreateAcls needs, filters as
DescribeAcls and DeleteAcls apply them, the file that survives a restart, cached decisions that
follow every change, and the table of whole-request checks answered with Kafka's errors."""

from __future__ import annotations

import contextvars
import json
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from weir.broker.authz.authorizer import Authorizer, from_config
from weir.broker.authz.decision import AclIndex, Policy, authorize
from weir.broker.authz.gate import REQUEST_CHECKS, error_response, refusal
from weir.broker.authz.store import FileAclStore
from weir.broker.config import BrokerConfig
from weir.broker.security.errors import SecurityConfigError
from weir.broker.security.listeners import Listener, SecurityProtocol
from weir.broker.security.session import Session, bind
from weir.protocol.apis import ADVERTISED, CLUSTER_ONLY_VERSIONS, INTER_BROKER_VERSIONS, ApiKey
from weir.protocol.codec import Request, encode_response

OPS, TOPIC = AclOperation, ResourceType.TOPIC
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def binding(
    name: str = "orders",
    operation: AclOperation = OPS.READ,
    principal: str = "User:alice",
    pattern: PatternType = PatternType.LITERAL,
    resource_type: ResourceType = TOPIC,
    permission: AclPermissionType = ALLOW,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry(principal, "*", operation, permission),
    )


def test_invalid_bindings_are_refused_one_by_one_and_the_valid_ones_kept(tmp_path: Path) -> None:
    authorizer = Authorizer(Policy(), FileAclStore(tmp_path))
    outcomes = authorizer.create([
        binding(),
        binding(pattern=PatternType.MATCH),
        binding(resource_type=ResourceType.CLUSTER, name="not-the-cluster", operation=OPS.ALTER),
        binding(resource_type=ResourceType.GROUP, operation=OPS.WRITE),
        binding(principal="alice"),
        binding(resource_type=ResourceType.ANY),
    ])  # fmt: skip
    reasons = [str(o) if o else None for o in outcomes]
    assert reasons[0] is None
    assert "LITERAL or PREFIXED" in str(reasons[1])
    assert "kafka-cluster" in str(reasons[2])
    assert "Write is not valid on resource type Group" in str(reasons[3])
    assert "TYPE:NAME" in str(reasons[4])
    assert reasons[5] is not None
    assert authorizer.bindings == {binding()}


def test_acls_survive_a_restart_in_an_owner_only_file(tmp_path: Path) -> None:
    first = Authorizer(Policy(), FileAclStore(tmp_path))
    first.create([binding(), binding("logs-", OPS.ALL, pattern=PatternType.PREFIXED)])
    path = tmp_path / "acls.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    entry = json.loads(path.read_text())["acls"][0]
    assert set(entry) == {"resourceType", "name", "patternType", "principal", "host",
                          "operation", "permissionType"}  # fmt: skip
    again = Authorizer(Policy(), FileAclStore(tmp_path))
    assert again.bindings == first.bindings
    assert again.authorize("User:alice", "10.0.0.1", OPS.WRITE, TOPIC, "logs-app")


def test_filters_describe_and_delete_as_kafka_matches_them(tmp_path: Path) -> None:
    authorizer = Authorizer(Policy(), FileAclStore(tmp_path))
    literal, wildcard = binding("orders"), binding("*", OPS.WRITE)
    prefixed = binding("ord", OPS.DESCRIBE, pattern=PatternType.PREFIXED)
    other = binding("payments", principal="User:bob")
    authorizer.create([literal, wildcard, prefixed, other])
    match = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert set(authorizer.describe(match)) == {literal, wildcard, prefixed}
    assert set(authorizer.describe(AclBindingFilter(TOPIC, "orders", PatternType.LITERAL))) == {
        literal
    }
    assert set(authorizer.describe(AclBindingFilter(principal="User:bob"))) == {other}
    assert len(authorizer.describe(AclBindingFilter())) == 4
    removed = authorizer.delete([AclBindingFilter(TOPIC, "orders", PatternType.ANY),
                                 AclBindingFilter(operation=OPS.WRITE)])  # fmt: skip
    assert removed == [[literal], [wildcard]]
    assert authorizer.bindings == {prefixed, other}
    assert FileAclStore(tmp_path).load() == {prefixed, other}


actions = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(["orders", "*", "ord"]),
        st.sampled_from([OPS.READ, OPS.WRITE, OPS.ALL]),
        st.sampled_from([ALLOW, DENY]),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(actions)
def test_cached_decisions_follow_every_change(tmp_path_factory: pytest.TempPathFactory,
                                              steps: list) -> None:  # fmt: skip
    authorizer = Authorizer(Policy(), FileAclStore(tmp_path_factory.mktemp("acls")))
    for add, name, operation, permission in steps:
        change = binding(name, operation, pattern=PatternType.PREFIXED if name == "ord"
                         else PatternType.LITERAL, permission=permission)  # fmt: skip
        if add:
            authorizer.create([change])
        else:
            authorizer.delete([AclBindingFilter(TOPIC, name, PatternType.ANY)])
        for op in (OPS.READ, OPS.WRITE, OPS.DESCRIBE):
            expected = authorize(AclIndex(authorizer.bindings), Policy(), "User:alice", "h",
                                 op, TOPIC, "orders")  # fmt: skip
            assert authorizer.authorize("User:alice", "h", op, TOPIC, "orders") == expected


def test_authorizer_class_names() -> None:
    assert from_config(BrokerConfig()) is None
    with pytest.raises(SecurityConfigError, match="not supported"):
        from_config(BrokerConfig(authorizer_class_name="com.example.Mine"))


def test_whole_request_refusals_encode_at_every_version() -> None:
    versions = {**ADVERTISED, **INTER_BROKER_VERSIONS, **CLUSTER_ONLY_VERSIONS}
    for api_key, checks in REQUEST_CHECKS.items():
        low, high = versions[api_key]
        for version in range(low, high + 1):
            request = Request(api_key, version, 7, None, None, None)
            for check in checks:
                if version < check.since_version:
                    continue
                response = error_response(request, check.error)
                assert response.error_code == check.error
                assert encode_response(api_key, version, 7, response)


def test_batched_add_partitions_to_txn_needs_cluster_action(tmp_path: Path) -> None:
    """v4 comes from a partition leader (KIP-890): ClusterAction on the cluster, as Kafka
    checks it; a client's v3 is left to the handler's per-resource checks."""
    authorizer = Authorizer(Policy(), FileAclStore(tmp_path))
    listener = Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092)

    def refused(version: int) -> object:
        bind(Session(listener, "10.0.0.1"))
        request = Request(ApiKey.ADD_PARTITIONS_TO_TXN, version, 7, None, None, None)
        return refusal(authorizer, request)

    response = contextvars.copy_context().run(refused, 4)
    assert response is not None
    assert response.error_code == ErrorCode.cluster_authorization_failed  # type: ignore[attr-defined]
    assert contextvars.copy_context().run(refused, 3) is None
    authorizer.create([binding("kafka-cluster", OPS.CLUSTER_ACTION, "User:ANONYMOUS",
                               resource_type=ResourceType.CLUSTER)])  # fmt: skip
    assert contextvars.copy_context().run(refused, 4) is None
