"""The broker's moves between its log directories (AlterReplicaLogDirs): the answers Kafka gives,
a move carried out to the end with the partition pointed at its new log, a move cancelled by
asking for the directory the replica is in, and the throttle's pacing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.schema.errors import ErrorCode

from weir.broker.log_dir_mover import MIN_STEP_BYTES, CopyThrottle, LogDirMovers
from weir.broker.replica_manager import ReplicaManager
from weir.clock import FakeClock, FakeScheduler
from weir.records import Record, build_batch
from weir.storage import LogConfig, LogManager
from weir.storage.config import NO_LIMIT

TOPIC = "t"


def make(tmp_path: Path, clock: FakeClock) -> tuple[ReplicaManager, LogDirMovers, list[str]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    logs = LogManager(dirs, LogConfig(segment_bytes=600), clock, FakeScheduler(clock))
    replicas = ReplicaManager(logs, clock)
    replicas.create_partitions(TOPIC, 2, LogConfig(segment_bytes=600))
    for i in range(50):
        batch = build_batch([Record(offset=0, timestamp=0, key=None, value=b"v%03d" % i)])
        assert replicas.append(TOPIC, 0, batch).error is ErrorCode.none
    return replicas, LogDirMovers(replicas, clock, NO_LIMIT), [str(d.absolute()) for d in dirs]


def other_dir(replicas: ReplicaManager, dirs: list[str], index: int = 0) -> str:
    current = replicas.log_manager.log_dir_of(TOPIC, index)
    assert current is not None
    return next(d for d in dirs if d != str(current.path.absolute()))


async def moves_done(movers: LogDirMovers) -> None:
    for _ in range(500):
        if not movers._tasks:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the move did not finish")


def test_answers_as_kafka_for_what_the_broker_lacks(tmp_path: Path, clock: FakeClock) -> None:
    replicas, movers, dirs = make(tmp_path, clock)

    async def run() -> None:
        assert await movers.alter(TOPIC, 0, "/no/such/dir") is ErrorCode.log_dir_not_found
        assert await movers.alter(TOPIC, 0, "b") is ErrorCode.log_dir_not_found
        target = other_dir(replicas, dirs, 0)
        too_long = "x" * 220  # its future directory's name would pass 255 bytes
        assert await movers.alter(too_long, 0, target) is ErrorCode.invalid_topic_exception
        assert await movers.alter(TOPIC, 7, target) is ErrorCode.replica_not_available
        created = replicas.log_manager.get_or_create(TOPIC, 7)
        assert str(created.directory.parent) == target, "created where it was asked for"
        current = replicas.log_manager.log_dir_of(TOPIC, 0)
        assert current is not None
        assert await movers.alter(TOPIC, 0, str(current.path)) is ErrorCode.none
        assert not movers._tasks
        await movers.close()

    asyncio.run(run())
    replicas.log_manager.close()


def test_a_move_ends_with_the_partition_on_its_new_log(tmp_path: Path, clock: FakeClock) -> None:
    replicas, movers, dirs = make(tmp_path, clock)
    partition = replicas.get(TOPIC, 0)
    assert partition is not None
    old = partition.log
    target = other_dir(replicas, dirs)

    async def run() -> None:
        assert await movers.alter(TOPIC, 0, target) is ErrorCode.none
        assert replicas.log_manager.future_of(TOPIC, 0) is not None
        await moves_done(movers)
        await movers.close()

    asyncio.run(run())
    assert partition.log is not old and partition.log is replicas.log_manager.get(TOPIC, 0)
    assert str(partition.log.directory.parent) == target
    assert (partition.log.log_end_offset, partition.log.high_watermark) == (50, 50)
    assert movers.completed == 1
    batch = build_batch([Record(offset=0, timestamp=0, key=None, value=b"after")])
    assert replicas.append(TOPIC, 0, batch).base_offset == 50
    replicas.log_manager.close()


def test_asking_for_the_current_directory_cancels_a_move(tmp_path: Path, clock: FakeClock) -> None:
    replicas, movers, dirs = make(tmp_path, clock)
    movers.throttle.bytes_per_second = 1  # the copy waits after its first step
    target = other_dir(replicas, dirs)
    current = replicas.log_manager.log_dir_of(TOPIC, 0)
    assert current is not None

    async def run() -> None:
        assert await movers.alter(TOPIC, 0, target) is ErrorCode.none
        moving = replicas.log_manager.future_of(TOPIC, 0)
        assert moving is not None
        await asyncio.sleep(0.2)
        assert await movers.alter(TOPIC, 0, str(current.path)) is ErrorCode.none
        assert replicas.log_manager.future_of(TOPIC, 0) is None
        assert not moving.log.directory.exists()
        await movers.close()

    asyncio.run(run())
    assert not [p for p in Path(target).iterdir() if p.name.endswith("-future")]
    assert replicas.log_manager.log_dir_of(TOPIC, 0) is current
    replicas.log_manager.close()


def test_the_throttle_paces_all_moves_together(clock: FakeClock) -> None:
    throttle = CopyThrottle(clock, 1_000_000)
    assert throttle.step_bytes() == 100_000
    assert throttle.delay_s(100_000) == 0.1
    assert throttle.delay_s(100_000) == 0.2  # a second copier waits behind the first
    clock.advance(200)
    assert throttle.delay_s(0) == 0.0
    assert CopyThrottle(clock, 1).step_bytes() == MIN_STEP_BYTES
    assert CopyThrottle(clock, NO_LIMIT).delay_s(1 << 20) < 0.001
