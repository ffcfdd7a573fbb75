"""`--bootstrap-server` (and $WEIR_BOOTSTRAP) as a user gives it to the console commands: a
comma-separated list, tried in turn (weir txn too); an address where nothing listens reported
within seconds in one line naming it, by every client command; a broker merely slow to answer
waited for, not reported dead."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess, table_rows, weir
from confluent_kafka import Producer

TOPIC = "bootstrap-orders"
TRANSACTIONAL_ID = "an-order-service-whose-transactional-id-is-longer-than-forty-characters"
TIMEOUT = 30
#: a report of an address where nothing listens must come well before librdkafka's 30 s
FAST_S = 10
#: how long the slow relay holds each connection before the broker sees it
SLOW_S = 4.0


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


CLIENT_COMMANDS = [
    ("topic", "list"),
    ("topic", "describe"),
    ("topic", "create", "t"),
    ("group", "list"),
    ("group", "describe", "g"),
    ("group", "lag", "g"),
    ("acl", "list"),
    ("user", "list"),
    ("txn", "list"),
    ("cluster", "elect-leaders", "--election-type", "preferred", "--all-topic-partitions"),
    ("cluster", "roll"),
    ("produce", "t"),
    ("consume", "t"),
]


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=" ".join)
def test_an_address_where_nothing_listens_is_reported_at_once(command: tuple[str, ...]) -> None:
    nothing = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    done = weir(*command, "--bootstrap-server", nothing, input="")
    took = time.monotonic() - started
    assert done.returncode == 1
    assert done.stderr == f"weir: {nothing}: cannot connect: Connection refused\n"
    assert took < FAST_S


class SlowRelay:
    """A broker slow to answer: a TCP relay to `target` that holds each connection for
    `delay` seconds before passing its bytes on, either way."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.port = int(self.server.getsockname()[1])
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._accept)]
        self.threads[0].start()

    def close(self) -> None:
        self.stopping.set()
        for thread in list(self.threads):
            thread.join(TIMEOUT)
        self.server.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            relay = threading.Thread(target=self._relay, args=(client,))
            self.threads.append(relay)
            relay.start()

    def _relay(self, client: socket.socket) -> None:
        with client:
            if self.stopping.wait(self.delay):
                return
            with socket.create_connection(self.target) as upstream:
                back = threading.Thread(target=_pass_on, args=(upstream, client, self.stopping))
                back.start()
                _pass_on(client, upstream, self.stopping)
                back.join()


def _pass_on(source: socket.socket, sink: socket.socket, stopping: threading.Event) -> None:
    source.settimeout(0.1)
    while not stopping.is_set():
        try:
            data = source.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not data:
            break
        sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_RDWR)


@pytest.mark.parametrize("with_refusal", [False, True], ids=["alone", "after-a-refusal"])
def test_a_broker_slow_to_answer_is_waited_for(broker: BrokerProcess, with_refusal: bool) -> None:
    relay = SlowRelay(("127.0.0.1", broker.port), SLOW_S)
    try:
        servers = [f"127.0.0.1:{closed_port()}"] * with_refusal + [f"127.0.0.1:{relay.port}"]
        started = time.monotonic()
        listed = weir("topic", "list", "--bootstrap-server", ",".join(servers))
        took = time.monotonic() - started
    finally:
        relay.close()
    assert listed.returncode == 0, listed.stderr
    assert TOPIC in listed.stdout.split()
    assert took >= SLOW_S
