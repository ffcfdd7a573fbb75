"""The agent with the cluster away: a topic never seen is answered at once and placed by key later,
across kill -9; SIGTERM with undelivered events is prompt and loses nothing; a topic that does
not exist when the cluster returns, or was deleted, is dead-lettered, not retried for ever; a
topic recreated with fewer partitions takes the events of the partitions it lost, by key."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from waiting import poll
from weir.agent.agent import Agent
from weir.agent.client import AgentClient
from weir.agent.config import AgentConfig
from weir.agent.deadletter import read_dead_letters
from weir.agent.event import Event
from weir.agent.partitioner import partition_for_key

SHUTDOWN_BOUND_S = 5.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _broker_not_started(tmp_path: Path, **config: object) -> BrokerProcess:
    """A broker whose address is fixed now and which starts later, when the test says so."""
    broker = BrokerProcess(tmp_path / "broker", config=config or None)
    broker.port = _free_port()
    return broker


@contextlib.contextmanager
def _stopped_at_the_end(broker: BrokerProcess, agent: AgentProcess) -> Iterator[None]:
    """Whatever happens in the test, no agent or broker process outlives it."""
    try:
        yield
    finally:
        if agent.process is not None:
            agent.kill()
        if broker.process is not None:
            broker.stop()


def _send(agent: AgentProcess, events: list[Event]) -> float:
    """Sends through the socket; returns the seconds it took. Every event must be accepted."""
    started = time.monotonic()
    with AgentClient(agent.socket, timeout_s=30) as client:
        responses = client.send_all(events)
    refused = [(r.code, r.message) for r in responses if not r.ok]
    assert not refused, refused[:3]
    return time.monotonic() - started


def _librdkafka_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """Where librdkafka's murmur2_random partitioner puts each key (one record per key)."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce(topic, key=key, value=key)
    assert producer.flush(30) == 0
    return {k: p for p, k, _ in read_topic(bootstrap, topic, 6, len(keys)) if k is not None}


def test_never_seen_topic_with_brokers_down_is_placed_by_key_after_kill_9(tmp_path: Path) -> None:
    broker = _broker_not_started(tmp_path, **{"num.partitions": 6})
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap)
    keys = [f"user-{i}".encode() for i in range(97)]
    sent: dict[bytes, list[bytes]] = defaultdict(list)
    events = []
    for i in range(5000):
        key, value = keys[i % len(keys)], f"{i}".encode()
        events.append(Event(topic="never-seen", value=value, key=key))
        sent[key].append(value)
    with _stopped_at_the_end(broker, agent):
        agent.start()
        assert _send(agent, events) < 10, "callers waited for the cluster"
        status = agent.status()
        assert not status["cluster_reachable"] and not status["queues"]
        assert [(p["topic"], p["depth"]) for p in status["pending"]] == [("never-seen", 5000)]
        agent.kill()
        agent.start()
        broker.start()
        records = read_topic(broker.bootstrap, "never-seen", 6, 5000, distinct=True, timeout=90)
        poll(lambda: not agent.status()["pending"], 60, "nothing pending")
        agent.stop()
        librdkafka = _librdkafka_partitions(broker.bootstrap, "librdkafka", keys)
    received: dict[bytes, list[bytes]] = defaultdict(list)
    placed: dict[bytes, set[int]] = defaultdict(set)
    for partition, key, value in records:
        assert key is not None
        received[key].append(value)
        placed[key].add(partition)
    assert {k: list(dict.fromkeys(v)) for k, v in received.items()} == sent
    assert {k: p for k, (p,) in placed.items()} == {k: partition_for_key(k, 6) for k in keys}
    assert librdkafka == {k: partition_for_key(k, 6) for k in keys}


def test_sigterm_with_100k_undelivered_events_exits_in_time_and_loses_nothing(
    tmp_path: Path,
) -> None:
    broker = _broker_not_started(tmp_path, **{"num.partitions": 3})
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap,
                         f"shutdown_timeout_ms = {int(SHUTDOWN_BOUND_S * 1000)}\n")  # fmt: skip
    known = [Event(topic="known", value=b"k%d" % i, key=b"%d" % (i % 10)) for i in range(50_000)]
    fresh = [Event(topic="fresh", value=b"f%d" % i) for i in range(50_000)]
    with _stopped_at_the_end(broker, agent):
        broker.start()
        create_topic(broker.bootstrap, "known", 2)
        agent.start()
        _send(agent, [Event(topic="known", value=b"warm-up")])
        poll(lambda: any(q["sent"] for q in agent.status()["queues"]), 60, "the warm-up sent")
        broker.stop()
        _send(agent, known + fresh)
        code, elapsed = _terminate(agent)
        assert code == 0, (tmp_path / "agent" / "agent.log").read_text()[-2000:]
        assert elapsed < SHUTDOWN_BOUND_S, f"SIGTERM took {elapsed:.1f}s"
        broker.start()
        agent.start()
        got_known = read_topic(broker.bootstrap, "known", 2, 50_001, distinct=True, timeout=120)
        got_fresh = read_topic(broker.bootstrap, "fresh", 3, 50_000, distinct=True, timeout=120)
    assert {v for _, _, v in got_known} == {e.value for e in known} | {b"warm-up"}
    assert {v for _, _, v in got_fresh} == {e.value for e in fresh}


def _terminate(agent: AgentProcess) -> tuple[int, float]:
    """SIGTERM; the exit code and the seconds until the process was gone."""
    assert agent.process is not None
    started = time.monotonic()
    agent.process.send_signal(signal.SIGTERM)
    code = agent.process.wait(30)
    agent.process = None
    return code, time.monotonic() - started


def test_topic_missing_when_the_cluster_returns_is_dead_lettered_and_counted(
    tmp_path: Path,
) -> None:
    broker = _broker_not_started(tmp_path, **{"auto.create.topics.enable": False})
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, args=("--metrics-port", "0"))
    with _stopped_at_the_end(broker, agent):
        agent.start()
        _send(agent, [Event(topic="ghost", value=b"g%d" % i, key=b"k") for i in range(20)])
        broker.start()
        poll(lambda: agent.status()["dead_letters"], 60, "a dead letter")
        status = agent.status()
        (dead,) = status["dead_letters"]
        assert dead["topic"] == "ghost" and dead["events"] == 20
        assert "does not exist" in dead["reason"] and not status["pending"]
        with urllib.request.urlopen(agent.metrics_url(), timeout=10) as response:
            metrics = response.read().decode()
        assert 'weir_agent_dead_lettered_events_total{topic="ghost"} 20.0' in metrics
        stored = read_dead_letters(Path(dead["path"]), "ghost")
        assert [(e.key, e.value) for e in stored] == [(b"k", b"g%d" % i) for i in range(20)]
        with AgentClient(agent.socket) as client:
            (answer,) = client.send_all([Event(topic="ghost", value=b"again")])
        assert answer.code == "UNKNOWN_TOPIC"


def test_send_without_an_agent_is_one_clear_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "agent", "send", "t",
         "--socket", str(tmp_path / "nobody.sock"), "--timeout", "2"],
        input=b"hello\n", capture_output=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.decode().startswith("weir: no agent is listening on")
    assert b"Traceback" not in result.stderr


def test_deleted_topic_is_dead_lettered_and_a_recreated_smaller_one_takes_events_by_key(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory("strict", **{"auto.create.topics.enable": False})
    create_topic(broker.bootstrap, "doomed", 4)
    create_topic(broker.bootstrap, "shrunk", 4)
    agent = Agent(AgentConfig(
        bootstrap_server=broker.bootstrap, spool=tmp_path / "spool",
        producer={"topic.metadata.refresh.interval.ms": 500,
                  "topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 20_000},
    ))  # fmt: skip
    try:
        agent.send("doomed", b"before", key=b"k")
        agent.send("shrunk", b"before", key=b"k")
        assert agent.wait_drained(60)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.delete_topics(["doomed", "shrunk"]).values():
            future.result(30)
        create_topic(broker.bootstrap, "shrunk", 2)
        keys = [b"key-%d" % i for i in range(40)]
        for key in keys:
            agent.send("doomed", b"v-" + key, key=key)
            agent.send("shrunk", b"v-" + key, key=key)
        assert agent.wait_drained(120), agent.status()
        dead = {d["topic"]: d["events"] for d in agent.status()["dead_letters"]}
    finally:
        agent.close()
    assert dead == {"doomed": 40}
    placed = {k: p for p, k, _ in read_topic(broker.bootstrap, "shrunk", 2, 40, distinct=True)}
    assert placed == {
        k: partition_for_key(k, 4) if partition_for_key(k, 4) < 2 else partition_for_key(k, 2)
        for k in keys
    }


def test_partition_growth_is_picked_up_and_keys_follow_the_new_count(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "growing", 2)
    agent = Agent(AgentConfig(bootstrap_server=broker.bootstrap, spool=tmp_path / "spool",
                              metadata_refresh_ms=200, flush_interval_ms=100))  # fmt: skip
    keys = [b"key-%d" % i for i in range(40)]
    try:
        for key in keys:
            agent.send("growing", b"before-" + key, key=key)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions("growing", 5)])["growing"].result(30)
        poll(lambda: agent.registry.known_count("growing") == 5, 60, "5 partitions known")
        for key in keys:
            agent.send("growing", b"after-" + key, key=key)
        assert agent.wait_drained(60)
    finally:
        agent.close()
    records = read_topic(broker.bootstrap, "growing", 5, 80, distinct=True)
    assert {(p, v) for p, _, v in records} == {
        (partition_for_key(k, 2), b"before-" + k) for k in keys
    } | {(partition_for_key(k, 5), b"after-" + k) for k in keys}
