"""How the console commands report a Kafka error: one line on stderr naming Kafka's error
(`weir: CLUSTER_AUTHORIZATION_FAILED: ...`), exit status 1, no traceback.

This module owns the translation of confluent-kafka's failures at the command boundary,
including one of its quirks: when librdkafka raises a fatal error (an idempotent producer
refused by the broker) while delivery callbacks are being served, confluent-kafka raises a
SystemError whose cause is the KafkaException. It also owns where librdkafka's own log lines
go: nowhere unless `weir -v`, since the command reports the error itself.
"""

from __future__ import annotations

import logging
import sys

from confluent_kafka import KafkaError, KafkaException

from weir.protocol.errors import client_error_name

#: librdkafka's log lines, shown only with `weir -v`
LIBRDKAFKA_LOG = logging.getLogger("weir.librdkafka")


def error_name(error: KafkaError) -> str:
    """Kafka's name of the error (librdkafka's for its local errors)."""
    return client_error_name(error.code(), error.name())


def error_line(error: KafkaError) -> str:
    """`NAME: reason`, e.g. `TOPIC_AUTHORIZATION_FAILED: Broker: Topic authorization failed`."""
    return f"{error_name(error)}: {error.str()}"


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError an exception from confluent-kafka carries, or None if it is not one."""
    if isinstance(exc, KafkaException):
        first = exc.args[0] if exc.args else None
        return first if isinstance(first, KafkaError) else None
    if isinstance(exc, SystemError) and exc.__cause__ is not None:
        return kafka_error(exc.__cause__)
    return None


def fail(exc: BaseException) -> int:
    """Print the one-line report of a confluent-kafka failure; the exit status (1)."""
    error = kafka_error(exc)
    print(f"weir: {error_line(error) if error is not None else exc}", file=sys.stderr)
    return 1


def librdkafka_logger() -> logging.Logger:
    """The logger given to every client (`logger`): silent unless debug logging is on, so a
    fatal error is reported once, by the command, rather than also by librdkafka."""
    verbose = logging.getLogger().isEnabledFor(logging.DEBUG)
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)
    return LIBRDKAFKA_LOG
