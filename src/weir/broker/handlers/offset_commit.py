"""OffsetCommit (8): store committed offsets in `__consumer_offsets`."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.authz.checks import commit_refusals
from weir.broker.context import BrokerContext, make
from weir.broker.group.group import CommittedOffset
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.OFFSET_COMMIT, request.api_version)
    body = request.body
    now = broker.clock.milliseconds()
    offsets = {
        (topic.name, p.partition_index): CommittedOffset(
            p.committed_offset, getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata or "", now,
        )
        for topic in body.topics for p in topic.partitions
    }  # fmt: skip
    refused = commit_refusals(broker, body.group_id, offsets)
    offsets = {tp: offset for tp, offset in offsets.items() if tp not in refused}
    generation = getattr(body, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = body.generation_id
    results = refused | (broker.groups.commit_offsets(
        body.group_id, generation, body.member_id, getattr(body, "group_instance_id", None),
        offsets, broker.replicas.get,
    ) if offsets or not refused else {})  # fmt: skip
    topics: dict[str, list[Any]] = {}
    for (name, index), error in results.items():
        topics.setdefault(name, []).append(
            make(m.OffsetCommitResponsePartition, partition_index=index, error_code=error)
        )
    return make(m.OffsetCommitResponse, throttle_time=datetime.timedelta(0), topics=tuple(
        make(m.OffsetCommitResponseTopic, name=name, partitions=tuple(partitions))
        for name, partitions in topics.items()))  # fmt: skip
