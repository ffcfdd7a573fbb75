"""The per-resource checks of the APIs that name several resources, each as Kafka's KafkaApis
makes it, for their handlers to call in one line. Every check is a cached authorizer lookup
per resource named (never per record) and passes at once without an authorizer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from weir.broker.audit import AUDIT_WRITER_CLIENT_ID
from weir.broker.authz.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bit_field,
)
from weir.broker.context import BrokerContext
from weir.broker.results import FetchRequestPartition, FetchResult
from weir.broker.topics import internal_topic_error
from weir.protocol.audit_records import AUDIT_TOPIC

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
NONE = (ErrorCode.none, "")


def topic_error(broker: BrokerContext, operation: AclOperation, topic: str) -> ErrorCode:
    """TOPIC_AUTHORIZATION_FAILED unless `operation` on the topic is allowed."""
    if broker.authorized(operation, TOPIC, topic):
        return ErrorCode.none
    return ErrorCode.topic_authorization_failed


def group_error(broker: BrokerContext, operation: AclOperation, group_id: str) -> ErrorCode:
    if broker.authorized(operation, GROUP, group_id):
        return ErrorCode.none
    return ErrorCode.group_authorization_failed


def cluster_error(broker: BrokerContext, operation: AclOperation) -> ErrorCode:
    if broker.authorized(operation, CLUSTER, CLUSTER_NAME):
        return ErrorCode.none
    return ErrorCode.cluster_authorization_failed


def transactional_id_error(
    broker: BrokerContext, operation: AclOperation, transactional_id: str
) -> ErrorCode:
    if broker.authorized(operation, TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.none
    return ErrorCode.transactional_id_authorization_failed


def produce_error(
    broker: BrokerContext, topic: str, transactional_id: str | None, client_id: str | None = None
) -> tuple[ErrorCode, str]:
    """Produce: Write on the transactional id (when there is one) and on the topic; never to
    an internal topic, but for a broker's audit writer writing to `__audit` (its client id,
    and ClusterAction on the cluster, what brokers are allowed)."""
    if transactional_id is not None and not broker.authorized(
        AclOperation.WRITE, TRANSACTIONAL_ID, transactional_id
    ):
        return ErrorCode.transactional_id_authorization_failed, "not authorized"
    if topic == AUDIT_TOPIC and client_id == AUDIT_WRITER_CLIENT_ID:
        if broker.authorized(AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            return NONE
        return ErrorCode.topic_authorization_failed, "not authorized"
    if not broker.authorized(AclOperation.WRITE, TOPIC, topic):
        return ErrorCode.topic_authorization_failed, "not authorized"
    refused = internal_topic_error(topic, "clients cannot write to it")
    return (refused.error, refused.message) if refused else NONE


def delete_records_error(broker: BrokerContext, topic: str) -> ErrorCode:
    """DeleteRecords: Delete on the topic; never on an internal topic."""
    if not broker.authorized(AclOperation.DELETE, TOPIC, topic):
        return ErrorCode.topic_authorization_failed
    refused = internal_topic_error(topic, "records cannot be deleted")
    return refused.error if refused else ErrorCode.none


def create_topic_error(broker: BrokerContext, topic: str) -> ErrorCode:
    """CreateTopics and auto-creation: Create on the cluster or on the topic."""
    if broker.authorizer is None or broker.authorized(AclOperation.CREATE, CLUSTER, CLUSTER_NAME):
        return ErrorCode.none
    return topic_error(broker, AclOperation.CREATE, topic)


def split_fetch(
    broker: BrokerContext, wanted: list[FetchRequestPartition], replica_id: int
) -> tuple[list[FetchRequestPartition], list[FetchResult]]:
    """The partitions a Fetch may read, and the refusals of the others: a consumer needs Read
    on each topic, a follower (replica id set) ClusterAction on the cluster; either way a
    refused partition is TOPIC_AUTHORIZATION_FAILED, as Kafka answers."""
    if broker.authorizer is None:
        return wanted, []
    if replica_id >= 0:
        allowed = broker.authorized(AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
        readable = {w.topic for w in wanted} if allowed else set()
    else:
        readable = authorized_names(broker, AclOperation.READ, TOPIC, (w.topic for w in wanted))
    kept = [w for w in wanted if w.topic in readable]
    refused = [
        FetchResult(w.topic, w.partition, ErrorCode.topic_authorization_failed)
        for w in wanted
        if w.topic not in readable
    ]
    return kept, refused


def authorized_names(
    broker: BrokerContext,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The names among `names` whose resources allow `operation`."""
    return {name for name in set(names) if broker.authorized(operation, resource_type, name)}


def visible_topics(broker: BrokerContext, names: Iterable[str]) -> list[str]:
    """Metadata for all topics lists those the client may Describe, by name."""
    if broker.authorizer is None:
        return sorted(names)
    return sorted(authorized_names(broker, AclOperation.DESCRIBE, TOPIC, names))


def metadata_error(broker: BrokerContext, topic: str, allow_create: bool) -> ErrorCode | None:
    """TOPIC_AUTHORIZATION_FAILED for a requested topic the client may not Describe, or may
    not create when Metadata would create it; None when it may be answered."""
    if broker.authorizer is None:
        return None
    if not broker.authorized(AclOperation.DESCRIBE, TOPIC, topic):
        return ErrorCode.topic_authorization_failed
    creates = allow_create and broker.config.auto_create_topics_enable
    if creates and broker.metadata.topic(topic) is None:
        error = create_topic_error(broker, topic)
        return error if error is not ErrorCode.none else None
    return None


def authorized_operations(broker: BrokerContext, resource_type: ResourceType, name: str) -> int:
    """KIP-430: the bit field of the operations the client may do on the resource, among
    those its type supports (all of them without an authorizer)."""
    supported = SUPPORTED_OPERATIONS[resource_type]
    allowed = (op for op in supported if broker.authorized(op, resource_type, name))
    return operations_bit_field(allowed)


def cluster_operations(broker: BrokerContext) -> int:
    """The cluster's authorized operations, as Kafka answers them: none (0) to a client that
    may not Describe the cluster."""
    if not broker.authorized(AclOperation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(broker, CLUSTER, CLUSTER_NAME)


Partitions = Iterable[tuple[str, int]]


def commit_refusals(
    broker: BrokerContext,
    group_id: str,
    partitions: Partitions,
    transactional_id: str | None = None,
) -> dict[tuple[str, int], ErrorCode]:
    """OffsetCommit and TxnOffsetCommit: Write on the transactional id (if any) and Read on
    the group, or every partition is refused; Read on each topic. The refused partitions."""
    partitions = list(partitions)
    if broker.authorizer is None:
        return {}
    if transactional_id is not None and not broker.authorized(
        AclOperation.WRITE, TRANSACTIONAL_ID, transactional_id
    ):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    if not broker.authorized(AclOperation.READ, GROUP, group_id):
        return dict.fromkeys(partitions, ErrorCode.group_authorization_failed)
    readable = authorized_names(broker, AclOperation.READ, TOPIC, (t for t, _ in partitions))
    return {tp: ErrorCode.topic_authorization_failed for tp in partitions if tp[0] not in readable}


def add_partitions_refusals(
    broker: BrokerContext, transactional_id: str, partitions: Partitions
) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn: Write on the transactional id and on every topic; when anything is
    refused, the answer for every partition (the others OPERATION_NOT_ATTEMPTED), else {}."""
    partitions = list(partitions)
    if broker.authorizer is None:
        return {}
    if not broker.authorized(AclOperation.WRITE, TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    writable = authorized_names(broker, AclOperation.WRITE, TOPIC, (t for t, _ in partitions))
    if all(topic in writable for topic, _ in partitions):
        return {}
    return {
        tp: ErrorCode.operation_not_attempted
        if tp[0] in writable
        else ErrorCode.topic_authorization_failed
        for tp in partitions
    }


CONFIG_RESOURCE_TOPIC = 2  # DescribeConfigs/AlterConfigs resource types; the others: a broker


def config_error(broker: BrokerContext, operation: AclOperation, resource: Any) -> ErrorCode:
    """DescribeConfigs/AlterConfigs: the operation on the topic, or on the cluster for a
    broker's configs."""
    if resource.resource_type == CONFIG_RESOURCE_TOPIC:
        return topic_error(broker, operation, resource.resource_name)
    return cluster_error(broker, operation)


def coordinator_error(broker: BrokerContext, key: str, key_type: int) -> ErrorCode:
    """FindCoordinator: Describe on the group (key type 0) or the transactional id (1)."""
    if key_type == 0:
        return group_error(broker, AclOperation.DESCRIBE, key)
    return transactional_id_error(broker, AclOperation.DESCRIBE, key)


def leader_epoch_error(broker: BrokerContext, body: Any, topic: str) -> ErrorCode:
    """OffsetForLeaderEpoch: ClusterAction for a follower (replica id set), else Describe on
    the topic."""
    if getattr(body, "replica_id", -1) >= 0:
        if cluster_error(broker, AclOperation.CLUSTER_ACTION):
            return ErrorCode.topic_authorization_failed
        return ErrorCode.none
    return topic_error(broker, AclOperation.DESCRIBE, topic)


class _Group(Protocol):
    group_id: str


G = TypeVar("G", bound=_Group)


def listable_groups(broker: BrokerContext, groups: Iterable[G]) -> list[G]:
    """ListGroups: every group with Describe on the cluster, else the groups the client may
    Describe; by group id."""
    ordered = sorted(groups, key=lambda g: g.group_id)
    if broker.authorizer is None or not cluster_error(broker, AclOperation.DESCRIBE):
        return ordered
    return [g for g in ordered if not group_error(broker, AclOperation.DESCRIBE, g.group_id)]


def unreadable_partitions(
    broker: BrokerContext, partitions: Partitions
) -> dict[tuple[str, int], ErrorCode]:
    """OffsetDelete: the partitions of topics the client may not Read, refused."""
    partitions = list(partitions)
    readable = authorized_names(broker, AclOperation.READ, TOPIC, (t for t, _ in partitions))
    return {tp: ErrorCode.topic_authorization_failed for tp in partitions if tp[0] not in readable}
