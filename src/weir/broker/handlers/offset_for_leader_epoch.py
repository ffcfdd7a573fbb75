"""OffsetForLeaderEpoch (23): where a leader epoch ends in this leader's log (KIP-101/279).

A follower asks before it fetches, with the latest epoch in its own log, and truncates to the
answer: records it has past the end of that epoch here were never committed and are cut. Clients
ask it to detect a truncated log after a leader change (KIP-320). The requester's current leader
epoch is checked as for Fetch: older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import leader_epoch_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

UNDEFINED = -1


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version)
    topics = []
    for topic in request.body.topics:
        refused = leader_epoch_error(broker, request.body, topic.topic)
        partitions = tuple(
            _end_offset(m, broker, topic.topic, p, refused) for p in topic.partitions
        )
        topics.append(make(m.OffsetForLeaderTopicResult, topic=topic.topic, partitions=partitions))
    return make(
        m.OffsetForLeaderEpochResponse, throttle_time=datetime.timedelta(0), topics=tuple(topics)
    )


def _end_offset(m: Any, broker: BrokerContext, topic: str, request: Any, refused: ErrorCode) -> Any:
    partition = broker.replicas.get(topic, request.partition)
    current = getattr(request, "current_leader_epoch", -1)
    error = refused or broker.replicas.leader_error(topic, request.partition, current)
    if error is not ErrorCode.none or partition is None:
        return make(m.EpochEndOffset, error_code=error, partition=request.partition,
                    leader_epoch=UNDEFINED, end_offset=UNDEFINED)  # fmt: skip
    log = partition.log
    epoch, end = log.epoch_cache.end_offset_for(request.leader_epoch, log.log_end_offset)
    return make(m.EpochEndOffset, error_code=ErrorCode.none, partition=request.partition,
                leader_epoch=epoch, end_offset=end)  # fmt: skip
