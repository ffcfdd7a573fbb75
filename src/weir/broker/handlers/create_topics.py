"""CreateTopics (19): partitions, configs and validate_only, with a clear error per topic."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.handlers.describe_configs import config_entries
from weir.broker.topics import TopicError
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.CREATE_TOPICS, request.api_version)
    body = request.body
    results = [_create(m, broker, topic, body.validate_only) for topic in body.topics]
    return make(m.CreateTopicsResponse, throttle_time=datetime.timedelta(0), topics=tuple(results))


def _create(m: Any, broker: BrokerContext, topic: Any, validate_only: bool) -> Any:
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    try:
        num_partitions, replication = topic.num_partitions, topic.replication_factor
        if topic.assignments:
            num_partitions, replication = _from_assignments(broker, topic)
        partitions = broker.topics.validate_create(
            topic.name, num_partitions, replication, configs
        )
        topic_id = uuid.UUID(int=0)
        if not validate_only:
            info = broker.topics.create(topic.name, partitions, configs)
            topic_id = info.topic_id
    except TopicError as exc:
        return make(
            m.CreatableTopicResult,
            name=topic.name,
            topic_id=uuid.UUID(int=0),
            error_code=exc.error,
            error_message=exc.message,
            topic_config_error_code=0,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
    entries = None
    if hasattr(m, "CreatableTopicConfigs"):  # v5+ echoes the resulting configs
        entries = tuple(
            make(
                m.CreatableTopicConfigs,
                name=entry.name,
                value=entry.value,
                read_only=False,
                config_source=entry.source,
                is_sensitive=False,
            )
            for entry in config_entries(broker, configs)
        )
    return make(
        m.CreatableTopicResult,
        name=topic.name,
        topic_id=topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        topic_config_error_code=0,
        num_partitions=partitions,
        replication_factor=1,
        configs=entries,
    )


def _from_assignments(broker: BrokerContext, topic: Any) -> tuple[int, int]:
    """(partitions, replication factor) of an explicit assignment, checked as Kafka does."""
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise TopicError(
            ErrorCode.invalid_request,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    by_index = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
    if sorted(by_index) != list(range(len(by_index))):
        raise TopicError(
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        )
    replicas = [by_index[i] for i in range(len(by_index))]
    broker.topics.check_assignment(replicas)
    return len(replicas), len(replicas[0])
