"""File tailing with a real agent process, real files and a real broker: rotation by rename and
create, copytruncate, and restarts (clean stop and kill -9) in the middle of a file."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import BinaryIO

import pytest
from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicPartition

from waiting import poll

TOPIC = "tailed"
TAIL_CONFIG = """
tail_poll_ms = 100
tail_close_renamed_ms = 1000
[[inputs]]
paths = ["{directory}/*.log"]
topic = "tailed"
"""


def _line(i: int) -> bytes:
    return b"line-%06d" % i


def _write(path: Path, numbers: range) -> None:
    with open(path, "ab") as f:
        f.write(b"".join(_line(i) + b"\n" for i in numbers))


def _tailing_agent(
    tmp_path: Path, broker: BrokerProcess, *, flag: bool = False
) -> tuple[AgentProcess, Path]:
    """An agent tailing `logs/*.log`, configured in its file or (`flag`) by `--tail`."""
    logs = tmp_path / "logs"
    logs.mkdir()
    create_topic(broker.bootstrap, TOPIC, 1)
    if flag:
        config, _ = TAIL_CONFIG.split("[[inputs]]")
        args = ("--tail", f"{logs}/*.log:{TOPIC}")
        return AgentProcess(tmp_path / "agent", broker.bootstrap, config, args), logs
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, TAIL_CONFIG.format(directory=logs))
    return agent, logs


def _wait_caught_up(agent: AgentProcess, files: list[Path], timeout: float = 90) -> None:
    """Until every file is read to its end and every queue is empty."""

    def caught_up() -> bool:
        status = agent.status()
        offsets = {(p["device"], p["inode"]): p["offset"] for p in status["tailed_files"]}
        read = all(offsets.get(_file_id(f)) == f.stat().st_size for f in files)
        return read and all(q["depth"] == 0 for q in status["queues"])

    poll(caught_up, timeout, "the agent caught up", detail=lambda: str(agent.status()))


def _file_id(path: Path) -> tuple[int, int]:
    info = path.stat()
    return (info.st_dev, info.st_ino)


def _delivered(broker: BrokerProcess, lines: int) -> list[bytes]:
    """Every value in the topic once `lines` different lines arrived (and whatever came along)."""
    records = read_topic(broker.bootstrap, TOPIC, 1, lines, timeout=90, distinct=True)
    return [v for _, _, v in records]


def _records_in_topic(broker: BrokerProcess) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "agent-tail-test"})
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
    consumer.close()
    return int(high - low)


def test_rename_and_create_rotation_delivers_every_line_once_in_order(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    agent, logs = _tailing_agent(tmp_path, broker, flag=True)
    current = logs / "app.log"
    _write(current, range(0, 500))
    agent.start()
    try:
        _write(current, range(500, 1000))
        current.rename(logs / "app.log.1")  # no longer matches *.log
        _write(logs / "app.log.1", range(1000, 1100))  # the writer has not reopened yet
        _write(current, range(1100, 2000))
        _wait_caught_up(agent, [current])
    finally:
        agent.stop()
    assert _delivered(broker, 2000) == [_line(i) for i in range(2000)]
    assert _records_in_topic(broker) == 2000


def test_copytruncate_reads_the_file_again_from_the_start(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    agent, logs = _tailing_agent(tmp_path, broker)
    current = logs / "app.log"
    _write(current, range(0, 500))
    agent.start()
    try:
        _wait_caught_up(agent, [current])
        shutil.copy(current, logs / "app.log.1")
        os.truncate(current, 0)
        _write(current, range(500, 600))  # shorter than before: the size shrank
        _wait_caught_up(agent, [current])
        shutil.copy(current, logs / "app.log.1")
        os.truncate(current, 0)
        _write(current, range(600, 1300))  # longer at once: only the first bytes tell
        _wait_caught_up(agent, [current])
    finally:
        agent.stop()
    assert _delivered(broker, 1300) == [_line(i) for i in range(1300)]
    assert _records_in_topic(broker) == 1300


def test_clean_restart_mid_file_and_rotation_while_stopped_sends_nothing_twice(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    agent, logs = _tailing_agent(tmp_path, broker)
    current = logs / "app.log"
    writer = _Writer(current)
    agent.start()
    writer.start()
    try:
        for _ in range(3):
            time.sleep(0.5)
            agent.stop()
            time.sleep(0.3)
            agent.start()
        agent.stop()
        writer.rotate(logs / "app.log.1")  # while the agent is down
        time.sleep(0.3)
        agent.start()
        time.sleep(0.5)
        total = writer.finish()
        _wait_caught_up(agent, [current])
    finally:
        writer.finish()
        agent.stop()
    assert total > 500
    assert _delivered(broker, total) == [_line(i) for i in range(total)]
    assert _records_in_topic(broker) == total


@pytest.mark.slow
def test_kill_9_mid_file_loses_no_line(broker: BrokerProcess, tmp_path: Path) -> None:
    agent, logs = _tailing_agent(tmp_path, broker)
    current = logs / "app.log"
    writer = _Writer(current)
    agent.start()
    writer.start()
    try:
        for round_number in range(8):
            time.sleep(0.3 + 0.1 * (round_number % 3))
            agent.kill()
            if round_number == 4:
                writer.rotate(logs / "app.log.1")
            agent.start()
        time.sleep(0.5)
        total = writer.finish()
        _wait_caught_up(agent, [current])
    finally:
        writer.finish()
        agent.stop()
    values = _delivered(broker, total)
    assert list(dict.fromkeys(values)) == [_line(i) for i in range(total)]
    print(f"\nkill -9 x8 while tailing: {total} lines, {len(values) - total} sent twice")


class _Writer:
    """Appends numbered lines to a log file from a thread; `rotate` renames it and starts anew."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._file = open(path, "ab")  # noqa: SIM115 - closed by finish()
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            with self._lock:
                _write_to(self._file, range(self.next, self.next + 10))
                self.next += 10

    def rotate(self, renamed: Path) -> None:
        """logrotate's default: rename, a few more lines to the old file, then a new file."""
        with self._lock:
            self.path.rename(renamed)
            _write_to(self._file, range(self.next, self.next + 10))
            self.next += 10
            self._file.close()
            self._file = open(self.path, "ab")  # noqa: SIM115 - closed by finish()

    def finish(self) -> int:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            self._file.close()
            return self.next


def _write_to(file: BinaryIO, numbers: range) -> None:
    file.write(b"".join(_line(i) + b"\n" for i in numbers))
    file.flush()
