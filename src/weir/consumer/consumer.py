"""`LogConsumer`: a user's handler run over topics at scale, with back-pressure and honest
delivery guarantees (SEEDS.md §3).

Owns the wiring: fetcher threads (each one group member) fill a bounded `WorkQueue`; a
`WorkerPool` of threads (or processes) runs the handler; each fetcher commits its partitions'
finished prefix to Kafka (at-least-once) or, with the results, to a transactional sink
(exactly-once); failed records are retried and then dead-lettered. `run` blocks until `stop`.
It speaks only the Kafka protocol through confluent-kafka, so any Kafka cluster will do.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable

from confluent_kafka import Consumer

from weir.clock import Clock, SystemClock
from weir.consumer.commit import Committer, KafkaCommitter, SinkCommitter, TransactionCommitter
from weir.consumer.failures import DeadLetterPublisher
from weir.consumer.fetcher import Fetcher
from weir.consumer.handlers import Handler, load_handler
from weir.consumer.metrics import FetcherStats, MetricsEndpoint, Snapshot, Throughput
from weir.consumer.settings import ConsumerSettings, Delivery, WorkerKind
from weir.consumer.sink import TransactionalSink
from weir.consumer.workers import ProcessRunner, Runner, ThreadRunner, WorkerPool
from weir.consumer.workqueue import WorkQueue

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 1.0
SHUTDOWN_GRACE_S = 5.0  # beyond the revocation timeout, for threads to wind down

SinkFactory = Callable[[], TransactionalSink]
GC_THRESHOLDS = (50_000, 20, 100)  # the interpreter's defaults are (700, 10, 10)


class ConsumerFailedError(Exception):
    """A fetcher stopped on an error it cannot recover from."""


class LogConsumer:
    """Runs `handler` over `settings.topics` in group `settings.group_id`.

    `handler` is a function or a MODULE:FUNCTION reference (process workers need a reference
    or a function picklable by name). Exactly-once needs `sink_factory` (each fetcher opens
    its own sink on its own thread) or `output_topic`: results are then written there in Kafka
    transactions that also commit the input offsets.
    """

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: Handler | str,
        *,
        sink_factory: SinkFactory | None = None,
        output_topic: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        if sink_factory is not None and output_topic is not None:
            raise ValueError("results go to a transactional sink or to an output topic, not both")
        destination = sink_factory is not None or output_topic is not None
        if (settings.delivery is Delivery.EXACTLY_ONCE) != destination:
            raise ValueError(
                "a transactional sink or an output topic goes with exactly-once delivery, and only"
            )
        self.settings = settings
        self._sink_factory = sink_factory
        self._output_topic = output_topic
        self._clock = clock or SystemClock()
        self._queue = WorkQueue(settings.ordering, settings.workers, settings.max_run)
        self._runner = self._make_runner(handler)
        self._dead_letters = DeadLetterPublisher(
            settings.producer_config(), settings.dead_letter_topic_for
        )
        self._pool = WorkerPool(
            self._queue,
            self._runner,
            settings.retry,
            self._dead_letters,
            settings.workers,
            max_chunk=settings.max_run,
        )
        self._fetchers = [
            Fetcher(settings, self._queue, self._make_committer, self._clock)
            for _ in range(settings.fetchers)
        ]
        self._stop = threading.Event()
        self._throughput = Throughput()

    def _make_runner(self, handler: Handler | str) -> Runner:
        keep_results = self.settings.delivery is Delivery.EXACTLY_ONCE
        if self.settings.worker_kind is WorkerKind.PROCESS:
            return ProcessRunner(handler, keep_results, self.settings.workers)
        function = load_handler(handler) if isinstance(handler, str) else handler
        return ThreadRunner(function, keep_results)

    def _make_committer(self, consumer: Consumer, stats: FetcherStats) -> Committer:
        if self._output_topic is not None:
            return TransactionCommitter(
                consumer, stats, self._output_topic, self.settings.producer_config()
            )
        if self._sink_factory is None:
            return KafkaCommitter(consumer, stats)
        return SinkCommitter(self._sink_factory(), self.settings.group_id, consumer, stats)

    def run(self) -> None:
        """Consume until `stop` is called; raises ConsumerFailedError if a fetcher fails."""
        threads = [
            threading.Thread(target=fetcher.run, name=f"weir-fetcher-{n}", daemon=True)
            for n, fetcher in enumerate(self._fetchers)
        ]
        self._pool.start()
        for thread in threads:
            thread.start()
        try:
            self._watch(threads)
        finally:
            self._shut_down(threads)
        failed = [f.error for f in self._fetchers if f.error is not None]
        if failed:
            raise ConsumerFailedError(str(failed[0])) from failed[0]

    def _watch(self, threads: list[threading.Thread]) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self._throughput.sample(self._clock.monotonic_ms() / 1000, self.handled)
            if not all(thread.is_alive() for thread in threads):
                log.error("a fetcher stopped; shutting down")
                return

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        """Fetchers release their partitions (waiting for running work), then the workers go."""
        for fetcher in self._fetchers:
            fetcher.stop()
        deadline_s = self.settings.revocation_timeout_ms / 1000 + SHUTDOWN_GRACE_S
        for thread in threads:
            thread.join(deadline_s)
        self._queue.close()
        self._pool.join(SHUTDOWN_GRACE_S)
        self._runner.close()
        self._dead_letters.close()

    def stop(self) -> None:
        """Ask `run` to return; safe from any thread and from signal handlers."""
        self._stop.set()

    @property
    def handled(self) -> int:
        return sum(stats.handled for stats in self._pool.stats)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            group=self.settings.group_id,
            fetchers=[fetcher.stats for fetcher in self._fetchers],
            workers=self._pool.stats,
            queued=self._queue.queued,
            buffered=self._queue.buffered,
            max_buffered=self.settings.max_buffered_records,
            throughput=self._throughput.rate,
        )

    def serve_metrics(self, host: str, port: int) -> MetricsEndpoint:
        """Start the Prometheus endpoint (port 0: any free port; see `.address`)."""
        return MetricsEndpoint(self.snapshot, host, port)


def tune_gc() -> None:
    """Tune the garbage collector for a process that is mostly a LogConsumer (`weir consumer
    run` does this; a library user decides for their own process). Every fetched record is a
    few container objects that live until a worker is through with it, so with the default
    thresholds the collector keeps re-examining records in flight and, in the oldest
    generation, everything the program ever imported: a third of the time at full speed. This
    freezes what exists now out of the collector's sight and collects young objects less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
