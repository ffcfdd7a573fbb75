"""TxnOffsetCommit (28): a transactional producer commits a consumer group's offsets as part of
its transaction (`send_offsets_to_transaction`). The group coordinator appends them to the
group's `__consumer_offsets` partition as a batch of the producer's transaction; they become the
group's committed offsets when the transaction commits, and are dropped if it aborts. Decoded,
checked and answered as OffsetCommit is (`offset_commit.commit`)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext
from weir.broker.group.group import CommittedOffset
from weir.broker.handlers.offset_commit import TopicPartition, commit
from weir.protocol.codec import Request


async def handle(broker: BrokerContext, request: Request) -> Any:
    body = request.body

    def store(offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, ErrorCode]:
        return broker.groups.commit_transactional_offsets(
            body.group_id, (body.producer_id, body.producer_epoch),
            getattr(body, "generation_id", -1), getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None), offsets, broker.replicas.get,
        )  # fmt: skip

    return commit(broker, request, "TxnOffsetCommit", store, body.transactional_id)
