"""`--bootstrap-server` (and $WEIR_BOOTSTRAP) as a user gives it to the console commands: a
comma-separated list, tried in turn (weir txn too)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, table_rows, weir
from confluent_kafka import Producer

TOPIC = "bootstrap-orders"
TRANSACTIONAL_ID = "an-order-service-whose-transactional-id-is-longer-than-forty-characters"
TIMEOUT = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("bootstrap") / "broker")
    process.start()
    created = weir("topic", "create", TOPIC, "--bootstrap-server", process.bootstrap)
    assert created.returncode == 0, created.stderr
    yield process
    if process.process is not None:
        process.stop()


@pytest.fixture(scope="module")
def open_transaction(broker: BrokerProcess) -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                         "transactional.id": TRANSACTIONAL_ID})  # fmt: skip
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(TOPIC, b"order 1")
    assert producer.flush(TIMEOUT) == 0
    yield producer
    producer.abort_transaction(TIMEOUT)


def closed_port() -> int:
    """A port of 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_txn_commands_take_a_list_of_bootstrap_servers(
    broker: BrokerProcess, open_transaction: Producer
) -> None:
    nothing = f"127.0.0.1:{closed_port()}"
    listed = weir("txn", "list", "--bootstrap-server", f"{nothing},{broker.bootstrap}")
    assert listed.returncode == 0, listed.stderr
    [row] = table_rows(listed.stdout, "TransactionalId")
    assert (row["TransactionalId"], row["TransactionState"]) == (TRANSACTIONAL_ID, "Ongoing")

    described = weir("txn", "describe", "--transactional-id", TRANSACTIONAL_ID,
                     env={"WEIR_BOOTSTRAP": f"{nothing}, {broker.bootstrap}"})  # fmt: skip
    assert described.returncode == 0, described.stderr
    fields = dict(line.split(None, 1) for line in described.stdout.splitlines())
    assert (fields["TransactionState"], fields["TopicPartitions"]) == ("Ongoing", f"{TOPIC}-0")

    hanging = weir("txn", "find-hanging", "--topic", TOPIC, "--bootstrap-server",
                   f"{broker.bootstrap},{nothing}")  # fmt: skip
    assert hanging.returncode == 0, hanging.stderr
    assert table_rows(hanging.stdout, "Topic") == []  # its coordinator knows it


def test_txn_names_every_server_of_the_list_it_could_not_reach() -> None:
    first, second = f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"
    done = weir("txn", "list", "--bootstrap-server", f"{first},{second}")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and first in done.stderr and second in done.stderr
