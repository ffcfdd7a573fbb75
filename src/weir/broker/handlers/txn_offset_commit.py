"""TxnOffsetCommit (28): a transactional producer commits a consumer group's offsets as part of
its transaction (`send_offsets_to_transaction`). The group coordinator appends them to the
group's `__consumer_offsets` partition as a batch of the producer's transaction; they become the
group's committed offsets when the transaction commits, and are dropped if it aborts."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.authz.checks import commit_refusals
from weir.broker.context import BrokerContext, make
from weir.broker.group.group import CommittedOffset
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.TXN_OFFSET_COMMIT, request.api_version)
    body = request.body
    now = broker.clock.milliseconds()
    offsets = {
        (topic.name, p.partition_index): CommittedOffset(
            p.committed_offset, getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata or "", now,
        )
        for topic in body.topics for p in topic.partitions
    }  # fmt: skip
    refused = commit_refusals(broker, body.group_id, offsets, body.transactional_id)
    offsets = {tp: offset for tp, offset in offsets.items() if tp not in refused}
    results = refused | (broker.groups.commit_transactional_offsets(
        body.group_id, (body.producer_id, body.producer_epoch),
        getattr(body, "generation_id", -1), getattr(body, "member_id", ""),
        getattr(body, "group_instance_id", None), offsets, broker.replicas.get,
    ) if offsets or not refused else {})  # fmt: skip
    topics: dict[str, list[Any]] = {}
    for (name, index), error in results.items():
        topics.setdefault(name, []).append(
            make(m.TxnOffsetCommitResponsePartition, partition_index=index, error_code=error)
        )
    return make(m.TxnOffsetCommitResponse, throttle_time=datetime.timedelta(0), topics=tuple(
        make(m.TxnOffsetCommitResponseTopic, name=name, partitions=tuple(partitions))
        for name, partitions in topics.items()))  # fmt: skip
