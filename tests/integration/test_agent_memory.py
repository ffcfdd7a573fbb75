"""The `memory` and `shm` classes against a real broker: spill while the cluster is unreachable,
replay in order when it returns, and (shm, or a clean stop) survive an agent restart."""

from __future__ import annotations

import shutil
import signal
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess

from waiting import poll
from weir.agent.agent import Agent
from weir.agent.client import AgentClient
from weir.agent.config import AgentConfig
from weir.agent.event import Event
from weir.agent.queue import Durability


def _assert_in_order_per_key(
    records: list[tuple[int, bytes | None, bytes]], sent: dict[bytes, list[bytes]]
) -> None:
    received: dict[bytes, list[bytes]] = defaultdict(list)
    for _, key, value in records:
        assert key is not None
        received[key].append(value)
    for key, values in sent.items():
        assert list(dict.fromkeys(received[key])) == values


def test_memory_queue_spills_while_brokers_are_down_and_replays_in_order(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "mem", 4)
    spool = tmp_path / "spool"
    agent = Agent(AgentConfig(bootstrap_server=broker.bootstrap, spool=spool,
                              default_durability=Durability.MEMORY))  # fmt: skip
    sent: dict[bytes, list[bytes]] = defaultdict(list)

    def send(numbers: range) -> None:
        for i in numbers:
            key, value = f"k{i % 10}".encode(), f"{i}".encode()
            agent.send("mem", value, key=key)
            sent[key].append(value)

    try:
        send(range(0, 1000))
        assert agent.wait_drained(60)
        assert not list(spool.glob("mem/*.ring")), "nothing spills while the cluster answers"
        broker.stop()
        poll(lambda: not agent.cluster_reachable, 60, "the agent finding the cluster gone")
        send(range(1000, 3000))
        spilled = sum(q.spilled for q in agent.queue_statuses())
        assert spilled == 2000 and list(spool.glob("mem/*.ring"))
        broker.start()
        assert agent.wait_drained(120), agent.status()
        send(range(3000, 3500))
        assert agent.wait_drained(60)
    finally:
        agent.close()
    assert sum(q.spilled for q in agent.queue_statuses()) == 2000
    records = read_topic(broker.bootstrap, "mem", 4, 3500, distinct=True)
    _assert_in_order_per_key(records, sent)


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    path = Path("/dev/shm") / f"weir-agent-test-{uuid.uuid4().hex}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize(
    ("durability", "stop"), [("shm", "clean"), ("shm", "kill -9"), ("memory", "clean")]
)
def test_queued_events_survive_an_agent_restart(
    broker: BrokerProcess, tmp_path: Path, shm_dir: Path, durability: str, stop: str
) -> None:
    create_topic(broker.bootstrap, "kept", 2)
    config = f'default_durability = "{durability}"\nshm_dir = "{shm_dir}"\nqueue_bytes = 4194304\n'
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, config)
    sent: dict[bytes, list[bytes]] = defaultdict(list)

    def send(numbers: range) -> None:
        events = [Event(topic="kept", value=b"%d" % i, key=b"k%d" % (i % 7)) for i in numbers]
        with AgentClient(agent.socket) as client:
            assert all(r.ok for r in client.send_all(events))
        for event in events:
            assert event.key is not None and event.value is not None
            sent[event.key].append(event.value)

    agent.start()
    assert broker.process is not None
    try:
        send(range(0, 20))
        poll(lambda: _depth(agent) == 0, 60, "every queue empty")
        broker.process.send_signal(signal.SIGSTOP)  # connections stay up; nothing is acknowledged
        send(range(20, 520))
        status = agent.status()
        assert _depth(agent) == 500 and all(q["spilled"] == 0 for q in status["queues"])
        agent.kill() if stop == "kill -9" else agent.stop()
        broker.process.send_signal(signal.SIGCONT)
        agent.start()
        send(range(520, 600))
        poll(lambda: _depth(agent) == 0, 120, "every queue empty again")
    finally:
        broker.process.send_signal(signal.SIGCONT)
        agent.stop()
    records = read_topic(broker.bootstrap, "kept", 2, 600, distinct=True)
    _assert_in_order_per_key(records, sent)


def _depth(agent: AgentProcess) -> int:
    return sum(q["depth"] for q in agent.status()["queues"])
