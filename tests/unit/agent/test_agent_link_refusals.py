"""The link's report of the cluster refusing the agent: the error named with Kafka's name,
logged once however often librdkafka retries, librdkafka's own repeats held back meanwhile,
and cleared when the cluster accepts (an answer for credentials, a delivery for ACLs)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from weir.agent.link import LIBRDKAFKA_LOG, KafkaLink

REFUSED = "the cluster refuses the agent"


@pytest.fixture
def link() -> Iterator[KafkaLink]:
    made = KafkaLink("127.0.0.1:9", {"log_level": 0})  # nothing listens: no answer ever
    yield made
    made.close()


def test_an_authentication_failure_is_logged_once_and_cleared_by_an_answer(
    link: KafkaLink, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    failure = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: bad password")
    for _ in range(5):
        link._on_error(failure)
    assert link.last_error == "_AUTHENTICATION: SASL authentication error: bad password"
    assert caplog.text.count(REFUSED) == 1
    assert not LIBRDKAFKA_LOG.filter(logging.makeLogRecord({"msg": "FAIL again"}))
    link.reachable = True
    assert link.last_error is None
    assert LIBRDKAFKA_LOG.filter(logging.makeLogRecord({"msg": "FAIL again"}))
    assert caplog.text.count("accepts the agent again") == 1


def test_an_authorization_failure_has_kafkas_name_and_outlasts_metadata_answers(
    link: KafkaLink, caplog: pytest.LogCaptureFixture
) -> None:
    link._on_error(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "not a refusal"))
    assert link.last_error is None
    link._note(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: no"))
    link.reachable = True  # metadata answered, the ACLs may still refuse writes
    assert link.last_error == "TOPIC_AUTHORIZATION_FAILED: Broker: no"
    link._note(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Broker: no"))
    link._note(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: no"))
    assert caplog.text.count(REFUSED) == 2  # each kind of refusal is worth one line
