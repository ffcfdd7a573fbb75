"""weir through confluent-kafka (librdkafka), one partition, acks=all with idempotence."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from . import Run, elapsed_ms, paced, payload, stamped, windows

PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "socket.nagle.disable": True,
    "queue.buffering.max.messages": 1_000_000,
    "log_level": 3,
}
PIPELINED = {
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "max.in.flight.requests.per.connection": 5,
}
CONSUMER = {
    "group.id": "bench-compare",
    "enable.auto.commit": False,
    "log_level": 3,
    # librdkafka pauses a partition for fetch.queue.backoff.ms (default 1 s) whenever
    # its local queue is full; a reader draining as fast as it can wants it at once.
    "fetch.queue.backoff.ms": 1,
    "socket.nagle.disable": True,
}


CONSUME_BATCH = 10_000


class WeirDriver:
    def __init__(self, port: int, topic_config: dict[str, str]) -> None:
        self.bootstrap = f"127.0.0.1:{port}"
        self.topic_config = topic_config
        self.settings: dict[str, Any] = {
            "client": "confluent-kafka (librdkafka)",
            "topic": {"partitions": 1, "replication.factor": 1, **topic_config},
            "producer": {
                **PRODUCER,
                "linger.ms": "0 for batch 1, 5 otherwise",
                "batch.num.messages": "the window",
                "before the clock": "one uncounted message produced and flushed (connection up, "
                "producer id assigned)",
            },
            "pipelined": {
                **PIPELINED,
                "sending": "produce() every message, serving delivery reports with poll(0) "
                "every 1,000; a full local queue (BufferError) waits in poll(0.05); then flush()",
                "in flight": "bounded by librdkafka: at most 5 produce requests per connection "
                "(the most idempotence allows), each up to batch.num.messages or batch.size "
                "bytes; the rest waits in the local queue (queue.buffering.max.messages)",
                "failures": "delivery reports with an error are counted, not retried by the bench",
                "before the clock": "one uncounted message produced and flushed (connection up, "
                "producer id assigned)",
            },
            "consumer": {**CONSUMER, "consume(num_messages)": "10,000, or what remains"},
            "latency consumer": {"fetch.wait.max.ms": 10, "fetch.min.bytes": 1},
            "latency start": "one uncounted message produced and consumed first",
        }

    def prepare(self, name: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        topic = NewTopic(name, 1, 1, config=self.topic_config)
        admin.create_topics([topic])[name].result(30)

    def drop(self, name: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        admin.delete_topics([name])[name].result(30)

    def _producer(self, batch: int) -> Producer:
        linger = 0 if batch == 1 else 5
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                **PRODUCER,
                "linger.ms": linger,
                "batch.num.messages": batch,
            }
        )

    def produce(self, name: str, count: int, size: int, batch: int, deadline: float) -> Run:
        """Windows of `batch`, each flushed before the next; one uncounted message is
        acknowledged before the clock starts (see `pipelined`)."""
        producer = self._producer(batch)
        producer.list_topics(name, 30)
        value = payload(size)
        self._first_message(producer, name, value)
        failed = [0]

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failed[0] += 1

        sent = 0
        started = time.perf_counter()
        for n in windows(count, batch, deadline):
            for _ in range(n):
                producer.produce(name, value, on_delivery=delivered)
            if producer.flush(60) != 0:
                raise KafkaException("produce window not acknowledged in 60 s")
            sent += n
        seconds = time.perf_counter() - started
        return Run(sent - failed[0], seconds, failed=failed[0])

    @staticmethod
    def _first_message(producer: Producer, name: str, value: bytes) -> None:
        producer.produce(name, value)
        if producer.flush(30) != 0:
            raise KafkaException("first message not acknowledged in 30 s")

    def pipelined(self, name: str, count: int, size: int, in_flight: int, deadline: float) -> Run:
        """Every message handed to librdkafka at once; `in_flight` is librdkafka's to bound (see
        the settings), and the run ends when flush() has every delivery report. One message,
        not counted, is produced and acknowledged before the clock starts, so that the
        connection is up and the idempotent producer has its id, as the other clients are
        connected and ready when theirs starts."""
        producer = Producer({"bootstrap.servers": self.bootstrap, **PRODUCER, **PIPELINED})
        producer.list_topics(name, 30)
        value = payload(size)
        self._first_message(producer, name, value)
        outcome = [0, 0]  # acknowledged, failed

        def delivered(error: Any, _message: Any) -> None:
            outcome[error is not None] += 1

        started = time.perf_counter()
        for n in range(count):
            if n % 1_000 == 0:
                if time.monotonic() > deadline:
                    break
                producer.poll(0)
            while True:
                try:
                    producer.produce(name, value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(60) != 0:
            raise KafkaException("pipelined produce not acknowledged in 60 s after the last send")
        seconds = time.perf_counter() - started
        return Run(outcome[0], seconds, failed=outcome[1])

    def consume(self, name: str, expected: int, deadline: float) -> Run:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, **CONSUMER})
        consumer.assign([TopicPartition(name, 0, 0)])
        got = 0
        started = time.perf_counter()
        while got < expected and time.monotonic() < deadline:
            wanted = min(CONSUME_BATCH, expected - got)  # consume() waits to fill what it asks
            for message in consumer.consume(num_messages=wanted, timeout=0.5):
                if message.error() is None:
                    got += 1
        seconds = time.perf_counter() - started
        consumer.close()
        return Run(got, seconds)

    def latency(self, name: str, rate: int, seconds: float) -> list[float]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                **CONSUMER,
                "fetch.wait.max.ms": 10,
                "fetch.min.bytes": 1,
            }
        )
        consumer.assign([TopicPartition(name, 0, 0)])
        producer = self._producer(1)
        producer.list_topics(name, 30)
        self._first_message(producer, name, stamped(200))
        ready_by = time.monotonic() + 30  # both clients connected, the consumer positioned
        while (first := consumer.poll(1)) is None or first.error() is not None:
            if time.monotonic() > ready_by:
                raise KafkaException("the first message was not consumed in 30 s")
        samples: list[float] = []
        total = int(rate * seconds)
        stop = threading.Event()

        def receive() -> None:
            while len(samples) < total and not stop.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    samples.append(elapsed_ms(message.value()))

        receiver = threading.Thread(target=receive)
        receiver.start()
        try:
            for _ in paced(rate, seconds):
                producer.produce(name, stamped(200))
                producer.flush(30)
            receiver.join(timeout=10)
        finally:
            stop.set()
            receiver.join()
            consumer.close()
        return samples
