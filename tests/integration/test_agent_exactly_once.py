"""The agent's exactly-once delivery against a real broker: kill -9 mid-send, round after round,
and kills at the two exact points of a batch's delivery; every answered event is in the topic
once (read_committed), in order per partition, and nothing else is there."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_process import (
    AgentProcess,
    Application,
    agent_identity,
    create_topic,
    read_committed,
    tally,
    wait_drained,
)
from broker_process import BrokerProcess

EXACTLY_ONCE = 'delivery_guarantee = "exactly-once"\n'
PARTITIONS = 3
ROUNDS = 12
CRASH_POINT = Path(__file__).parent / "agent_crash_point.py"


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
        thread, stop = application.round_in_background()
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
    found = tally(records, application, agent_identity(agent))
    resumed = agent.resumes()
    with capsys.disabled():
        print(f"\nexactly-once, kill -9 x{ROUNDS}: {found.summary()}; "
              f"batches in flight at a kill: {dict(resumed)}")  # fmt: skip
    assert found.exactly_once, found
    assert found.answered > 1000


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
    assert f"in flight before the resume was {verdict}" in agent.log()
