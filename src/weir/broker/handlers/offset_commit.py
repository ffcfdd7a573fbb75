"""OffsetCommit (8): store committed offsets in `__consumer_offsets`. TxnOffsetCommit shares
its decoding, checks and answer (`commit`)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import commit_refusals
from weir.broker.context import BrokerContext, make
from weir.broker.group.group import CommittedOffset
from weir.broker.handlers.per_partition import partition_errors
from weir.protocol.codec import Request, response_module

TopicPartition = tuple[str, int]
#: stores the offsets that passed the checks; the error of each partition
Store = Callable[[dict[TopicPartition, CommittedOffset]], dict[TopicPartition, ErrorCode]]


async def handle(broker: BrokerContext, request: Request) -> Any:
    body = request.body
    generation = getattr(body, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = body.generation_id

    def store(offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, ErrorCode]:
        return broker.groups.commit_offsets(
            body.group_id, generation, body.member_id, getattr(body, "group_instance_id", None),
            offsets, broker.replicas.get,
        )  # fmt: skip

    return commit(broker, request, "OffsetCommit", store)


def commit(
    broker: BrokerContext,
    request: Request,
    prefix: str,
    store: Store,
    transactional_id: str | None = None,
) -> Any:
    """Decode the offsets of an OffsetCommit or TxnOffsetCommit (`prefix`: its messages'
    name), refuse those the client may not commit, have `store` store the others, and answer
    per partition."""
    m = response_module(request.api_key, request.api_version)
    body = request.body
    offsets = _requested(body, broker.clock.milliseconds())
    refused = commit_refusals(broker, body.group_id, offsets, transactional_id)
    offsets = {tp: offset for tp, offset in offsets.items() if tp not in refused}
    results = refused | (store(offsets) if offsets or not refused else {})
    topics = partition_errors(
        results, getattr(m, f"{prefix}ResponsePartition"), getattr(m, f"{prefix}ResponseTopic")
    )
    return make(getattr(m, f"{prefix}Response"), throttle_time=datetime.timedelta(0),
                topics=topics)  # fmt: skip


def _requested(body: Any, now_ms: int) -> dict[TopicPartition, CommittedOffset]:
    return {
        (topic.name, p.partition_index): CommittedOffset(
            p.committed_offset, getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata or "", now_ms,
        )
        for topic in body.topics for p in topic.partitions
    }  # fmt: skip
