"""DeleteTopics (20): remove topics by name (or by id, v6)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import topic_error
from weir.broker.context import BrokerContext, make
from weir.broker.topics import TopicError
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DELETE_TOPICS, request.api_version)
    body = request.body
    names: list[tuple[str | None, uuid.UUID | None]]
    if hasattr(body, "topic_names"):
        names = [(name, None) for name in body.topic_names]
    else:
        names = [(t.name, t.topic_id) for t in body.topics]
    results = [await _delete(m, broker, name, topic_id) for name, topic_id in names]
    cluster = broker.cluster
    if cluster is not None:
        deleted = [r.name for r in results if r.error_code == ErrorCode.none]
        await cluster.cache.wait_until(
            lambda: not any(name in cluster.cache.topics for name in deleted),
            body.timeout.total_seconds(),
        )
    return make(
        m.DeleteTopicsResponse, throttle_time=datetime.timedelta(0), responses=tuple(results)
    )


async def _delete(
    m: Any, broker: BrokerContext, name: str | None, topic_id: uuid.UUID | None
) -> Any:
    if name is None and topic_id is not None:
        name = next(
            (t.name for t in broker.metadata.topics().values() if t.topic_id == topic_id), None
        )
        if name is None:
            return make(
                m.DeletableTopicResult,
                name=None,
                topic_id=topic_id,
                error_code=ErrorCode.unknown_topic_id,
                error_message="unknown topic id",
            )
    assert name is not None
    try:
        if refused := topic_error(broker, AclOperation.DELETE, name):
            raise TopicError(refused, "Authorization failed.")
        info = await broker.topics.delete(name)
    except TopicError as exc:
        return make(
            m.DeletableTopicResult,
            name=name,
            topic_id=uuid.UUID(int=0),
            error_code=exc.error,
            error_message=exc.message,
        )
    return make(
        m.DeletableTopicResult,
        name=name,
        topic_id=info.topic_id,
        error_code=ErrorCode.none,
        error_message=None,
    )
