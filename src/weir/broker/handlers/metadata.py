"""Metadata (3): brokers, cluster id, controller, and topics with their partitions; creates
requested topics when auto-creation is allowed by the request and the broker. A partition in an
offline log directory has no leader and lists this broker among its offline replicas. Asked
for them (KIP-430), it gives the operations the client may do on each topic and the cluster."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import ResourceType
from weir.broker.authz.checks import (
    authorized_operations,
    cluster_operations,
    metadata_error,
    visible_topics,
)
from weir.broker.cluster_node import ClusterNode
from weir.broker.context import BrokerContext, make
from weir.broker.topics import INTERNAL_TOPICS, TopicError
from weir.cluster.metadata import TopicInfo
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

NO_OPERATIONS = -(2**31)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.METADATA, request.api_version)
    body = request.body
    requested = _requested_names(body, request.api_version)
    allow_create = getattr(body, "allow_auto_topic_creation", True)
    topics = []
    cluster = broker.cluster
    refused = {n: e for n in requested or () if (e := metadata_error(broker, n, allow_create))}
    if cluster is not None:
        names = visible_topics(broker, cluster.cache.topics) if requested is None else requested
        topics = [
            _missing(m, name, refused[name]) if name in refused
            else await _cluster_topic(m, broker, cluster, name, allow_create)
            for name in names
        ]  # fmt: skip
    elif requested is None:
        visible = visible_topics(broker, broker.metadata.topics())
        topics = [_topic(m, broker, broker.metadata.topics()[name]) for name in visible]
    else:
        topics = [
            _missing(m, name, refused[name]) if name in refused
            else await _requested_topic(m, broker, name, allow_create)
            for name in requested
        ]  # fmt: skip
    if getattr(body, "include_topic_authorized_operations", False):
        topics = [_with_operations(broker, topic) for topic in topics]
    nodes = tuple(
        make(m.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in broker.live_brokers()
    )
    return make(
        m.MetadataResponse,
        throttle_time=datetime.timedelta(0),
        brokers=nodes,
        cluster_id=broker.metadata.cluster_id,
        controller_id=broker.controller_id,
        topics=tuple(topics),
        cluster_authorized_operations=cluster_operations(broker)
        if getattr(body, "include_cluster_authorized_operations", False)
        else NO_OPERATIONS,
    )


def _with_operations(broker: BrokerContext, topic: Any) -> Any:
    """The topic with the operations the client may do on it (not for a topic it may not
    Describe, as Kafka answers)."""
    if topic.error_code == ErrorCode.topic_authorization_failed:
        return topic
    operations = authorized_operations(broker, ResourceType.TOPIC, topic.name)
    return dataclasses.replace(topic, topic_authorized_operations=operations)


def _requested_names(body: Any, version: int) -> list[str] | None:
    """Topic names asked for, or None for all topics (v0: an empty list means all)."""
    if body.topics is None or (version == 0 and not body.topics):
        return None
    return [t.name for t in body.topics if t.name is not None]


async def _requested_topic(m: Any, broker: BrokerContext, name: str, allow_create: bool) -> Any:
    info = broker.metadata.topic(name)
    if info is None and allow_create:
        try:
            info = await broker.topics.auto_create(name)
        except TopicError as exc:
            return _missing(m, name, exc.error)
    if info is None:
        return _missing(m, name, ErrorCode.unknown_topic_or_partition)
    return _topic(m, broker, info)


async def _cluster_topic(
    m: Any, broker: BrokerContext, cluster: ClusterNode, name: str, allow_create: bool
) -> Any:
    """A topic as the controller last described it to this broker. One that exists in
    ZooKeeper but has not reached this broker yet (or is created now) has no leader yet."""
    partitions = cluster.cache.topics.get(name)
    if partitions is None:
        if broker.metadata.topic(name) is not None:
            return _missing(m, name, ErrorCode.leader_not_available)
        if not allow_create:
            return _missing(m, name, ErrorCode.unknown_topic_or_partition)
        try:
            created = await broker.topics.auto_create(name)
        except TopicError as exc:
            return _missing(m, name, exc.error)
        error = ErrorCode.unknown_topic_or_partition if created is None else None
        return _missing(m, name, error or ErrorCode.leader_not_available)
    entries = []
    for index, p in sorted(partitions.items()):
        error = ErrorCode.leader_not_available if p.leader < 0 else ErrorCode.none
        entries.append(make(
            m.MetadataResponsePartition, error_code=error, partition_index=index,
            leader_id=p.leader, leader_epoch=p.leader_epoch, replica_nodes=p.replicas,
            isr_nodes=p.isr, offline_replicas=p.offline_replicas,
        ))  # fmt: skip
    return make(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=name,
        topic_id=cluster.cache.topic_ids.get(name, uuid.UUID(int=0)),
        is_internal=name in INTERNAL_TOPICS,
        partitions=tuple(entries),
        topic_authorized_operations=NO_OPERATIONS,
    )


def _missing(m: Any, name: str, error: ErrorCode) -> Any:
    return make(
        m.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=uuid.UUID(int=0),
        is_internal=False,
        partitions=(),
        topic_authorized_operations=NO_OPERATIONS,
    )


def _topic(m: Any, broker: BrokerContext, info: TopicInfo) -> Any:
    node = broker.config.node_id
    partitions = []
    for index in range(info.partitions):
        partition = broker.replicas.get(info.name, index)
        epoch = partition.leader_epoch if partition is not None else 0
        if partition is None and not broker.replicas.is_offline(info.name, index):
            partitions.append(make(  # its log is still being created
                m.MetadataResponsePartition, error_code=ErrorCode.leader_not_available,
                partition_index=index, leader_id=-1, leader_epoch=epoch, replica_nodes=(node,),
                isr_nodes=(), offline_replicas=(),
            ))  # fmt: skip
            continue
        if broker.replicas.is_offline(info.name, index):
            partitions.append(make(
                m.MetadataResponsePartition, error_code=ErrorCode.leader_not_available,
                partition_index=index, leader_id=-1, leader_epoch=epoch, replica_nodes=(node,),
                isr_nodes=(), offline_replicas=(node,),
            ))  # fmt: skip
            continue
        partitions.append(make(
            m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=index,
            leader_id=node, leader_epoch=epoch, replica_nodes=(node,), isr_nodes=(node,),
            offline_replicas=(),
        ))  # fmt: skip
    return make(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=tuple(partitions),
        topic_authorized_operations=NO_OPERATIONS,
    )
