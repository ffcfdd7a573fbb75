"""A `weir agent start` child process for integration tests, plus topic-reading helpers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from weir.agent.client import AgentClient
from weir.agent.event import Event
from weir.agent.exactly_once import IDENTITY_FILE
from weir.protocol.event_headers import AGENT_HEADER, POSITION_HEADER


class AgentProcess:
    """One agent child; `kill()` is kill -9, `start()` again reuses the spool directory."""

    def __init__(
        self, directory: Path, bootstrap: str, config: str = "", args: tuple[str, ...] = ()
    ) -> None:
        self.directory = directory
        self.args = args
        self.socket = directory / "agent.sock"
        self.bootstrap = bootstrap
        self.config = directory / "agent.toml"
        directory.mkdir(parents=True, exist_ok=True)
        self.config.write_text(config)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        ready = self.directory / "ready"
        ready.unlink(missing_ok=True)
        command = [sys.executable, "-m", "weir.cli.main", "agent", "start",
                   "--config", str(self.config), "--socket", str(self.socket),
                   "--spool", str(self.directory / "spool"),
                   "--bootstrap-server", self.bootstrap, "--ready-file", str(ready),
                   *self.args]  # fmt: skip
        log = open(self.directory / "agent.log", "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.directory / "agent.log").read_text())
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            self.process.send_signal(sig)
            self.process.wait(60)
            self.process = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def status(self) -> dict[str, Any]:
        with AgentClient(self.socket) as client:
            return client.status()

    def log(self) -> str:
        return (self.directory / "agent.log").read_text()

    def resumes(self) -> Counter[str]:
        """How the batches in flight when the agent died turned out, as its restarts logged
        them: committed (skipped) or aborted (sent again)."""
        return Counter(re.findall(r"in flight before the resume was (\w+)", self.log()))

    def metrics_url(self) -> str:
        """The last metrics address the agent printed (it prints one per start)."""
        log = (self.directory / "agent.log").read_text()
        return re.findall(r"weir agent metrics on (\S+)", log)[-1]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout: float = 60,
    *,
    distinct: bool = False,
    covering: Collection[bytes] = (),
) -> list[tuple[int, bytes | None, bytes]]:
    """(partition, key, value) of every record, in offset order per partition.

    Reads until `expected` records arrived (`distinct`: records with different values) and every
    value in `covering` is among them, or until `timeout`.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "agent-test",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[tuple[int, bytes | None, bytes]] = []
    values: set[bytes] = set()
    wanted = set(covering)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (
        (len(values) if distinct else len(records)) < expected or not wanted <= values
    ):
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                records.append((message.partition(), message.key(), message.value()))
                values.add(message.value())
    consumer.close()
    return records


def read_committed(
    bootstrap: str, topic: str, partitions: int, timeout: float = 60
) -> dict[int, list[tuple[bytes, dict[str, bytes]]]]:
    """Per partition, (value, headers) of every committed record in offset order: reads
    read_committed until every partition's end (its last stable offset) was reached."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "agent-test",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: dict[int, list[tuple[bytes, dict[str, bytes]]]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(ended) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            error = message.error()
            if error is None:
                headers = dict(message.headers() or ())
                records[message.partition()].append((message.value(), headers))
                ended.discard(message.partition())
            elif error.code() == KafkaError._PARTITION_EOF:
                ended.add(message.partition())
    consumer.close()
    if len(ended) < partitions:
        raise TimeoutError(f"{topic}: only partitions {sorted(ended)} read to their end")
    return records


def wait_drained(agent: AgentProcess, timeout: float = 60) -> None:
    """Until the agent's queues are empty (every accepted event acknowledged by the cluster)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = agent.status()
        queues = status["queues"] + status["pending"]
        if all(q["depth"] == 0 for q in queues):
            return
        time.sleep(0.1)
    raise TimeoutError(f"the agent still holds events: {agent.status()['queues']}")


def numbered(number: int) -> bytes:
    return f"e{number}".encode()


class Application:
    """Sends numbered events (`value(number)`: `e<number>` by default), keyed by their value
    (or, not `keyed`, without a key), through the agent's socket in small pipelined groups
    until told to stop or the agent dies; remembers in order what it attempted and which were
    answered."""

    GROUP = 20

    def __init__(
        self,
        socket: Path,
        topic: str,
        value: Callable[[int], bytes] = numbered,
        *,
        keyed: bool = True,
    ) -> None:
        self.socket, self.topic = socket, topic
        self.value, self.keyed = value, keyed
        self.attempted: list[bytes] = []
        self.answered: set[bytes] = set()

    def run_round(self, stop: threading.Event) -> None:
        try:
            with AgentClient(self.socket, timeout_s=5) as client:
                while not stop.is_set():
                    start = len(self.attempted)
                    values = [self.value(start + i) for i in range(self.GROUP)]
                    self.attempted += values
                    events = [Event(topic=self.topic, value=v, key=v if self.keyed else None)
                              for v in values]  # fmt: skip
                    for value, response in zip(values, client.send_all(events), strict=True):
                        if response.ok:
                            self.answered.add(value)
        except (ConnectionError, OSError):
            return

    def round_in_background(self) -> tuple[threading.Thread, threading.Event]:
        stop = threading.Event()
        thread = threading.Thread(target=self.run_round, args=(stop,))
        thread.start()
        return thread, stop


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """What the checker found in a topic the agent wrote for an `Application`."""

    answered: int
    in_topic: int
    duplicates: int
    missing: int
    foreign: int  # values the application never sent
    out_of_order: list[int]  # partitions whose values are not in the order sent
    position_gaps: list[int]  # partitions whose `weir.pos` headers are not consecutive
    other_agents: int  # records without this agent's `weir.agent` header

    def summary(self) -> str:
        return (f"{self.answered} answered, {self.in_topic} in the topic, "
                f"{self.duplicates} duplicates, {self.missing} missing")  # fmt: skip

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.missing or self.foreign or self.out_of_order
                    or self.position_gaps or self.other_agents)  # fmt: skip


def tally(
    records: dict[int, list[tuple[bytes, dict[str, bytes]]]],
    application: Application,
    identity: bytes,
) -> Tally:
    """Every answered event once, nothing the application did not send (an event stored but not
    answered when the agent died may be there, once), each partition in the order sent and in
    consecutive queue positions."""
    counts = Counter(value for landed in records.values() for value, _ in landed)
    order = {value: index for index, value in enumerate(application.attempted)}
    out_of_order, gaps, others = [], [], 0
    for partition, landed in records.items():
        indexes = [order.get(value, -1) for value, _ in landed]
        if indexes != sorted(indexes):
            out_of_order.append(partition)
        others += sum(1 for _, h in landed if h.get(AGENT_HEADER) != identity)
        positions = [int(h.get(POSITION_HEADER, b"-1")) for _, h in landed]
        if positions and positions != list(range(positions[0], positions[0] + len(positions))):
            gaps.append(partition)
    return Tally(
        answered=len(application.answered),
        in_topic=sum(counts.values()),
        duplicates=sum(c - 1 for c in counts.values() if c > 1),
        missing=len(application.answered - set(counts)),
        foreign=len(set(counts) - set(order)),
        out_of_order=out_of_order,
        position_gaps=gaps,
        other_agents=others,
    )


def agent_identity(agent: AgentProcess) -> bytes:
    return (agent.directory / "spool" / IDENTITY_FILE).read_text().strip().encode()
