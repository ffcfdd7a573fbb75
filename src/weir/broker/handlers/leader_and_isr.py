"""LeaderAndIsr (4): the controller makes this broker a partition's leader or a follower.

Refused as a whole when its controller epoch is older than one already seen. The replica
manager applies the rest (`ReplicaManager.become_leader_or_follower`): a partition whose leader
epoch is older than the one this broker has is refused alone (STALE_CONTROLLER_EPOCH, as Kafka
answers), one this broker does not replicate is ignored."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.handlers.per_partition import by_topic, flat_partition_errors
from weir.broker.partition import PartitionState
from weir.protocol.apis import InterBrokerApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(InterBrokerApiKey.LEADER_AND_ISR, request.api_version)
    body = request.body
    error = broker.controller_request_error(body)
    if error is not ErrorCode.none:
        return make(m.LeaderAndIsrResponse, error_code=error, topics=(), partition_errors=())
    errors = await broker.replicas.become_leader_or_follower(
        _states(body),
        broker.log_config,
        live_leaders={b.broker_id: (b.host_name, b.port) for b in body.live_leaders},
    )
    return _response(m, body, errors)


def _states(body: Any) -> list[PartitionState]:
    return [
        PartitionState(
            topic=topic.topic_name,
            index=state.partition_index,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            replicas=tuple(state.replicas),
            isr=tuple(state.isr),
            partition_epoch=getattr(state, "partition_epoch", getattr(state, "zk_version", 0)),
        )
        for topic in body.topic_states
        for state in topic.partition_states
    ]


def _response(m: Any, body: Any, errors: dict[tuple[str, int], ErrorCode]) -> Any:
    """Per partition errors, flat (v4 and older) or by topic id (v5 on)."""
    flat: tuple[Any, ...] = ()
    topics: tuple[Any, ...] = ()
    if hasattr(m, "LeaderAndIsrTopicError"):
        ids = {topic.topic_name: topic.topic_id for topic in body.topic_states}
        topics = by_topic(
            errors.items(),
            lambda index, code: make(m.LeaderAndIsrPartitionError, partition_index=index,
                                     error_code=code),
            lambda name, entries: make(m.LeaderAndIsrTopicError, topic_id=ids[name],
                                       partition_errors=entries),
        )  # fmt: skip
    else:
        flat = flat_partition_errors(errors, m.LeaderAndIsrPartitionError)
    return make(m.LeaderAndIsrResponse, error_code=ErrorCode.none, topics=topics,
                partition_errors=flat)  # fmt: skip
