"""``df.write.format("weir")`` and ``df.writeStream.format("weir")``: rows produced to topics.

The sink writes columns ``value`` (required), ``key``, ``headers``, ``topic`` (unless the
``topic`` option is set) and ``partition`` with an idempotent producer and acks=all; each Spark
task flushes before it reports success, so a finished write, or a finished micro-batch, is
durable. Like Spark's Kafka sink it is at-least-once: a retried task, or a micro-batch that
Spark runs again after a restart, may write its records twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from weir.pipeline.offsets import OffsetOptionError
from weir.pipeline.options import client_options

FLUSH_TIMEOUT_S = 120


@dataclass
class ProducedCount(WriterCommitMessage):
    records: int


class RowProducer:
    """What the batch and the streaming writer share: options checked on the driver, and a
    task's produce of its Arrow batches."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.client = client_options(options)
        self.topic = next((v for k, v in options.items() if k.lower() == "topic"), None)
        names = set(schema.fieldNames())
        if "value" not in names:
            raise OffsetOptionError("writing to weir needs a value column")
        if self.topic is None and "topic" not in names:
            raise OffsetOptionError("writing to weir needs a topic column or the topic option")

    def produce_all(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        producer = Producer({"acks": "all", "enable.idempotence": True, **self.client})
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: Any) -> None:
            if error is not None:
                failures.append(error)

        count = 0
        for batch in iterator:
            for row in _rows(batch, self.topic):
                _produce(producer, row, delivered)
                count += 1
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        if failures or remaining:
            raise KafkaException(failures[0] if failures else KafkaError(KafkaError._TIMED_OUT))
        return ProducedCount(records=count)


class WeirWriter(DataSourceArrowWriter):
    """Produces each row with an idempotent, acks=all producer per task."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.producer = RowProducer(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        return self.producer.produce_all(iterator)


class WeirStreamWriter(DataSourceStreamArrowWriter):
    """Produces each micro-batch's rows as ``WeirWriter`` does; a micro-batch commits once
    every task has flushed."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.producer = RowProducer(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ProducedCount:
        return self.producer.produce_all(iterator)


def _rows(batch: pa.RecordBatch, topic: str | None) -> Iterator[dict[str, Any]]:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    size = batch.num_rows
    for i in range(size):
        yield {
            "topic": topic if topic is not None else columns["topic"][i],
            "value": _bytes(columns["value"][i]),
            "key": _bytes(columns["key"][i]) if "key" in columns else None,
            "partition": columns["partition"][i] if "partition" in columns else None,
            "headers": _header_list(columns["headers"][i]) if "headers" in columns else None,
        }


def _produce(producer: Producer, row: dict[str, Any], delivered: Any) -> None:
    kwargs = {k: v for k, v in row.items() if v is not None and k != "topic"}
    while True:
        try:
            producer.produce(row["topic"], on_delivery=delivered, **kwargs)
            break
        except BufferError:
            producer.poll(0.1)
    producer.poll(0)


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _header_list(headers: list[dict[str, Any]] | None) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    return [(h["key"], _bytes(h["value"])) for h in headers]
