"""CreateTopics (19): partitions, configs and validate_only, with a clear error per topic."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import create_topic_error
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.describe_configs import config_entries
from weir.broker.topics import TopicError
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.CREATE_TOPICS, request.api_version)
    body = request.body
    created: dict[str, int] = {}
    results = [
        await _create(m, broker, topic, body.validate_only, created) for topic in body.topics
    ]
    cluster = broker.cluster
    if cluster is not None and created:
        done = await cluster.cache.wait_until(
            lambda: all(cluster.cache.has_leaders(n, count) for n, count in created.items()),
            body.timeout.total_seconds(),
        )
        if not done:
            late = {n for n, count in created.items() if not cluster.cache.has_leaders(n, count)}
            results = [_timed_out(m, r) if r.name in late else r for r in results]
    return make(m.CreateTopicsResponse, throttle_time=datetime.timedelta(0), topics=tuple(results))


async def _create(
    m: Any, broker: BrokerContext, topic: Any, validate_only: bool, created: dict[str, int]
) -> Any:
    """One topic's result; a topic created is added to `created` with its partition count."""
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    try:
        if refused := create_topic_error(broker, topic.name):
            raise TopicError(refused, "Authorization failed.")
        num_partitions, replication = topic.num_partitions, topic.replication_factor
        replicas = None
        if topic.assignments:
            replicas = _from_assignments(broker, topic)
            num_partitions, replication = len(replicas), len(replicas[0])
        partitions, replication = broker.topics.validate_create(
            topic.name, num_partitions, replication, configs
        )
        topic_id = uuid.UUID(int=0)
        if not validate_only:
            info = await broker.topics.create(
                topic.name, partitions, configs, replication=replication, replicas=replicas
            )
            topic_id = info.topic_id
            created[topic.name] = partitions
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
        replication_factor=replication,
        configs=entries,
    )


def _timed_out(m: Any, result: Any) -> Any:
    """A created topic whose partitions have no leaders on this broker yet: REQUEST_TIMED_OUT,
    as Kafka answers when the controller did not finish within the request's timeout."""
    return make(
        m.CreatableTopicResult,
        name=result.name,
        topic_id=result.topic_id,
        error_code=ErrorCode.request_timed_out,
        error_message="the topic was created; its partitions have no leader yet",
        topic_config_error_code=0,
        num_partitions=getattr(result, "num_partitions", -1),
        replication_factor=getattr(result, "replication_factor", -1),
        configs=None,
    )


def _from_assignments(broker: BrokerContext, topic: Any) -> list[list[int]]:
    """The replica lists of an explicit assignment, checked as Kafka does."""
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
    return replicas
