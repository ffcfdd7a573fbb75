"""Consumer settings: validation and the librdkafka configuration derived from them."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from weir.consumer.settings import ConsumerSettings


def settings(**overrides: object) -> ConsumerSettings:
    return ConsumerSettings(bootstrap_servers="127.0.0.1:1", group_id="g", topics=("t",),
                            **overrides)  # type: ignore[arg-type]  # fmt: skip


def test_commits_are_manual_and_prefetch_is_bounded() -> None:
    config = settings(max_prefetch_bytes=2 * 1024 * 1024).consumer_config()
    assert config["enable.auto.commit"] is False
    assert config["enable.auto.offset.store"] is False
    assert config["queued.max.messages.kbytes"] == 2048
    assert config["fetch.max.bytes"] == 2 * 1024 * 1024
    Consumer(config).close()  # librdkafka accepts it


def test_a_tiny_prefetch_bound_still_makes_a_valid_configuration() -> None:
    config = settings(max_prefetch_bytes=64 * 1024).consumer_config()
    assert config["queued.max.messages.kbytes"] == 64
    Consumer(config).close()


def test_client_overrides_win() -> None:
    config = settings(client_config={"session.timeout.ms": "6000", "auto.offset.reset": "latest"})
    assert config.consumer_config()["auto.offset.reset"] == "latest"
    assert config.producer_config()["session.timeout.ms"] == "6000"


def test_dead_letter_topic_defaults_to_one_per_topic() -> None:
    assert settings().dead_letter_topic_for("orders") == "orders.dlq"
    assert settings(dead_letter_topic="poison").dead_letter_topic_for("orders") == "poison"


@pytest.mark.parametrize("field", ["workers", "fetchers", "max_buffered_records", "max_run"])
def test_counts_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be at least 1"):
        settings(**{field: 0})


def test_a_topic_is_needed() -> None:
    with pytest.raises(ValueError, match="at least one topic"):
        ConsumerSettings(bootstrap_servers="b", group_id="g", topics=())
