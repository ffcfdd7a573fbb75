"""A `weir agent start` child process for integration tests, plus topic-reading helpers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


class AgentProcess:
    """One agent child; `kill()` is kill -9, `start()` again reuses the spool directory."""

    def __init__(self, directory: Path, bootstrap: str, config: str = "") -> None:
        self.directory = directory
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
                   "--bootstrap-server", self.bootstrap, "--ready-file", str(ready)]  # fmt: skip
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


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read_topic(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60
) -> list[tuple[int, bytes | None, bytes]]:
    """(partition, key, value) of every record, in offset order per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "agent-test",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[tuple[int, bytes | None, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                records.append((message.partition(), message.key(), message.value()))
    consumer.close()
    return records
