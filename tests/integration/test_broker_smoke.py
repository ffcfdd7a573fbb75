from __future__ import annotations

import signal

from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition


def test_a_restarted_broker_serves_what_it_acknowledged(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("smoke", key=b"%d" % i, value=b"value-%d" % i)
    assert producer.flush(30) == 0
    assert broker.stop(signal.SIGTERM) == 0
    assert (broker.data_dir / ".weir-clean-shutdown").exists()
    assert (broker.data_dir / "smoke-0" / "00000000000000000000.index").stat().st_size == 0
    broker.start()
    assert "dropped" not in broker.logs()
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("smoke", 0, 0)])
    values = []
    while len(values) < 100:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        values.append(message.value())
    consumer.close()
    assert values == [b"value-%d" % i for i in range(100)]
