"""The agent's exactly-once delivery against a real broker: kill -9 mid-send, round after round,
and kills at the two exact points of a batch's delivery; every answered event is in the topic
once (read_committed), in order per partition, and nothing else is there."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from agent_process import AgentProcess, create_topic, read_committed, wait_drained
from broker_process import BrokerProcess

from weir.agent.client import AgentClient
from weir.agent.event import Event
from weir.agent.exactly_once import AGENT_HEADER, IDENTITY_FILE, POSITION_HEADER
from weir.agent.partitioner import partition_for_key

EXACTLY_ONCE = 'delivery_guarantee = "exactly-once"\n'
PARTITIONS = 3
ROUNDS = 12
CRASH_POINT = Path(__file__).parent / "agent_crash_point.py"


class Application:
    """Sends numbered events through the agent's socket in small pipelined groups until told to
    stop or the agent dies; remembers what it attempted and what was answered, in order."""

    def __init__(self, socket: Path, topic: str) -> None:
        self.socket, self.topic = socket, topic
        self.attempted: list[bytes] = []
        self.answered: set[bytes] = set()
        self.counter = 0

    def run_round(self, stop: threading.Event) -> None:
        try:
            with AgentClient(self.socket, timeout_s=5) as client:
                while not stop.is_set():
                    values = [f"e{self.counter + i}".encode() for i in range(20)]
                    self.counter += len(values)
                    self.attempted += values
                    events = [Event(topic=self.topic, value=v, key=v) for v in values]
                    for value, response in zip(values, client.send_all(events), strict=True):
                        if response.ok:
                            self.answered.add(value)
        except (ConnectionError, OSError):
            return


@pytest.mark.slow
def test_kill_9_mid_send_leaves_every_answered_event_once_in_order(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_topic(broker.bootstrap, "eos", PARTITIONS)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, config=EXACTLY_ONCE)
    application = Application(agent.socket, "eos")
    rng = random.Random(int(os.environ.get("WEIR_SEED", "42")))
    for _ in range(ROUNDS):
        agent.start()
        stop = threading.Event()
        thread = threading.Thread(target=application.run_round, args=(stop,))
        thread.start()
        time.sleep(rng.uniform(0.2, 0.8))
        agent.kill()
        stop.set()
        thread.join()
    agent.start()
    try:
        wait_drained(agent)
        records = read_committed(broker.bootstrap, "eos", PARTITIONS)
    finally:
        agent.stop()
    identity = (agent.directory / "spool" / IDENTITY_FILE).read_text().strip().encode()
    values = [value for partition in records.values() for value, _ in partition]
    counts = Counter(values)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    missing = application.answered - set(counts)
    log = (agent.directory / "agent.log").read_text()
    resumed = Counter(re.findall(r"in flight before the resume was (\w+)", log))
    with capsys.disabled():
        print(f"\nexactly-once, kill -9 x{ROUNDS}: {len(application.answered)} answered, "
              f"{len(values)} in the topic, {duplicates} duplicates, {len(missing)} missing; "
              f"batches in flight at a kill: {dict(resumed)}")  # fmt: skip
    assert duplicates == 0 and not missing
    assert set(counts) <= set(application.attempted)  # nothing else (unanswered: at most once)
    assert len(application.answered) > 1000
    for partition, landed in records.items():
        sent = [v for v in application.attempted
                if v in counts and partition_for_key(v, PARTITIONS) == partition]  # fmt: skip
        assert [value for value, _ in landed] == sent  # in the order sent
        assert all(headers[AGENT_HEADER] == identity for _, headers in landed)
        positions = [int(headers[POSITION_HEADER]) for _, headers in landed]
        assert positions == list(range(positions[0], positions[0] + len(positions)))


@pytest.mark.parametrize(("point", "verdict"), [("prepared", "aborted"),
                                                ("committed", "committed")])  # fmt: skip
def test_a_kill_at_either_phase_of_a_delivery_lands_the_batch_once(
    broker: BrokerProcess, tmp_path: Path, point: str, verdict: str
) -> None:
    create_topic(broker.bootstrap, "phases", 1)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, config=EXACTLY_ONCE)
    spool = agent.directory / "spool"
    crash = subprocess.run([sys.executable, str(CRASH_POINT), broker.bootstrap, str(spool),
                            "phases", "50", point], capture_output=True, timeout=60)  # fmt: skip
    assert crash.returncode == -9, crash.stderr.decode()
    agent.start()
    try:
        wait_drained(agent)
        records = read_committed(broker.bootstrap, "phases", 1)
    finally:
        agent.stop()
    values = [value for value, _ in records[0]]
    assert values == [f"event-{i}".encode() for i in range(50)]
    log = (agent.directory / "agent.log").read_text()
    assert f"in flight before the resume was {verdict}" in log
