"""AlterPartition (56): a leader's ISR change (KIP-497), answered by the controller. Another
broker answers NOT_CONTROLLER, and the leader tries again with the controller it learns of."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.handlers.per_partition import by_topic
from weir.cluster.controller import IsrChange
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

log = logging.getLogger(__name__)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ALTER_PARTITION, request.api_version)
    body = request.body
    cluster = broker.cluster
    names = {v: k for k, v in cluster.cache.topic_ids.items()} if cluster else {}
    changes = []
    for topic in body.topics:
        name = names.get(topic.topic_id)
        for p in topic.partitions:
            isr = getattr(p, "new_isr", None)
            if isr is None:
                isr = tuple(b.broker_id for b in p.new_isr_with_epochs)
            changes.append(IsrChange(name or "", p.partition_index, p.leader_epoch,
                                     p.partition_epoch, tuple(isr)))  # fmt: skip
    results = None
    if cluster is not None:
        future = cluster.controller.alter_partition(body.broker_id, body.broker_epoch, changes)
        results = await asyncio.wrap_future(future)
    if results is None:
        return make(m.AlterPartitionResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.not_controller, topics=())  # fmt: skip
    topic_ids = cluster.cache.topic_ids if cluster is not None else {}
    topics = by_topic(
        (((result.topic, result.index), result) for result in results),
        lambda _index, result: _partition(m, result),
        lambda name, entries: make(m.TopicData, topic_id=topic_ids.get(name), partitions=entries),
    )
    return make(m.AlterPartitionResponse, throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none, topics=topics)  # fmt: skip


def _partition(m: Any, result: Any) -> Any:
    state = result.state
    return make(
        m.PartitionData, partition_index=result.index, error_code=ErrorCode(result.error_code),
        leader_id=state.leader if state else -1, leader_epoch=state.leader_epoch if state else -1,
        isr=tuple(state.isr) if state else (), leader_recovery_state=0,
        partition_epoch=result.partition_epoch,
    )  # fmt: skip
