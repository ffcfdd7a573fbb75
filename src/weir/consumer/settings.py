"""How a `LogConsumer` runs: ordering, delivery mode, worker kind, bounds and client settings.

Owns `ConsumerSettings`, the enums it is made of, and the librdkafka configuration derived
from it. Nothing here starts threads or talks to Kafka.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from weir.consumer.failures import RetryPolicy
from weir.protocol.client_settings import client_settings

#: librdkafka's own log lines (errors only: log_level 3) go through Python logging, not stderr
CLIENT_LOG = logging.getLogger("weir.consumer.librdkafka")
MIN_FETCH_MAX_BYTES = 1_000_000  # librdkafka: fetch.max.bytes >= message.max.bytes (1 MB)
RESPONSE_OVERHEAD = 512  # librdkafka: receive.message.max.bytes >= fetch.max.bytes + 512
# librdkafka waits this long before fetching again once its prefetch queue is full (default
# 1000 ms); with a small prefetch bound the queue is full often, and a second is a long stall.
FETCH_QUEUE_BACKOFF_MS = 10


class Ordering(enum.Enum):
    """Which records a worker must handle one after the other."""

    PARTITION = "partition"  # a partition's records in offset order (the default)
    KEY = "key"  # records with the same key in offset order; keyless records in any order
    UNORDERED = "unordered"  # any record on any worker at any time


class Delivery(enum.Enum):
    AT_LEAST_ONCE = "at-least-once"  # offsets committed to Kafka after the handler finished
    EXACTLY_ONCE = "exactly-once"  # results and offsets committed together in a sink


class WorkerKind(enum.Enum):
    THREAD = "thread"  # handlers that wait (I/O) or release the GIL
    PROCESS = "process"  # CPU-bound handlers; records and results are pickled


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSettings:
    """Everything a `LogConsumer` needs besides the handler and the sink.

    Memory bound: at most `max_buffered_records` records are fetched but unfinished (queued or
    being handled, or waiting for an exactly-once commit), and librdkafka prefetches at most
    about twice `max_prefetch_bytes`. A group without committed offsets starts at the earliest
    records (`auto.offset.reset`; `client_config` overrides any librdkafka setting).

    `client_config` carries the security settings too, librdkafka's names (`security.protocol`,
    `ssl.ca.location`, `sasl.mechanism`, `sasl.username`, `sasl.password`, ...; a Java client's
    `sasl.jaas.config` is read as well, see `weir.protocol.client_settings`): the consumers, the
    dead-letter producer, the lag reader and the transactional producer all use them.
    """

    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...]
    workers: int = 4
    worker_kind: WorkerKind = WorkerKind.THREAD
    ordering: Ordering = Ordering.PARTITION
    delivery: Delivery = Delivery.AT_LEAST_ONCE
    fetchers: int = 1  # consumer threads, each one member of the group
    max_buffered_records: int = 1000
    max_prefetch_bytes: int = 4 * 1024 * 1024
    fetch_batch: int = 500  # records taken from librdkafka per poll at most
    max_run: int = 500  # records a worker takes from the queue at once at most
    commit_interval_ms: int = 1000
    revocation_timeout_ms: int = 10_000  # how long revoked partitions' work may still run
    poll_timeout_ms: int = 100
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    dead_letter_topic: str | None = None  # default: "<topic>.dlq" for each topic
    client_config: Mapping[str, Any] = field(default_factory=dict)  # librdkafka overrides

    def __post_init__(self) -> None:
        if not self.topics:
            raise ValueError("at least one topic is needed")
        for name in ("workers", "fetchers", "max_buffered_records", "fetch_batch", "max_run"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        # checked and translated once (a ClientSettingsError is a ValueError)
        object.__setattr__(self, "client_config", client_settings(self.client_config))

    def dead_letter_topic_for(self, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}.dlq"

    def consumer_config(self) -> dict[str, Any]:
        """librdkafka settings for a fetcher's Consumer: manual commits of explicit offsets, a
        prefetch queue bounded by `max_prefetch_bytes`, and the caller's overrides on top."""
        fetch_max = max(self.max_prefetch_bytes, MIN_FETCH_MAX_BYTES)
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "queued.max.messages.kbytes": max(1, self.max_prefetch_bytes // 1024),
            "fetch.max.bytes": fetch_max,
            "max.partition.fetch.bytes": min(fetch_max, 1024 * 1024),
            "receive.message.max.bytes": fetch_max + RESPONSE_OVERHEAD,
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            "log_level": 3,
            "logger": CLIENT_LOG,
            **self.client_config,
        }

    def admin_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "log_level": 3,
            "logger": CLIENT_LOG,
            **self.client_config,
        }

    def producer_config(self) -> dict[str, Any]:
        """librdkafka settings for the dead-letter producer; the overrides apply here too (so
        security settings reach it), librdkafka ignores the consumer-only ones."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "log_level": 3,
            "logger": CLIENT_LOG,
            **self.client_config,
        }
