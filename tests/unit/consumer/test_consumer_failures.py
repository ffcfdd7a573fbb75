"""Retry backoff and what a dead-lettered record carries."""

from __future__ import annotations

import pytest
from consumer_unit_records import record

from weir.consumer.failures import HandlerFailure, RetryPolicy, dead_letter_headers


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(retries=6, backoff_ms=100, max_backoff_ms=1000)
    assert [policy.delay_ms(n) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]


def poison() -> None:
    raise ValueError("no such customer: 42")


def test_a_failure_keeps_the_exception_class_message_and_stack() -> None:
    with pytest.raises(ValueError) as raised:
        poison()
    failure = HandlerFailure.from_exception(raised.value)
    assert failure.exception == "builtins.ValueError"
    assert failure.message == "no such customer: 42"
    assert "in poison" in failure.stacktrace


def test_dead_letter_headers_keep_the_originals_and_say_where_and_why() -> None:
    original = record(3, 17)._replace(headers=[("trace", b"abc"), ("empty", None)])
    failure = HandlerFailure("mod.Boom", "it broke", "Traceback ...")
    headers = dead_letter_headers(original, failure, attempts=4)
    assert headers[:2] == [("trace", b"abc"), ("empty", None)]
    assert dict(headers[2:]) == {
        "weir.dlq.topic": b"t",
        "weir.dlq.partition": b"3",
        "weir.dlq.offset": b"17",
        "weir.dlq.timestamp": b"1017",
        "weir.dlq.attempts": b"4",
        "weir.dlq.exception": b"mod.Boom",
        "weir.dlq.message": b"it broke",
        "weir.dlq.stacktrace": b"Traceback ...",
    }
