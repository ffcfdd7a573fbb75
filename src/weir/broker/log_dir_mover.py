"""Moves of replicas between this broker's log directories (AlterReplicaLogDirs, KIP-113):
Kafka's ReplicaAlterLogDirsManager.

A move fills the partition's future log (`weir.storage.log_mover`) on one thread of its own
(Kafka's ReplicaAlterLogDirsThread), in steps throttled together by
`replica.alter.log.dirs.io.max.bytes.per.second` (a dynamic broker setting, taken up at once
through `reconfigure`). Once a step reaches the current log's end, the copy is flushed and the
swap runs on the loop: the last bytes copied with the log's appends held, the directories
renamed, the partition pointed at its new log. Producers and consumers go on meanwhile; a
fetch that began on the old log finishes reading it.

A move a stop or crash interrupted goes on from where its copy stood when the broker starts
again (`resume`), as Kafka's does.

Thread-safety (docs/threads.md): event-loop only; the copy steps run on the mover thread, which
touches only the future logs and reads the current logs under their locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor

from kio.schema.errors import ErrorCode

from weir.broker.config import BrokerConfig
from weir.broker.partition import Partition
from weir.broker.replica_manager import ReplicaManager
from weir.clock import Clock
from weir.storage.errors import StorageError
from weir.storage.files import future_dir_name
from weir.storage.log_dir import LogDirectory
from weir.storage.log_mover import FutureLog

log = logging.getLogger(__name__)

#: the most one copy step reads (less under a throttle: a tenth of a second's worth)
MAX_STEP_BYTES = 1 << 20
MIN_STEP_BYTES = 16 * 1024
#: a file name's limit: the future log's directory name must fit (Kafka's KAFKA-4893)
MAX_NAME_LENGTH = 255


class CopyThrottle:
    """The bytes per second all moves may copy together; 2**63-1 (Kafka's default) is none."""

    def __init__(self, clock: Clock, bytes_per_second: int) -> None:
        self._clock = clock
        self.bytes_per_second = bytes_per_second
        self._free_at_ms = 0.0

    def step_bytes(self) -> int:
        return max(MIN_STEP_BYTES, min(MAX_STEP_BYTES, self.bytes_per_second // 10))

    def delay_s(self, copied: int) -> float:
        """How long to wait after copying `copied` bytes to stay within the rate."""
        now = self._clock.monotonic_ms()
        self._free_at_ms = max(now, self._free_at_ms) + copied * 1000 / self.bytes_per_second
        return max(0.0, self._free_at_ms - now) / 1000


class LogDirMovers:
    """The moves of this broker's replicas between its log directories, one task each."""

    def __init__(self, replicas: ReplicaManager, clock: Clock, bytes_per_second: int) -> None:
        self._replicas = replicas
        self._logs = replicas.log_manager
        self._clock = clock
        self.throttle = CopyThrottle(clock, bytes_per_second)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="weir-alter-log-dirs")
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        #: how many moves this broker finished since it started
        self.completed = 0

    def reconfigure(self, config: BrokerConfig) -> None:
        self.throttle.bytes_per_second = config.replica_alter_log_dirs_io_max_bytes_per_second

    async def alter(self, topic: str, index: int, path: str) -> ErrorCode:
        """Move the replica of `topic-index` into the log directory `path` (absolute, as
        `log.dirs` names it), as Kafka's ReplicaManager.alterReplicaLogDirs: NONE once the
        move is under way or not needed; LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR (the directory,
        another one or the replica offline), REPLICA_NOT_AVAILABLE (no replica here yet: it
        will be created in `path`), INVALID_TOPIC_EXCEPTION (a name too long for the move)."""
        async with self._lock:
            return await self._alter(topic, index, path)

    async def _alter(self, topic: str, index: int, path: str) -> ErrorCode:
        logs = self._logs
        log_dir = logs.dir_named(path)
        refused = self._refusal(topic, index, log_dir)
        if refused is not None:
            return refused
        assert log_dir is not None  # `_refusal` answers for an unknown one
        moving = logs.future_of(topic, index)
        if moving is not None and moving.log_dir is not log_dir:
            await self.cancel(topic, index)
        partition = self._replicas.get(topic, index)
        if partition is None:
            logs.prefer_dir(topic, index, log_dir)
            return ErrorCode.replica_not_available
        if logs.log_dir_of(topic, index) is log_dir or logs.future_of(topic, index) is not None:
            return ErrorCode.none
        if not all(d.online for d in logs.dirs):  # no copy where an offline one may be
            return ErrorCode.kafka_storage_error
        return await self._start(partition, log_dir)

    def _refusal(self, topic: str, index: int, log_dir: LogDirectory | None) -> ErrorCode | None:
        """Kafka's refusals before anything is looked at: the name, the directory, the replica."""
        if len(future_dir_name(topic, index, "0" * 32)) > MAX_NAME_LENGTH:
            return ErrorCode.invalid_topic_exception
        if log_dir is None:
            return ErrorCode.log_dir_not_found
        if not log_dir.online or self._replicas.is_offline(topic, index):
            return ErrorCode.kafka_storage_error
        return None

    async def _start(self, partition: Partition, log_dir: LogDirectory) -> ErrorCode:
        topic, index = partition.topic, partition.index
        loop = asyncio.get_running_loop()
        try:
            moving = await loop.run_in_executor(
                self._thread, self._logs.create_future_log, topic, index, log_dir
            )
        except StorageError as exc:
            log.error("%s-%d: no future log in %s: %s", topic, index, log_dir.path, exc)
            return ErrorCode.kafka_storage_error
        log.info("%s-%d: moving to %s", topic, index, log_dir.path)
        self._tasks[(topic, index)] = loop.create_task(self._move(partition, moving))
        return ErrorCode.none

    def resume(self) -> None:
        """On the loop, at start: carry on the moves whose future logs the start found."""
        loop = asyncio.get_running_loop()
        for moving in self._logs.futures():
            partition = self._replicas.get(*moving.tp)
            if partition is not None and moving.tp not in self._tasks:
                self._tasks[moving.tp] = loop.create_task(self._move(partition, moving))

    async def cancel(self, topic: str, index: int) -> None:
        """Stop the partition's move and delete its future log."""
        task = self._tasks.pop((topic, index), None)
        loop = asyncio.get_running_loop()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await loop.run_in_executor(self._thread, _nothing)  # the step under way ends first
        detached = self._logs.abort_future(topic, index)
        if detached:
            await loop.run_in_executor(None, self._logs.remove_detached, detached)

    async def close(self) -> None:
        """Stop every move (the next start resumes them)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.shutdown)

    # ---- one move -----------------------------------------------------------------------------

    async def _move(self, partition: Partition, moving: FutureLog) -> None:
        key = (partition.topic, partition.index)
        try:
            await self._copy(moving)
            if self._still_moving(partition, moving):
                await self._swap(partition, moving)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed disk or a log closed under the copy
            log.error("%s-%d: the move to %s stopped: %s", *key, moving.log_dir.path, exc)
            if self._logs.future_of(*key) is moving:
                with contextlib.suppress(Exception):
                    self._logs.remove_detached(self._logs.abort_future(*key))
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

    async def _copy(self, moving: FutureLog) -> None:
        """Copy until a step reaches the current log's end, then flush the copy."""
        loop = asyncio.get_running_loop()
        while True:
            step = await loop.run_in_executor(
                self._thread, moving.copy_step, self.throttle.step_bytes()
            )
            await asyncio.sleep(self.throttle.delay_s(step.copied))
            if step.caught_up:
                await loop.run_in_executor(self._thread, moving.log.flush)
                return

    def _still_moving(self, partition: Partition, moving: FutureLog) -> bool:
        topic, index = partition.topic, partition.index
        return (
            self._replicas.get(topic, index) is partition
            and self._logs.future_of(topic, index) is moving
            and self._logs.get(topic, index) is moving.source
        )

    async def _swap(self, partition: Partition, moving: FutureLog) -> None:
        """On the loop, so that no request sees the partition between its two logs."""
        began = self._clock.monotonic_ms()
        new_log, old = self._logs.replace_current_with_future(partition.topic, partition.index)
        partition.log = new_log
        partition.wake_waiters()
        self.completed += 1
        log.info("%s-%d: now in %s (appends held %d ms)", partition.topic, partition.index,
                 moving.log_dir.path, self._clock.monotonic_ms() - began)  # fmt: skip
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._logs.complete_move, new_log, old)


def _nothing() -> None:
    """A job for the mover thread that returns once the jobs before it are done."""
