"""The follower's fetcher stops when it is closed, even when its request to the leader fails at
the very moment it is cancelled (a broker shutting down as its leader exits)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from weir.broker.fetcher import CLOSE_TIMEOUT_S, LeaderFetcher
from weir.broker.partition import Partition, PartitionState
from weir.broker.replica_manager import ReplicaManager
from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, LogManager, LogManagerConfig

FOLLOWER, LEADER = 1, 2
TOPIC = "orders"


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[ReplicaManager, Partition]]:
    clock = FakeClock()
    logs = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig(), {})
    replicas = ReplicaManager(logs, clock, node_id=FOLLOWER)
    partition = replicas.become_follower(
        PartitionState(TOPIC, 0, LEADER, 1, (LEADER, FOLLOWER), (LEADER, FOLLOWER)), LogConfig()
    )
    yield replicas, partition
    logs.close()


async def close_as_the_request_fails(replicas: ReplicaManager, partition: Partition) -> bool:
    """Close a fetcher in the same loop step as its in-flight request fails; whether its fetch
    loop ended by that cancellation by the time close() returned."""
    gate: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    requested = asyncio.Event()

    async def leader_exchange(api_key: int, version: int, body: Any) -> Any:
        requested.set()
        return await gate  # the round trip to the leader, held open until the test ends it

    fetcher = LeaderFetcher(FOLLOWER, LEADER, ("127.0.0.1", 9), replicas)
    fetcher._connection._exchange = leader_exchange  # type: ignore[method-assign]
    fetcher.add(partition, 1)
    await asyncio.wait_for(requested.wait(), 5)
    gate.set_exception(ConnectionResetError("the leader exited"))
    await fetcher.close()  # cancels the fetch loop before it has seen the failure
    task = fetcher._task
    return task.done() and task.cancelled()


def test_close_stops_a_fetcher_whose_request_fails_as_it_is_cancelled(follower) -> None:
    replicas, partition = follower
    assert asyncio.run(asyncio.wait_for(close_as_the_request_fails(replicas, partition),
                                        CLOSE_TIMEOUT_S + 5))  # fmt: skip
