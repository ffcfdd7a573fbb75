"""What happens to a record whose handler fails: retries with backoff, then the dead-letter topic.

Owns `RetryPolicy` (how often and how long to wait), `HandlerFailure` (an error as text, so it
crosses process boundaries) and `DeadLetterPublisher`, which copies a record to its dead-letter
topic with the error in headers and returns only once the broker acknowledged it, so the record
may then be committed. A poison record therefore costs its partition at most the retries'
backoff, never its progress. The dead-letter topic itself is at-least-once: under exactly-once
delivery a record is dead-lettered before its offset is committed with the sink, so a crash in
between dead-letters it again.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from weir.consumer.record import Record

HEADER_PREFIX = "weir.dlq."
PUBLISH_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`retries` further attempts after the first failure, waiting `backoff_ms` before the
    first retry and twice as long before each next one, at most `max_backoff_ms`."""

    retries: int = 3
    backoff_ms: int = 100
    max_backoff_ms: int = 10_000

    def delay_ms(self, retry: int) -> int:
        """How long to wait before retry number `retry` (1-based)."""
        return min(self.max_backoff_ms, self.backoff_ms << (retry - 1))


@dataclass(frozen=True, slots=True)
class HandlerFailure:
    """A handler's exception, reduced to text."""

    exception: str  # qualified class name
    message: str
    stacktrace: str

    @classmethod
    def from_exception(cls, exc: BaseException) -> HandlerFailure:
        kind = type(exc)
        return cls(
            exception=f"{kind.__module__}.{kind.__qualname__}",
            message=str(exc),
            stacktrace="".join(traceback.format_exception(exc)),
        )


class DeadLetterError(Exception):
    """The dead-letter topic did not acknowledge a record."""


def dead_letter_headers(
    record: Record, failure: HandlerFailure, attempts: int
) -> list[tuple[str, str | bytes | None]]:
    """The record's own headers, then where it came from and why it failed."""
    facts = {
        "topic": record.topic,
        "partition": str(record.partition),
        "offset": str(record.offset),
        "timestamp": str(record.timestamp),
        "attempts": str(attempts),
        "exception": failure.exception,
        "message": failure.message,
        "stacktrace": failure.stacktrace,
    }
    return [*record.headers, *((HEADER_PREFIX + k, v.encode()) for k, v in facts.items())]


class _Delivery:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, _message: Any) -> None:
        self.error = error
        self.done.set()


class DeadLetterPublisher:
    """Produces failed records to their dead-letter topic. Thread-safe: workers share it."""

    def __init__(self, config: dict[str, Any], topic_for: Callable[[str], str]) -> None:
        self._producer = Producer(config)
        self._topic_for = topic_for

    def publish(self, record: Record, failure: HandlerFailure, attempts: int) -> None:
        """Send `record` and wait for the acknowledgement; raises DeadLetterError."""
        delivery = _Delivery()
        headers = dead_letter_headers(record, failure, attempts)
        topic = self._topic_for(record.topic)
        try:
            self._producer.produce(
                topic, record.value, record.key, headers=headers, on_delivery=delivery
            )
        except (BufferError, KafkaException) as exc:
            raise DeadLetterError(f"cannot produce to {topic}: {exc}") from exc
        self._await(delivery, topic)

    def _await(self, delivery: _Delivery, topic: str) -> None:
        deadline = time.monotonic() + PUBLISH_TIMEOUT_S
        while not delivery.done.is_set() and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if not delivery.done.is_set():
            raise DeadLetterError(f"{topic} did not acknowledge within {PUBLISH_TIMEOUT_S}s")
        if delivery.error is not None:
            raise DeadLetterError(f"{topic} refused the record: {delivery.error.str()}")

    def close(self) -> None:
        """Wait for anything still in flight, then let go of the producer (and its threads)."""
        self._producer.flush(PUBLISH_TIMEOUT_S)
        del self._producer
