"""ACL znodes in Kafka's layout: the paths of literal and prefixed patterns, the JSON of a
resource's ACLs, the two forms of change notification, and strict parsing."""

from __future__ import annotations

import json

import pytest

from weir.cluster import acl_znodes
from weir.cluster.acl_znodes import AclEntry, AclResource
from weir.cluster.znodes import ZnodeFormatError

ALICE_READ = AclEntry("User:alice", "Allow", "Read", "*")
BOB_DENY = AclEntry("User:bob", "Deny", "IdempotentWrite", "10.0.0.1")


def test_paths_follow_kafkas_layout() -> None:
    literal = AclResource("Topic", "orders", "LITERAL")
    prefixed = AclResource("TransactionalId", "app-", "PREFIXED")
    assert acl_znodes.resource_path(literal) == "/kafka-acl/Topic/orders"
    assert acl_znodes.resource_path(prefixed) == "/kafka-acl-extended/prefixed/TransactionalId/app-"
    assert acl_znodes.changes_path(literal) == "/kafka-acl-changes"
    assert acl_znodes.changes_path(prefixed) == "/kafka-acl-extended-changes"
    for name in ("a/b", ".", "..", ""):
        with pytest.raises(ValueError, match="znode"):
            acl_znodes.resource_path(AclResource("Group", name, "LITERAL"))


def test_a_resources_acls_are_kafkas_json() -> None:
    data = acl_znodes.encode_acls([BOB_DENY, ALICE_READ])
    assert json.loads(data) == {
        "version": 1,
        "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
             "host": "*"},
            {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite",
             "host": "10.0.0.1"},
        ],
    }  # fmt: skip
    assert acl_znodes.parse_acls("/kafka-acl/Topic/orders", data) == {ALICE_READ, BOB_DENY}
    # as Kafka writes it (another key order, spaces)
    kafka = b'{"version": 1, "acls": [ { "host":"*", "permissionType": "Allow","operation": "Read","principal": "User:alice"}]}'  # noqa: E501
    assert acl_znodes.parse_acls("/kafka-acl/Topic/orders", kafka) == {ALICE_READ}


@pytest.mark.parametrize(
    "data",
    [None, b"", b"[]", b'{"version": 2, "acls": []}', b'{"version": 1}',
     b'{"version": 1, "acls": [{"principal": "User:a", "operation": "Read", "host": "*"}]}'],
)  # fmt: skip
def test_malformed_acls_are_refused(data: bytes | None) -> None:
    with pytest.raises(ZnodeFormatError):
        acl_znodes.parse_acls("/kafka-acl/Topic/orders", data)


def test_change_notifications_name_the_resource() -> None:
    literal = AclResource("TransactionalId", "app:1", "LITERAL")
    assert acl_znodes.encode_change(literal) == b"TRANSACTIONAL_ID:app:1"
    assert acl_znodes.parse_change("/kafka-acl-changes", b"TRANSACTIONAL_ID:app:1") == literal
    assert acl_znodes.parse_change("/kafka-acl-changes", b"Topic:orders") == AclResource(
        "Topic", "orders", "LITERAL"
    )
    prefixed = AclResource("Group", "team-", "PREFIXED")
    data = acl_znodes.encode_change(prefixed)
    assert json.loads(data) == {
        "version": 1, "resourceType": "GROUP", "name": "team-", "patternType": "PREFIXED",
    }  # fmt: skip
    assert acl_znodes.parse_change("/kafka-acl-extended-changes", data) == prefixed
    for bad in (b"orders", b"Queue:orders"):
        with pytest.raises(ZnodeFormatError):
            acl_znodes.parse_change("/kafka-acl-changes", bad)
    with pytest.raises(ZnodeFormatError):
        acl_znodes.parse_change("/kafka-acl-extended-changes", b'{"version": 1, "name": "x"}')


def test_sequence_numbers_of_notifications() -> None:
    assert acl_znodes.change_sequence("acl_changes_0000000042") == 42
    assert acl_znodes.change_sequence("acl_changes_") is None
    assert acl_znodes.change_sequence("config_change_0000000001") is None
