"""The follower's fetcher in a fetch session, against a scripted leader: a full request that
opens the session, then only the partitions whose fetch offset moved, forgotten partitions
once no longer followed, and a full request again after FETCH_SESSION_ID_NOT_FOUND."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from weir.broker.fetcher import FETCH_VERSION, LeaderFetcher
from weir.broker.partition import Partition, PartitionState
from weir.broker.replica_manager import ReplicaManager
from weir.clock import FakeClock, FakeScheduler
from weir.protocol.apis import ApiKey
from weir.protocol.codec import response_module
from weir.records import BatchSpec, Record, build_batch
from weir.storage import LogConfig, LogManager, LogManagerConfig

FOLLOWER, LEADER, EPOCH = 1, 2, 1
TOPIC = "orders"
SESSION = 4242


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[ReplicaManager, list[Partition]]]:
    clock = FakeClock()
    logs = LogManager(tmp_path, LogConfig(), clock, FakeScheduler(clock), LogManagerConfig(), {})
    replicas = ReplicaManager(logs, clock, node_id=FOLLOWER)
    partitions = [
        replicas.become_follower(PartitionState(TOPIC, i, LEADER, EPOCH, (LEADER, FOLLOWER),
                                                (LEADER, FOLLOWER)), LogConfig())
        for i in (0, 1)
    ]  # fmt: skip
    yield replicas, partitions
    logs.close()


class ScriptedLeader:
    """Answers OffsetForLeaderEpoch with "no such epoch" and each Fetch with the next of
    `answers` (session id, error, {partition: (high watermark, record count)}); records every
    Fetch request. `before_answer` runs on the n-th Fetch (from 1), before it is answered."""

    def __init__(self, answers: list[tuple[int, ErrorCode, dict[int, tuple[int, int]]]]) -> None:
        self.answers = answers
        self.fetches: list[Any] = []
        self.before_answer: dict[int, Callable[[], None]] = {}
        self.done = asyncio.Event()

    async def exchange(self, api_key: int, version: int, body: Any) -> Any:
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return _no_epoch(version, body)
        self.fetches.append(body)
        if not self.answers:
            self.done.set()
            await asyncio.Event().wait()  # the round trip never ends; the test closes us
        self.before_answer.get(len(self.fetches), lambda: None)()
        session_id, error, partitions = self.answers.pop(0)
        return _fetch_response(session_id, error, partitions)


def _no_epoch(version: int, body: Any) -> Any:
    m = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    topics = tuple(
        m.OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(
            m.EpochEndOffset(error_code=ErrorCode.none, partition=p.partition, leader_epoch=-1,
                             end_offset=-1) for p in t.partitions))
        for t in body.topics
    )  # fmt: skip
    return m.OffsetForLeaderEpochResponse(throttle_time=0, topics=topics)


def _fetch_response(
    session_id: int, error: ErrorCode, partitions: dict[int, tuple[int, int]]
) -> Any:
    m = response_module(ApiKey.FETCH, FETCH_VERSION)
    answered = []
    for index, (high_watermark, count) in partitions.items():
        records = [Record(offset=i, timestamp=0, key=None, value=b"v") for i in range(count)]
        batch = build_batch(records, spec=BatchSpec(partition_leader_epoch=EPOCH)) if count else b""
        answered.append(m.PartitionData(
            partition_index=index, error_code=ErrorCode.none, high_watermark=high_watermark,
            last_stable_offset=high_watermark, log_start_offset=0, aborted_transactions=None,
            preferred_read_replica=-1, records=batch,
        ))  # fmt: skip
    topics = (
        (m.FetchableTopicResponse(topic=TOPIC, partitions=tuple(answered)),) if answered else ()
    )
    return m.FetchResponse(throttle_time=0, error_code=error, session_id=session_id,
                           responses=topics)  # fmt: skip


def sent(body: Any) -> tuple[int, int, dict[int, int], list[int]]:
    """(session id, epoch, {partition: fetch offset}, forgotten partitions) of a Fetch."""
    offsets = {p.partition: p.fetch_offset for t in body.topics for p in t.partitions}
    forgotten = [i for t in body.forgotten_topics_data for i in t.partitions]
    return body.session_id, body.session_epoch, offsets, forgotten


async def replicate(
    replicas: ReplicaManager,
    partitions: list[Partition],
    leader: ScriptedLeader,
    on_fetch: dict[int, Callable[[LeaderFetcher], None]] | None = None,
) -> None:
    """Follow `partitions` from `leader` until it has answered all it was scripted to;
    `on_fetch[n]` runs on the fetcher as the n-th Fetch is answered."""
    fetcher = LeaderFetcher(FOLLOWER, LEADER, ("127.0.0.1", 9), replicas)
    fetcher._connection._exchange = leader.exchange  # type: ignore[method-assign]
    leader.before_answer = {n: partial(action, fetcher) for n, action in (on_fetch or {}).items()}
    for partition in partitions:
        fetcher.add(partition, EPOCH)
    await asyncio.wait_for(leader.done.wait(), 5)
    await fetcher.close()


def test_full_then_only_moved_partitions_then_full_after_the_session_is_lost(follower) -> None:
    replicas, partitions = follower
    leader = ScriptedLeader([
        (SESSION, ErrorCode.none, {0: (2, 2), 1: (0, 0)}),  # opens the session; 2 records
        (SESSION, ErrorCode.none, {}),  # nothing new
        (0, ErrorCode.fetch_session_id_not_found, {}),
        (SESSION + 1, ErrorCode.none, {0: (2, 0), 1: (0, 0)}),
    ])  # fmt: skip
    asyncio.run(replicate(replicas, partitions, leader))
    assert [sent(body) for body in leader.fetches] == [
        (0, 0, {0: 0, 1: 0}, []),
        (SESSION, 1, {0: 2}, []),  # partition 0's fetch offset moved
        (SESSION, 2, {}, []),
        (0, 0, {0: 2, 1: 0}, []),  # the leader lost the session: full again
        (SESSION + 1, 1, {}, []),
    ]
    assert partitions[0].log.log_end_offset == 2


def test_a_partition_no_longer_followed_is_forgotten(follower) -> None:
    replicas, partitions = follower
    leader = ScriptedLeader([(SESSION, ErrorCode.none, {0: (0, 0), 1: (0, 0)}),
                             (SESSION, ErrorCode.none, {})])  # fmt: skip
    stop_following = {1: lambda fetcher: fetcher.remove((TOPIC, 1))}
    asyncio.run(replicate(replicas, partitions, leader, stop_following))
    assert [sent(body) for body in leader.fetches] == [
        (0, 0, {0: 0, 1: 0}, []),
        (SESSION, 1, {}, [1]),
        (SESSION, 2, {}, []),
    ]
