"""weir.consumer: the consumer framework (SEEDS.md §3's LogConsumer) on confluent-kafka.

Fetching is decoupled from processing by a bounded queue with pause/resume back-pressure; a
pool of worker threads or processes runs the handler in per-partition, per-key or no order;
per-partition offset trackers commit only the contiguous finished prefix; failed records are
retried, then dead-lettered; exactly-once delivery stores results and offsets in one
transaction of a sink (SQLite and PostgreSQL ship). A client layer: it never imports the
broker, storage or cluster packages.
"""

from weir.consumer.consumer import ConsumerFailedError, LogConsumer, tune_gc
from weir.consumer.failures import RetryPolicy
from weir.consumer.handlers import Handler, HandlerNotFoundError, load_handler
from weir.consumer.record import ConsumedRecord, Record
from weir.consumer.settings import ConsumerSettings, Delivery, Ordering, WorkerKind
from weir.consumer.sink import OffsetAdvance, ResultRow, SinkFencedError, TransactionalSink

__all__ = [
    "ConsumedRecord",
    "ConsumerFailedError",
    "ConsumerSettings",
    "Delivery",
    "Handler",
    "HandlerNotFoundError",
    "LogConsumer",
    "OffsetAdvance",
    "Ordering",
    "Record",
    "ResultRow",
    "RetryPolicy",
    "SinkFencedError",
    "TransactionalSink",
    "WorkerKind",
    "load_handler",
    "tune_gc",
]
