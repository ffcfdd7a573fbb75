"""CreatePartitions (37): grow a topic's partition count, with an explicit assignment of the new
partitions' replicas if the request gives one (it must name live brokers)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import topic_error
from weir.broker.context import BrokerContext, make
from weir.broker.topics import TopicError
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.CREATE_PARTITIONS, request.api_version)
    body = request.body
    results = []
    grown = []
    for topic in body.topics:
        error, message = ErrorCode.none, None
        try:
            if refused := topic_error(broker, AclOperation.ALTER, topic.name):
                raise TopicError(refused, "Authorization failed.")
            assignments = None
            if topic.assignments is not None:
                assignments = [list(a.broker_ids) for a in topic.assignments]
                broker.topics.check_new_partitions(topic.name, topic.count, assignments)
            await broker.topics.grow(topic.name, topic.count, body.validate_only, assignments)
            grown.append((topic.name, topic.count))
        except TopicError as exc:
            error, message = exc.error, exc.message
        results.append(
            make(
                m.CreatePartitionsTopicResult,
                name=topic.name,
                error_code=error,
                error_message=message,
            )
        )
    cluster = broker.cluster
    if cluster is not None and grown and not body.validate_only:
        await cluster.cache.wait_until(
            lambda: all(cluster.cache.has_leaders(name, count) for name, count in grown),
            body.timeout.total_seconds(),
        )
    return make(
        m.CreatePartitionsResponse, throttle_time=datetime.timedelta(0), results=tuple(results)
    )
