"""A `weir agent start` child process for integration tests, plus topic-reading helpers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from weir.agent.client import AgentClient


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
