"""The console commands' one-line report of a confluent-kafka failure, fatal errors included
(confluent-kafka raises those as a SystemError caused by the KafkaException)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from weir.cli.kafka_errors import fail, kafka_error

FATAL = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Failed to acquire idempotence PID",
                   fatal=True)  # fmt: skip


def as_confluent_kafka_raises_it_from_a_callback() -> SystemError:
    try:
        try:
            raise KafkaException(FATAL)
        except KafkaException as exc:
            raise SystemError("<method 'append'> returned a result with an exception set") from exc
    except SystemError as raised:
        return raised


def test_a_fatal_error_is_one_line_with_kafkas_name(capsys: pytest.CaptureFixture[str]) -> None:
    raised = as_confluent_kafka_raises_it_from_a_callback()
    assert kafka_error(raised) is not None and kafka_error(raised).fatal()  # type: ignore[union-attr]
    assert fail(raised) == 1
    assert capsys.readouterr().err == (
        "weir: CLUSTER_AUTHORIZATION_FAILED: Failed to acquire idempotence PID\n"
    )


def test_other_errors_are_not_taken_for_kafkas() -> None:
    assert kafka_error(SystemError("a real bug")) is None
    assert kafka_error(ValueError("x")) is None
    unknown = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic"))
    assert kafka_error(unknown) is not None
