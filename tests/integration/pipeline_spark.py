"""Helpers for the Spark pipeline tests: one local SparkSession, demo lines, topics."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import IN_CI
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

DEMO_DATA = Path(__file__).resolve().parents[2] / "src" / "weir" / "cli" / "demo_data"


def require_spark() -> None:
    """Skips without Java or pyspark locally; fails without them in CI."""
    missing = None
    if shutil.which("java") is None:
        missing = "java is not installed"
    else:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            missing = "pyspark is not installed"
    if missing is not None:
        if IN_CI:
            pytest.fail(f"{missing} (the Spark pipeline tests need it)")
        pytest.skip(missing)


def local_session() -> Iterator[Any]:
    require_spark()
    from weir.pipeline.session import weir_session

    spark = weir_session(
        master="local[2]",
        app_name="weir pipeline tests",
        config={
            "spark.driver.memory": "1g",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Produces ``records`` (keyword arguments of Producer.produce) and returns their
    (partition, offset) in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    placed: dict[int, tuple[int, int]] = {}

    def delivered(index: int) -> Any:
        def report(error: Any, message: Any) -> None:
            assert error is None, error
            placed[index] = (message.partition(), message.offset())

        return report

    for i, record in enumerate(records):
        producer.produce(topic, on_delivery=delivered(i), **record)
        producer.poll(0)
    assert producer.flush(30) == 0
    return [placed[i] for i in range(len(records))]


def demo_lines() -> dict[str, list[str]]:
    """The shipped loghub samples: source name -> lines."""
    lines: dict[str, list[str]] = {}
    for path in sorted(DEMO_DATA.glob("*.log.gz")):
        source = path.name.split("_", 1)[0].lower()
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            lines[source] = text.read().splitlines()
    return lines
