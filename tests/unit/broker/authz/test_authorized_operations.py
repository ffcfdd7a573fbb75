"""KIP-430's authorized operations: the bit field's layout (bit n for the operation whose code
is n) and the operations a principal may do on a topic and on the cluster, decided by the
real authorizer (implied Describe included)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from weir.broker.authz.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_bit_field,
)
from weir.broker.authz.authorizer import Authorizer
from weir.broker.authz.checks import authorized_operations, cluster_operations
from weir.broker.authz.decision import Policy
from weir.broker.authz.store import FileAclStore

OPS = AclOperation
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER


@dataclass
class Client:
    """The one call the checks make of the broker, for one principal's connection."""

    authorizer: Authorizer | None
    principal: str = "User:alice"

    def authorized(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, "127.0.0.1", operation,
                                         resource_type, name)  # fmt: skip


def allow(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", operation, AclPermissionType.ALLOW),
    )


def test_bit_n_is_the_operation_whose_code_is_n() -> None:
    assert operations_bit_field([]) == 0
    assert operations_bit_field([OPS.READ]) == 0b1000
    assert operations_bit_field([OPS.READ, OPS.WRITE, OPS.DESCRIBE]) == 0b1_0001_1000
    assert operations_bit_field([OPS.IDEMPOTENT_WRITE]) == 4096


def test_without_an_authorizer_every_supported_operation_is_allowed() -> None:
    client = Client(None)
    # Read Write Create Delete Alter Describe DescribeConfigs AlterConfigs: bits 3-8, 10, 11
    assert authorized_operations(client, TOPIC, "orders") == 0b1101_1111_1000  # type: ignore[arg-type]
    # Create Alter Describe ClusterAction DescribeConfigs AlterConfigs IdempotentWrite
    assert cluster_operations(client) == 0b1_1111_1010_0000  # type: ignore[arg-type]


def test_a_principal_gets_its_acls_and_what_they_imply(tmp_path: Path) -> None:
    authorizer = Authorizer(Policy(), FileAclStore(tmp_path))
    authorizer.create([allow(TOPIC, "orders", OPS.READ),
                       allow(CLUSTER, CLUSTER_NAME, OPS.IDEMPOTENT_WRITE)])  # fmt: skip
    alice, bob = Client(authorizer), Client(authorizer, "User:bob")
    assert authorized_operations(alice, TOPIC, "orders") == 1 << 3 | 1 << 8  # type: ignore[arg-type]
    assert authorized_operations(alice, TOPIC, "other") == 0  # type: ignore[arg-type]
    assert authorized_operations(bob, TOPIC, "orders") == 0  # type: ignore[arg-type]
    # IdempotentWrite does not imply Describe: a client that may not Describe the cluster
    # is told no operations at all, as Kafka answers
    assert cluster_operations(alice) == 0  # type: ignore[arg-type]
    authorizer.create([allow(CLUSTER, CLUSTER_NAME, OPS.DESCRIBE)])
    assert cluster_operations(alice) == 1 << 8 | 1 << 12  # type: ignore[arg-type]
