"""The worker pool: threads that take runs from the WorkQueue and run the handler over them.

Owns `WorkerPool` and the two ways to run a handler: `ThreadRunner` calls it in the worker
thread; `ProcessRunner` sends the records to a child process (spawned, so librdkafka's threads
are never forked) for CPU-bound handlers. A worker hands its run to the runner a chunk at a
time and finishes each chunk's records as soon as it is through. A runner handles records in
order and stops at the first failure; the worker then retries the failed record with backoff
and, once the retries are spent, sends it to the dead-letter topic. A chunk of a partition that
is no longer ACTIVE is not run at all, and records not handled are not finished, so they are
never committed.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from operator import length_hint
from typing import NamedTuple, Protocol

from weir.consumer.failures import (
    DeadLetterError,
    DeadLetterPublisher,
    HandlerFailure,
    RetryPolicy,
)
from weir.consumer.handlers import Handler, load_handler
from weir.consumer.metrics import WorkerStats
from weir.consumer.partition import ACTIVE, OwnedPartition
from weir.consumer.record import Record
from weir.consumer.sink import encode_result
from weir.consumer.workqueue import Run, WorkQueue

log = logging.getLogger(__name__)

FINISH_EVERY_S = 0.01  # how long a chunk of a run may take before its records are finished


class Outcome(NamedTuple):
    handled: int  # records handled, from the start of the run
    results: list[bytes | None]  # their encoded results (exactly-once only; else empty)
    failure: HandlerFailure | None  # why the next record failed, if one did


class Runner(Protocol):
    def run(self, records: Sequence[Record], partition: OwnedPartition) -> Outcome: ...

    def close(self) -> None: ...


def handle_records(
    handler: Handler,
    records: Sequence[Record],
    keep_results: bool,
    partition: OwnedPartition | None = None,
) -> Outcome:
    """Run `handler` over `records` in order until one fails. Nothing runs when `partition` is
    no longer ACTIVE; workers hand over small chunks (see `WorkerPool._handle`), so a revoked
    partition stops within one chunk's time."""
    if partition is not None and partition.state is not ACTIVE:
        return Outcome(0, [], None)
    if keep_results:
        results: list[bytes | None] = []
        try:
            for record in records:
                results.append(encode_result(handler(record)))
        except BaseException as exc:  # a handler's SystemExit must not end its worker either
            return Outcome(len(results), results, HandlerFailure.from_exception(exc))
        return Outcome(len(results), results, None)
    remaining = iter(records)
    try:
        deque(map(handler, remaining), maxlen=0)  # the loop runs in C
    except BaseException as exc:
        # the failed record was taken from `remaining`: those before it were handled
        handled = len(records) - length_hint(remaining) - 1
        return Outcome(handled, [], HandlerFailure.from_exception(exc))
    return Outcome(len(records), [], None)


class ThreadRunner:
    def __init__(self, handler: Handler, keep_results: bool) -> None:
        self._handler = handler
        self._keep_results = keep_results

    def run(self, records: Sequence[Record], partition: OwnedPartition) -> Outcome:
        return handle_records(self._handler, records, self._keep_results, partition)

    def close(self) -> None:
        pass


_child_handler: Handler | None = None
_child_keeps_results = False


def _child_start(handler: Handler | str, keep_results: bool) -> None:
    global _child_handler, _child_keeps_results
    _child_handler = load_handler(handler) if isinstance(handler, str) else handler
    _child_keeps_results = keep_results


def _child_run(records: list[Record]) -> Outcome:
    assert _child_handler is not None
    return handle_records(_child_handler, records, _child_keeps_results)


class ProcessRunner:
    """Runs the handler in `processes` spawned children. `handler` is a MODULE:FUNCTION
    reference or a function picklable by name. A child that dies fails its chunk's first
    record (retries then find the one that kills it) and the pool is replaced."""

    def __init__(self, handler: Handler | str, keep_results: bool, processes: int) -> None:
        try:
            pickle.dumps(handler)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise ValueError(
                f"process workers need MODULE:FUNCTION or a module-level function: {exc}"
            ) from exc
        self._start_args = (handler, keep_results)
        self._processes = processes
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self._processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_child_start,
            initargs=self._start_args,
        )

    def run(self, records: Sequence[Record], partition: OwnedPartition) -> Outcome:
        """The whole of `records` goes to one child: workers send small chunks when the
        handler is slow (see WorkerPool), so the partition is checked between them."""
        pool = self._pool
        try:
            return pool.submit(_child_run, list(records)).result()
        except BrokenProcessPool as exc:
            self._replace(pool)
            return Outcome(0, [], HandlerFailure.from_exception(exc))

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                log.warning("a handler process died; starting a new pool")
                broken.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new_pool()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class WorkerPool:
    """`count` threads, each taking runs from `queue` until it closes."""

    def __init__(
        self,
        queue: WorkQueue,
        runner: Runner,
        retry: RetryPolicy,
        dead_letters: DeadLetterPublisher,
        count: int,
        max_chunk: int,
    ) -> None:
        self._queue = queue
        self._runner = runner
        self._retry = retry
        self._dead_letters = dead_letters
        self._max_chunk = max_chunk
        self.stats = [WorkerStats() for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._work, args=(stats,), name=f"weir-worker-{n}", daemon=True)
            for n, stats in enumerate(self.stats)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)

    def _work(self, stats: WorkerStats) -> None:
        chunk = 1
        while True:
            waiting = time.perf_counter()
            run = self._queue.take()
            stats.idle_s += time.perf_counter() - waiting
            if run is None:
                return
            try:
                chunk = self._handle(run, stats, chunk)
            except Exception:
                log.exception("worker failed on %s; its records stay uncommitted", run.partition)
            finally:
                self._queue.done(run)

    def _handle(self, run: Run, stats: WorkerStats, chunk: int) -> int:
        """Handle a run a chunk at a time, finishing each chunk as soon as it is through, so
        that commits follow the handler closely and a revocation loses little finished work.
        Chunks grow while the handler is fast and shrink while it is slow (see `_resize`).
        Returns the chunk size to start the next run with."""
        partition, records, done = run.partition, run.records, 0
        while done < len(records) and partition.active:
            piece = records[done : done + chunk]
            started = time.perf_counter()
            outcome = self._runner.run(piece, partition)
            partition.finish(piece[: outcome.handled], outcome.results)
            stats.handled += outcome.handled
            done += outcome.handled
            if outcome.failure is not None:
                recovered, result = self._recover(
                    partition, piece[outcome.handled], outcome.failure, stats
                )
                if not recovered:
                    break
                partition.finish([piece[outcome.handled]], [result])
                done += 1
            chunk = _resize(chunk, time.perf_counter() - started, self._max_chunk)
        return chunk

    def _recover(
        self,
        partition: OwnedPartition,
        record: Record,
        failure: HandlerFailure,
        stats: WorkerStats,
    ) -> tuple[bool, bytes | None]:
        """Retry `record`; dead-letter it when the retries are spent. (False, None) if the
        partition went away meanwhile: the record stays unfinished."""
        for retry in range(1, self._retry.retries + 1):
            stats.retries += 1
            if partition.gone.wait(self._retry.delay_ms(retry) / 1000):
                return False, None
            outcome = self._runner.run([record], partition)
            if outcome.failure is None:
                stats.handled += outcome.handled
                return outcome.handled == 1, (outcome.results or [None])[0]
            failure = outcome.failure
        log.warning(
            "%s-%d@%d failed %d times, sending it to the dead-letter topic: %s",
            record.topic, record.partition, record.offset, self._retry.retries + 1,
            failure.message,
        )  # fmt: skip
        return self._dead_letter(partition, record, failure, stats), None

    def _dead_letter(
        self,
        partition: OwnedPartition,
        record: Record,
        failure: HandlerFailure,
        stats: WorkerStats,
    ) -> bool:
        while True:
            try:
                self._dead_letters.publish(record, failure, self._retry.retries + 1)
                stats.dead_lettered += 1
                return True
            except DeadLetterError as exc:
                log.error(
                    "cannot dead-letter %s-%d@%d: %s",
                    record.topic, record.partition, record.offset, exc,
                )  # fmt: skip
            if partition.gone.wait(self._retry.max_backoff_ms / 1000):
                return False


def _resize(chunk: int, elapsed_s: float, largest: int) -> int:
    """Double a chunk that took under half of FINISH_EVERY_S, halve one that took longer."""
    if elapsed_s < FINISH_EVERY_S / 2:
        return min(chunk * 2, largest)
    if elapsed_s > FINISH_EVERY_S:
        return max(1, chunk // 2)
    return chunk
