"""A cluster for controller unit tests: brokers registered in an in-memory ZooKeeper, each with
a `Controller` on its own session, fake time, and channels that record what the controller
sends instead of sending it. Events are handled on the test's thread (`World.run`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from weir.clock import FakeClock
from weir.cluster import znodes
from weir.cluster.controller import Controller, LeaderBalance
from weir.cluster.zk_memory import InMemorySession, InMemoryZooKeeper
from weir.cluster.znodes import BrokerRegistration, PartitionState, TopicAssignment
from weir.protocol.apis import InterBrokerApiKey

LEADER_AND_ISR = InterBrokerApiKey.LEADER_AND_ISR
STOP_REPLICA = InterBrokerApiKey.STOP_REPLICA
UPDATE_METADATA = InterBrokerApiKey.UPDATE_METADATA
NO_BALANCE = LeaderBalance(enabled=False)


@dataclass
class RecordingChannel:
    """A channel to one broker that keeps the requests it is given."""

    node_id: int
    sent: list[tuple[int, Any]] = field(default_factory=list)
    stopped: bool = False

    def send(self, api_key: int, api_version: int, body: Any,
             on_response: Callable[[Any], None] | None = None) -> None:  # fmt: skip
        self.sent.append((api_key, body))

    def stop(self) -> None:
        self.stopped = True


@dataclass
class Node:
    """A broker: its session, its registration and the controller it may become."""

    node_id: int
    session: InMemorySession
    controller: Controller
    #: requests its controller sent, per broker they went to
    channels: dict[int, list[RecordingChannel]] = field(default_factory=dict)

    def requests(self, to: int, api_key: int) -> list[Any]:
        return [body for channel in self.channels.get(to, []) for key, body in channel.sent
                if key == api_key]  # fmt: skip

    def forget_requests(self) -> None:
        for channels in self.channels.values():
            for channel in channels:
                channel.sent.clear()


class World:
    def __init__(self) -> None:
        self.zk = InMemoryZooKeeper()
        self.clock = FakeClock()
        self.nodes: dict[int, Node] = {}
        admin = self.zk.session()
        for path in znodes.BASE_PATHS:
            admin.ensure_path(path)
        self.admin = admin

    # ---- brokers ---------------------------------------------------------------------------------

    def add_broker(self, node_id: int, *, balance: LeaderBalance = NO_BALANCE,
                   unclean: bool = False) -> Node:  # fmt: skip
        session = self.zk.session()
        node = Node(node_id, session, Controller(
            session, node_id, clock=self.clock, balance=balance,
            unclean_leader_election=unclean, channels=self._recording(node_id),
        ))  # fmt: skip
        self.nodes[node_id] = node
        self.register(node_id)
        node.controller.start_without_thread()
        self.run()
        return node

    def _recording(self, owner: int) -> Callable[..., RecordingChannel]:
        def open_channel(registration: BrokerRegistration, address: Any, is_current: Any
                         ) -> RecordingChannel:  # fmt: skip
            channel = RecordingChannel(registration.node_id)
            self.nodes[owner].channels.setdefault(registration.node_id, []).append(channel)
            return channel

        return open_channel

    def register(self, node_id: int) -> None:
        registration = BrokerRegistration(node_id=node_id, host="127.0.0.1", port=9000 + node_id)
        self.nodes[node_id].session.create(
            znodes.broker_path(node_id),
            znodes.encode_broker(registration, self.clock.milliseconds()),
            ephemeral=True,
        )

    def expire(self, node_id: int) -> None:
        """The broker's ZooKeeper session expires: its registration (and `/controller`, if it
        held it) goes."""
        self.zk.expire(self.nodes[node_id].session)
        self.run()

    def come_back(self, node_id: int) -> None:
        """A broker whose session expired registers again on its new session."""
        self.register(node_id)
        self.nodes[node_id].session.registered()
        self.run()

    # ---- the controller --------------------------------------------------------------------------

    def run(self) -> None:
        """Handle every queued event on every broker until none is left."""
        while sum(node.controller.process_pending() for node in self.nodes.values()):
            pass

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.run()

    @property
    def controller(self) -> Node:
        active = [node for node in self.nodes.values() if node.controller.active]
        assert len(active) == 1, f"controllers: {[n.node_id for n in active]}"
        return active[0]

    # ---- topics ----------------------------------------------------------------------------------

    def create_topic(self, name: str, replicas: Sequence[Sequence[int]],
                     configs: dict[str, str] | None = None) -> None:  # fmt: skip
        assignment = TopicAssignment(
            name=name,
            topic_id=uuid.uuid4(),
            partitions={i: tuple(r) for i, r in enumerate(replicas)},
        )
        self.admin.create(znodes.topic_config_path(name),
                          znodes.encode_topic_config(configs or {}))  # fmt: skip
        self.admin.create(znodes.topic_path(name), znodes.encode_assignment(assignment))
        self.run()

    def delete_topic(self, name: str) -> None:
        self.admin.create(znodes.delete_request_path(name))
        self.run()

    def state(self, topic: str, index: int) -> PartitionState:
        data, _ = self.admin.get(znodes.state_path(topic, index))
        return znodes.parse_state(topic, index, data)

    def zk_version(self, topic: str, index: int) -> int:
        return self.admin.get(znodes.state_path(topic, index))[1].version

    def leaders(self, topic: str, count: int) -> list[int]:
        return [self.state(topic, i).leader for i in range(count)]


def partitions_in(body: Any) -> dict[tuple[str, int], Any]:
    """The partition states of a LeaderAndIsr or UpdateMetadata request, by partition."""
    return {(t.topic_name, p.partition_index): p for t in body.topic_states
            for p in t.partition_states}  # fmt: skip


def stopped_in(body: Any) -> dict[tuple[str, int], bool]:
    """StopReplica's partitions and their delete flags."""
    return {(t.topic_name, p.partition_index): p.delete_partition for t in body.topic_states
            for p in t.partition_states}  # fmt: skip
