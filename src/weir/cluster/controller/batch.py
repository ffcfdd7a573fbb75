"""The controller's requests to brokers: one batch per event, sent when the event is done
(Kafka's `ControllerBrokerRequestBatch`), over one channel per live broker
(`ControllerChannelManager`).

While an event is handled, its LeaderAndIsr, StopReplica and UpdateMetadata entries are
collected per broker; `send` then builds one request of each kind per broker and queues them
on that broker's channel, LeaderAndIsr first, then StopReplica, then UpdateMetadata. A partition
view is taken when it is added, so a request says what the controller decided at that point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from weir.cluster.channel import BrokerChannel, Connector, plaintext_connection
from weir.cluster.controller.context import ControllerContext, TopicPartition
from weir.cluster.requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    PartitionView,
    leader_and_isr_request,
    stop_replica_request,
    update_metadata_request,
)
from weir.cluster.znodes import BrokerRegistration, PartitionState
from weir.protocol.apis import InterBrokerApiKey

log = logging.getLogger(__package__)

#: UpdateMetadata's leader for a partition being deleted (Kafka's LeaderDuringDelete)
LEADER_DURING_DELETE = -2


class Channel(Protocol):
    def send(self, api_key: int, api_version: int, body: Any,
             on_response: Callable[[Any], None] | None = None) -> None: ...  # fmt: skip

    def stop(self) -> None: ...


#: opens a channel to a broker: (registration, address, is_current) -> Channel
ChannelFactory = Callable[[BrokerRegistration, tuple[str, int], Callable[[], bool]], Channel]


def socket_channels(request_timeout_s: float, connect: Connector = plaintext_connection
                    ) -> ChannelFactory:  # fmt: skip
    """Channels that are `BrokerChannel`s: a sender thread and a socket per broker."""

    def open_channel(registration: BrokerRegistration, address: tuple[str, int],
                     is_current: Callable[[], bool]) -> Channel:  # fmt: skip
        return BrokerChannel(registration.node_id, *address, request_timeout_s=request_timeout_s,
                             is_current=is_current, connect=connect)  # fmt: skip

    return open_channel


class ControllerChannelManager:
    """A channel to every live broker, reached on the inter-broker listener.

    Thread-safety (docs/threads.md): the controller's event thread; `is_current` (given to each
    channel) is read
    by their sender threads."""

    def __init__(self, open_channel: ChannelFactory, listener: str | None,
                 is_current: Callable[[], bool]) -> None:  # fmt: skip
        self._open = open_channel
        self._listener = listener
        self._is_current = is_current
        self._channels: dict[int, Channel] = {}

    def add_broker(self, registration: BrokerRegistration) -> None:
        self.remove_broker(registration.node_id)
        address = registration.address(self._listener)
        if address is None:
            log.warning("broker %d has no %s listener: the controller cannot reach it",
                        registration.node_id, self._listener)  # fmt: skip
            address = registration.host, registration.port
        self._channels[registration.node_id] = self._open(registration, address, self._is_current)

    def remove_broker(self, node_id: int) -> None:
        channel = self._channels.pop(node_id, None)
        if channel is not None:
            channel.stop()

    def close(self) -> None:
        for node_id in list(self._channels):
            self.remove_broker(node_id)

    def send(self, node_id: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Any], None] | None = None) -> None:  # fmt: skip
        channel = self._channels.get(node_id)
        if channel is not None and self._is_current():
            channel.send(api_key, version, body, on_response)


@dataclass(slots=True)
class _BrokerRequests:
    leader_and_isr: dict[TopicPartition, PartitionView] = field(default_factory=dict)
    full: bool = False
    stop_replica: dict[TopicPartition, bool] = field(default_factory=dict)
    update_metadata: dict[TopicPartition, PartitionView] | None = None


class ControllerBrokerRequestBatch:
    """The requests one event causes, per broker.

    Thread-safety (docs/threads.md): the controller's event thread only."""

    def __init__(self, controller_id: int, context: ControllerContext,
                 channels: ControllerChannelManager, listener: str | None) -> None:  # fmt: skip
        self._controller_id = controller_id
        self._context = context
        self._channels = channels
        self._listener = listener
        self._brokers: dict[int, _BrokerRequests] = {}

    def _for(self, broker: int) -> _BrokerRequests:
        return self._brokers.setdefault(broker, _BrokerRequests())

    def add_leader_and_isr(self, brokers: Iterable[int], tp: TopicPartition, *,
                           is_new: bool = False) -> None:  # fmt: skip
        view = self._context.view(tp, is_new=is_new)
        if view is not None:
            for broker in brokers:
                self._for(broker).leader_and_isr[tp] = view

    def add_full_leader_and_isr(self, broker: int) -> None:
        """A full LeaderAndIsr: every partition `broker` replicates (a broker that just came)."""
        for tp in self._context.replicated_by(broker):
            self.add_leader_and_isr([broker], tp)
        self._for(broker).full = True

    def add_stop_replica(self, broker: int, tp: TopicPartition, *, delete: bool) -> None:
        self._for(broker).stop_replica[tp] = delete

    def add_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition],
                            *, deleting: bool = False) -> None:  # fmt: skip
        """UpdateMetadata for `partitions` to `brokers` (sent even with no partition: it also
        carries the live brokers)."""
        views = [v for tp in partitions if (v := self._context.view(tp)) is not None]
        if deleting:
            views = [replace(v, state=PartitionState(
                leader=LEADER_DURING_DELETE, leader_epoch=v.state.leader_epoch, isr=v.state.isr,
                controller_epoch=self._context.epoch)) for v in views]  # fmt: skip
        for broker in brokers:
            entries = self._for(broker)
            if entries.update_metadata is None:
                entries.update_metadata = {}
            entries.update_metadata.update({(v.topic, v.index): v for v in views})

    def send(self) -> None:
        """Queue every broker's requests on its channel, and start a new batch."""
        brokers, self._brokers = self._brokers, {}
        for broker, entries in sorted(brokers.items()):
            if self._context.is_live(broker):
                self._send(broker, entries)

    def clear(self) -> None:
        self._brokers = {}

    def _send(self, broker: int, entries: _BrokerRequests) -> None:
        broker_epoch = self._context.live_brokers[broker].epoch
        if entries.leader_and_isr:
            self._send_leader_and_isr(broker, broker_epoch, entries)
        for delete in (True, False):
            stopped = [tp for tp, d in entries.stop_replica.items() if d is delete]
            if stopped:
                body = stop_replica_request(self._controller_id, self._context.epoch,
                                            broker_epoch, stopped, delete=delete)  # fmt: skip
                self._channels.send(broker, InterBrokerApiKey.STOP_REPLICA, STOP_REPLICA_VERSION,
                                    body)  # fmt: skip
        if entries.update_metadata is not None:
            self._send_update_metadata(broker, broker_epoch, entries.update_metadata)

    def _send_leader_and_isr(self, broker: int, broker_epoch: int,
                             entries: _BrokerRequests) -> None:  # fmt: skip
        live = self._context.live_brokers
        views = list(entries.leader_and_isr.values())
        leaders = [live[n] for n in sorted({v.state.leader for v in views}) if n in live]
        body = leader_and_isr_request(self._controller_id, self._context.epoch, broker_epoch,
                                      views, leaders, full=entries.full,
                                      listener=self._listener)  # fmt: skip
        self._channels.send(broker, InterBrokerApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION,
                            body, _leader_and_isr_answered(broker))  # fmt: skip

    def _send_update_metadata(self, broker: int, broker_epoch: int,
                              views: dict[TopicPartition, PartitionView]) -> None:  # fmt: skip
        body = update_metadata_request(self._controller_id, self._context.epoch, broker_epoch,
                                       list(views.values()),
                                       list(self._context.live_brokers.values()))  # fmt: skip
        self._channels.send(broker, InterBrokerApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION,
                            body)  # fmt: skip


def _leader_and_isr_answered(broker: int) -> Callable[[Any], None]:
    def answered(response: Any) -> None:
        if response.error_code == ErrorCode.cluster_authorization_failed:
            log.error("broker %d refused LeaderAndIsr: CLUSTER_AUTHORIZATION_FAILED (the "
                      "brokers' principal needs ClusterAction on the cluster: list it in "
                      "super.users)", broker)  # fmt: skip
            return
        if response.error_code:
            log.warning("broker %d refused LeaderAndIsr: %s", broker, response.error_code)
            return
        for topic in response.topics:
            for partition in topic.partition_errors:
                if partition.error_code:
                    log.warning("broker %d: LeaderAndIsr for topic %s partition %d: %s", broker,
                                topic.topic_id, partition.partition_index,
                                partition.error_code)  # fmt: skip

    return answered
