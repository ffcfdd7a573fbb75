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
        if topic.assignments:
            raise TopicError(
                ErrorCode.invalid_request, "manual replica assignment is not supported"
            )
        partitions = broker.topics.validate_create(
            topic.name, topic.num_partitions, topic.replication_factor, configs
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
                name=name,
                value=value,
                read_only=False,
                config_source=source,
                is_sensitive=False,
            )
            for name, value, source in config_entries(broker, configs)
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
