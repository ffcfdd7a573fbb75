"""LeaderAndIsr (4): the controller makes this broker a partition's leader or a follower.

Refused as a whole when its controller epoch is older than one already seen; a partition whose
leader epoch is older than the one this broker has is refused alone (STALE_CONTROLLER_EPOCH, as
Kafka answers). A partition this broker does not replicate is ignored. The logs of its new
replicas are created first, in slices on the default executor, so the loop serves others
meanwhile."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.group.store import OFFSETS_TOPIC
from weir.broker.topics import CREATION_SLICE, TopicError
from weir.broker.txn.store import TRANSACTION_STATE_TOPIC
from weir.protocol.apis import InterBrokerApiKey
from weir.protocol.codec import Request, response_module
from weir.storage import StorageError

log = logging.getLogger(__name__)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(InterBrokerApiKey.LEADER_AND_ISR, request.api_version)
    body = request.body
    cluster = broker.cluster
    error = broker.controller_request_error(body)
    if error is not ErrorCode.none:
        return make(m.LeaderAndIsrResponse, error_code=error, topics=(), partition_errors=())
    assert cluster is not None
    cluster.note_leaders({b.broker_id: (b.host_name, b.port) for b in body.live_leaders})
    topics = []
    flat = []
    for topic in body.topic_states:
        await _open_new_replicas(broker, topic.topic_name, topic.partition_states)
        errors = []
        for state in topic.partition_states:
            code = await _apply(broker, topic.topic_name, state)
            errors.append(
                make(m.LeaderAndIsrPartitionError, topic_name=topic.topic_name,
                     partition_index=state.partition_index, error_code=code)
            )  # fmt: skip
        flat.extend(errors)
        if hasattr(m, "LeaderAndIsrTopicError"):
            topics.append(
                make(m.LeaderAndIsrTopicError, topic_id=topic.topic_id,
                     partition_errors=tuple(errors))
            )  # fmt: skip
    return make(
        m.LeaderAndIsrResponse,
        error_code=ErrorCode.none,
        topics=tuple(topics),
        partition_errors=tuple(flat),
    )


async def _open_new_replicas(broker: BrokerContext, topic: str, states: Any) -> None:
    """Create the logs of this broker's replicas of `topic` it has none for yet; one that
    cannot be created is left to `_apply`, which reports it."""
    node = broker.config.node_id
    mine = [s.partition_index for s in states if node in s.replicas]
    new = [index for index in mine if broker.replicas.get(topic, index) is None]
    if not new:
        return
    try:
        config = broker.topics.check_configs(await _topic_info_configs(broker, topic))
        for start in range(0, len(new), CREATION_SLICE):
            await broker.replicas.open_partitions(
                topic, new[start : start + CREATION_SLICE], config
            )
    except (StorageError, TopicError) as exc:
        log.warning("%s: new replicas' logs not created ahead: %s", topic, exc)


async def _topic_info_configs(broker: BrokerContext, topic: str) -> dict[str, str]:
    info = broker.metadata.topic(topic)
    if info is None and broker.cluster is not None:
        loop = asyncio.get_running_loop()
        info = await loop.run_in_executor(None, broker.cluster.store.refresh_topic, topic)
    return info.configs if info is not None else {}


async def _apply(broker: BrokerContext, topic: str, state: Any) -> ErrorCode:
    node = broker.config.node_id
    if node not in state.replicas:
        return ErrorCode.none
    current = broker.replicas.get(topic, state.partition_index)
    if current is not None and state.leader_epoch < current.leader_epoch:
        log.warning(
            "%s-%d: ignoring leader epoch %d, older than %d",
            topic, state.partition_index, state.leader_epoch, current.leader_epoch,
        )  # fmt: skip
        return ErrorCode.stale_controller_epoch
    configs = await _topic_info_configs(broker, topic)
    try:
        config = broker.topics.check_configs(configs)
        cluster = broker.cluster
        assert cluster is not None
        if state.leader == node:
            cluster.stop_following(topic, state.partition_index)
            was_leader = current is not None and current.is_leader
            broker.replicas.become_leader(
                topic, state.partition_index, state.leader_epoch, config,
                replicas=state.replicas, isr=state.isr,
                partition_epoch=getattr(state, "partition_epoch", getattr(state, "zk_version", 0)),
            )  # fmt: skip
            if topic == OFFSETS_TOPIC and not was_leader:
                broker.groups.load_partition(state.partition_index)
            if topic == TRANSACTION_STATE_TOPIC and not was_leader and broker.transactions:
                broker.transactions.load_partition(state.partition_index)
        else:
            broker.replicas.become_follower(
                topic, state.partition_index, state.leader_epoch, config
            )
            if topic == OFFSETS_TOPIC:
                broker.groups.unload_partition(state.partition_index)
            if topic == TRANSACTION_STATE_TOPIC and broker.transactions:
                broker.transactions.unload_partition(state.partition_index)
            partition = broker.replicas.get(topic, state.partition_index)
            if state.leader >= 0 and partition is not None:
                cluster.follow(partition, state.leader, state.leader_epoch)
            else:
                cluster.stop_following(topic, state.partition_index)
    except StorageError as exc:
        log.error("%s-%d: no log: %s", topic, state.partition_index, exc)
        return ErrorCode.kafka_storage_error
    except Exception as exc:  # a config this broker cannot apply: the partition is refused
        log.error("%s-%d: %s", topic, state.partition_index, exc)
        return ErrorCode.unknown_server_error
    return ErrorCode.none
