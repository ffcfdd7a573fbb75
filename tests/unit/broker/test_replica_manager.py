"""The replica manager applies the controller's LeaderAndIsr and StopReplica: roles, follower
fetchers and the internal topics' coordinators, each told of every leadership gained or lost."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from group_harness import GroupWorld, form_stable_group, join_request
from kio.schema.errors import ErrorCode

from weir.broker.group.store import OFFSETS_TOPIC
from weir.broker.partition import FOLLOWER, LEADER, STOPPED, Partition, PartitionState
from weir.broker.replica_manager import ReplicaManager
from weir.clock import FakeClock, FakeScheduler
from weir.records import Record, build_batch
from weir.storage import LogConfig, LogManager, LogManagerConfig

NODE = 1
OTHER = 2


@dataclass
class FakeFollowers:
    """The follower fetchers, recording what they were asked."""

    following: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    leaders: dict[int, tuple[str, int]] = field(default_factory=dict)

    def note_leaders(self, leaders: dict[int, tuple[str, int]]) -> None:
        self.leaders.update(leaders)

    def follow(self, partition: Partition, leader: int, leader_epoch: int) -> bool:
        self.following[(partition.topic, partition.index)] = (leader, leader_epoch)
        return True

    def stop_following(self, topic: str, index: int) -> None:
        self.following.pop((topic, index), None)


@dataclass
class FakeCoordinator:
    calls: list[tuple[str, int]] = field(default_factory=list)

    def load_partition(self, index: int) -> None:
        self.calls.append(("load", index))

    def unload_partition(self, index: int) -> None:
        self.calls.append(("unload", index))


@dataclass
class Broker:
    replicas: ReplicaManager
    followers: FakeFollowers
    coordinator: FakeCoordinator

    def apply(self, *states: PartitionState) -> dict[tuple[str, int], ErrorCode]:
        async def config_of(_topic: str) -> LogConfig:
            return LogConfig()

        return asyncio.run(self.replicas.become_leader_or_follower(
            states, config_of, live_leaders={OTHER: ("10.0.0.2", 9092)}
        ))  # fmt: skip


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    clock = FakeClock()
    logs = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig(), {})
    replicas = ReplicaManager(logs, clock, node_id=NODE)
    followers, coordinator = FakeFollowers(), FakeCoordinator()
    replicas.followers = followers
    replicas.coordinators[OFFSETS_TOPIC] = coordinator
    yield Broker(replicas, followers, coordinator)
    logs.close()


def offsets(leader: int, epoch: int, replicas: tuple[int, ...] = (NODE, OTHER)) -> PartitionState:
    return PartitionState(OFFSETS_TOPIC, 0, leader, epoch, replicas, replicas)


def test_leadership_gained_loads_the_coordinators_partition_once(broker: Broker) -> None:
    assert broker.apply(offsets(NODE, 1)) == {(OFFSETS_TOPIC, 0): ErrorCode.none}
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    assert partition is not None and partition.role is LEADER
    assert broker.coordinator.calls == [("load", 0)]
    assert broker.followers.leaders == {OTHER: ("10.0.0.2", 9092)}
    broker.apply(offsets(NODE, 1))  # the same leadership again (an ISR update)
    assert broker.coordinator.calls == [("load", 0)]


def test_leadership_lost_unloads_it_and_fetches_from_the_new_leader(broker: Broker) -> None:
    broker.apply(offsets(NODE, 1))
    broker.apply(offsets(OTHER, 2))
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    assert partition is not None and partition.role is FOLLOWER
    assert broker.coordinator.calls == [("load", 0), ("unload", 0)]
    assert broker.followers.following == {(OFFSETS_TOPIC, 0): (OTHER, 2)}
    broker.apply(offsets(NODE, 3))  # back to leading: no longer fetched
    assert broker.followers.following == {}
    assert broker.coordinator.calls[-1] == ("load", 0)


def test_an_older_leader_epoch_is_refused_alone(broker: Broker) -> None:
    broker.apply(offsets(NODE, 5))
    other_topic = PartitionState("orders", 0, OTHER, 1, (NODE, OTHER), (NODE, OTHER))
    errors = broker.apply(offsets(OTHER, 4), other_topic)
    assert errors == {(OFFSETS_TOPIC, 0): ErrorCode.stale_controller_epoch,
                      ("orders", 0): ErrorCode.none}  # fmt: skip
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    assert partition is not None and partition.role is LEADER and partition.leader_epoch == 5


def test_a_partition_this_broker_does_not_replicate_is_left_alone(broker: Broker) -> None:
    errors = broker.apply(offsets(OTHER, 1, replicas=(OTHER, 3)))
    assert errors == {(OFFSETS_TOPIC, 0): ErrorCode.none}
    assert broker.replicas.get(OFFSETS_TOPIC, 0) is None
    assert broker.coordinator.calls == [] and broker.followers.following == {}


def test_an_offline_replica_is_refused_with_a_storage_error(broker: Broker) -> None:
    broker.apply(offsets(NODE, 1))
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    assert partition is not None
    partition.log.take_offline("disk gone")
    assert broker.apply(offsets(NODE, 2)) == {(OFFSETS_TOPIC, 0): ErrorCode.kafka_storage_error}


def test_stop_replica_stops_fetching_and_serving_and_unloads(broker: Broker) -> None:
    broker.apply(offsets(OTHER, 1))
    assert broker.followers.following
    errors = broker.replicas.stop_replicas([(OFFSETS_TOPIC, 0, False)])
    assert errors == {(OFFSETS_TOPIC, 0): ErrorCode.none}
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    assert partition is not None and partition.role is STOPPED
    assert broker.followers.following == {}
    assert broker.coordinator.calls[-1] == ("unload", 0)


def test_stop_replica_with_delete_removes_the_log(broker: Broker) -> None:
    broker.apply(offsets(NODE, 1))
    directory = broker.replicas.log_manager.get(OFFSETS_TOPIC, 0)
    assert directory is not None
    broker.replicas.stop_replicas([(OFFSETS_TOPIC, 0, True)])
    assert broker.replicas.get(OFFSETS_TOPIC, 0) is None
    assert not directory.directory.exists()
    assert broker.coordinator.calls == [("load", 0), ("unload", 0)]


def test_a_stopped_leader_refuses_produces(broker: Broker) -> None:
    broker.apply(offsets(NODE, 1))
    records = build_batch([Record(offset=0, timestamp=0, key=None, value=b"v")])
    assert broker.replicas.append(OFFSETS_TOPIC, 0, records).error is ErrorCode.none
    broker.replicas.stop_replicas([(OFFSETS_TOPIC, 0, False)])
    assert broker.replicas.append(OFFSETS_TOPIC, 0, records).error is (
        ErrorCode.not_leader_or_follower
    )


# ---- with the real group coordinator ------------------------------------------------------------


def test_stop_replica_of_an_offsets_partition_unloads_its_groups(world: GroupWorld) -> None:
    asyncio.run(form_stable_group(world, [join_request()]))  # its commit creates the topic
    world.replicas.coordinators[OFFSETS_TOPIC] = world.coordinator  # as a cluster's broker has
    mine = world.store.partition_for("g")
    other = (mine + 1) % world.store.partitions
    world.replicas.stop_replicas([(OFFSETS_TOPIC, other, False)])
    assert "g" in world.coordinator.groups  # another partition's groups are not touched
    errors = world.replicas.stop_replicas([(OFFSETS_TOPIC, mine, False)])
    assert errors == {(OFFSETS_TOPIC, mine): ErrorCode.none}
    assert "g" not in world.coordinator.groups


def test_the_error_a_request_for_a_partition_meets_here(broker: Broker) -> None:
    replicas = broker.replicas
    assert replicas.leader_error(OFFSETS_TOPIC, 0) is ErrorCode.unknown_topic_or_partition
    broker.apply(offsets(OTHER, 1))
    assert replicas.leader_error(OFFSETS_TOPIC, 0) is ErrorCode.not_leader_or_follower
    broker.apply(offsets(NODE, 2))
    assert replicas.leader_error(OFFSETS_TOPIC, 0) is ErrorCode.none
    assert replicas.leader_error(OFFSETS_TOPIC, 0, 2) is ErrorCode.none
    assert replicas.leader_error(OFFSETS_TOPIC, 0, 1) is ErrorCode.fenced_leader_epoch
    assert replicas.leader_error(OFFSETS_TOPIC, 0, 3) is ErrorCode.unknown_leader_epoch
    partition = replicas.get(OFFSETS_TOPIC, 0)
    assert partition is not None
    partition.log.take_offline("disk gone")
    assert replicas.leader_error(OFFSETS_TOPIC, 0) is ErrorCode.kafka_storage_error
