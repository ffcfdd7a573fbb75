"""A consume-transform-produce loop with Kafka transactions, run as its own process by
test_exactly_once.py: reads `INPUT` in consumer group GROUP (read_committed), writes each value
upper-cased to `OUTPUT` and commits the input offsets in the same transaction. It stops once the
group has committed every input record (exit 0) or at the first fatal error (exit 1), so a
test can kill it with -9 at any moment and start it again.

Usage: python eos_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID TOTAL [BATCH]
(BATCH: the most records per transaction, default 50)
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

TIMEOUT = 30
BATCH = 50


def main() -> int:
    bootstrap, source, sink, group, transactional_id, total = sys.argv[1:7]
    batch = int(sys.argv[7]) if len(sys.argv) > 7 else BATCH
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 0})  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10_000, "log_level": 0})  # fmt: skip
    producer.init_transactions(TIMEOUT)
    consumer.subscribe([source])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _done(consumer, source, int(total)):
            return 0
        messages = [m for m in consumer.consume(batch, timeout=0.5) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        try:
            for message in messages:
                producer.produce(sink, message.value().upper(), key=message.key(),
                                 partition=message.partition())  # fmt: skip
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                TIMEOUT,
            )
            producer.commit_transaction(TIMEOUT)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TIMEOUT)
                _rewind(consumer)
                continue
            print(f"eos processor: {error}", file=sys.stderr)
            return 1
    return 1


def _done(consumer: Consumer, source: str, total: int) -> bool:
    assignment = consumer.assignment()
    if not assignment:
        return False
    committed = consumer.committed(assignment, TIMEOUT)
    return sum(max(tp.offset, 0) for tp in committed) >= total


def _rewind(consumer: Consumer) -> None:
    """Back to the committed offsets: the aborted transaction's input is read again."""
    for tp in consumer.committed(consumer.assignment(), TIMEOUT):
        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))


if __name__ == "__main__":
    sys.exit(main())
