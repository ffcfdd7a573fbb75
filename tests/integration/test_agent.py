"""The agent against a real broker: delivery, outages, kill -9, keyed placement, bad input."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess
from confluent_kafka import Producer

from weir.agent.agent import Agent, SendError
from weir.agent.client import AgentClient
from weir.agent.config import AgentConfig
from weir.agent.event import Event
from weir.agent.partitioner import partition_for_key
from weir.agent.queue import Durability


def _agent(broker: BrokerProcess, tmp_path: Path, **settings: object) -> Agent:
    config = AgentConfig(bootstrap_server=broker.bootstrap, spool=tmp_path / "spool", **settings)
    return Agent(config)


def test_cli_send_and_status(broker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "cli", 3)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap)
    agent.start()
    try:
        lines = "".join(f"k{i % 5}:line-{i}\n" for i in range(200))
        sent = subprocess.run(
            [sys.executable, "-m", "weir.cli.main", "agent", "send", "cli",
             "--socket", str(agent.socket), "--key-separator", ":"],
            input=lines.encode(), capture_output=True, timeout=60,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        status = subprocess.run(
            [sys.executable, "-m", "weir.cli.main", "agent", "status",
             "--socket", str(agent.socket)],
            capture_output=True, timeout=60, text=True,
        )  # fmt: skip
        assert status.returncode == 0 and '"cluster_reachable"' in status.stdout
        records = read_topic(broker.bootstrap, "cli", 3, 200)
        assert sorted(v for _, _, v in records) == sorted(f"line-{i}".encode() for i in range(200))
    finally:
        agent.stop()


def test_keyed_events_land_where_java_clients_put_them(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "java", 7)
    create_topic(broker.bootstrap, "ours", 7)
    keys = [f"user-{i}".encode() for i in range(100)] + [b"21", b"foobar", b""]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce("java", key=key, value=key)
    assert producer.flush(30) == 0
    agent = _agent(broker, tmp_path)
    for key in keys:
        agent.send("ours", key, key=key)
    assert agent.wait_drained(60)
    agent.close()
    java = {k: p for p, k, _ in read_topic(broker.bootstrap, "java", 7, len(keys))}
    ours = {k: p for p, k, _ in read_topic(broker.bootstrap, "ours", 7, len(keys))}
    assert ours == java


def test_send_batch_stores_each_event_where_send_would(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "batch-keyed", 5)
    create_topic(broker.bootstrap, "batch-unkeyed", 3)
    agent = _agent(broker, tmp_path, max_event_bytes=1000)
    keys = [f"user-{i % 17}".encode() for i in range(300)]
    values = [b"k%d" % i for i in range(300)]
    values[7] = b"x" * 2000
    results = agent.send_batch("batch-keyed", values, keys)
    assert [r.code if r else None for r in results].count("EVENT_TOO_LARGE") == 1
    assert results[7] is not None and results[7].code == "EVENT_TOO_LARGE"
    for i in range(5):
        assert not any(agent.send_batch("batch-unkeyed", [b"u%d-%d" % (i, j) for j in range(50)]))
    (unknown,) = agent.send_batch("", [b"v"])
    assert unknown is not None and unknown.code == "INVALID_TOPIC"
    assert agent.wait_drained(60)
    agent.close()
    keyed = read_topic(broker.bootstrap, "batch-keyed", 5, 299)
    expected = {
        (partition_for_key(k, 5), k, v)
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
        if i != 7
    }
    assert len(keyed) == 299 and set(keyed) == expected
    unkeyed = read_topic(broker.bootstrap, "batch-unkeyed", 3, 250)
    assert sorted(v for _, _, v in unkeyed) == sorted(
        b"u%d-%d" % (i, j) for i in range(5) for j in range(50)
    )


def test_broker_down_during_ingest_then_everything_arrives_in_order(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "outage", 4)
    agent = _agent(broker, tmp_path)
    sent: dict[bytes, list[bytes]] = defaultdict(list)
    for i in range(3000):
        key, value = f"k{i % 10}".encode(), f"{i}".encode()
        if i == 1000:
            broker.stop()
        if i == 2500:
            assert agent.status()["queues"], "the agent kept accepting while brokers were down"
        agent.send("outage", value, key=key)
        sent[key].append(value)
    broker.start()
    assert agent.wait_drained(120), agent.status()
    agent.close()
    received: dict[bytes, list[bytes]] = defaultdict(list)
    for _, key, value in read_topic(broker.bootstrap, "outage", 4, 3000):
        assert key is not None
        received[key].append(value)
    for key, values in sent.items():
        deduplicated = list(dict.fromkeys(received[key]))
        assert deduplicated == values


def test_bad_input_gets_a_clear_error_and_others_are_served(
    broker_factory: object, tmp_path: Path
) -> None:
    broker = broker_factory("strict", **{"auto.create.topics.enable": False})  # type: ignore[operator]
    create_topic(broker.bootstrap, "good", 1)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, "max_event_bytes = 1000\n")
    agent.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as garbage:
            garbage.connect(str(agent.socket))
            garbage.sendall(b"WEIR\x01" + b"\xff" * 64)
            assert b"FRAME_TOO_LARGE" in garbage.recv(4096)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lines:
            lines.connect(str(agent.socket))
            lines.sendall(b"no-tab-here\ngood\tvalue\n")
            answer = lines.recv(4096)
        assert answer.startswith(b"ERR BAD_LINE") and answer.endswith(b"OK\n")
        with AgentClient(agent.socket) as client:
            responses = client.send_all([
                Event(topic="good", value=b"x" * 2000),
                Event(topic="missing", value=b"v"),
                Event(topic="good", value=b"fine"),
            ])  # fmt: skip
        assert [r.code for r in responses] == ["EVENT_TOO_LARGE", "UNKNOWN_TOPIC", ""]
        assert read_topic(broker.bootstrap, "good", 1, 2) == [
            (0, None, b"value"),
            (0, None, b"fine"),
        ]
    finally:
        agent.stop()


def test_unknown_topic_is_created_when_the_cluster_auto_creates(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    agent = _agent(broker, tmp_path)
    agent.send("autocreated", b"hello")
    assert agent.wait_drained(60)
    agent.close()
    assert [v for _, _, v in read_topic(broker.bootstrap, "autocreated", 1, 1)] == [b"hello"]


def test_events_queue_full_is_refused_and_logs_queue_drops_counted(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "ev", 1)
    create_topic(broker.bootstrap, "lg", 1)
    broker.stop()
    agent = _agent(
        broker, tmp_path, queue_bytes=4096, topic_durability={"lg": Durability.LOGS},
        producer={"message.timeout.ms": 2000},
    )  # fmt: skip
    agent.registry._remember("ev", 1)
    agent.registry._remember("lg", 1)
    accepted = []
    with pytest.raises(SendError, match="full"):
        for i in range(1000):
            agent.send("ev", b"%04d" % i)
            accepted.append(b"%04d" % i)
    for i in range(1000):
        agent.send("lg", b"%04d" % i)
    dropped = next(q["dropped"] for q in agent.status()["queues"] if q["topic"] == "lg")
    broker.start()
    assert agent.wait_drained(120)
    agent.close()
    assert [v for _, _, v in read_topic(broker.bootstrap, "ev", 1, len(accepted))] == accepted
    logs = [int(v) for _, _, v in read_topic(broker.bootstrap, "lg", 1, 1000, timeout=10)]
    kept = 1000 - dropped
    assert dropped > 0 and logs[-kept:] == list(range(dropped, 1000))
    # A batch the sender had already copied before it was overwritten still goes out, in order.
    assert logs[:-kept] == sorted(set(logs[:-kept])) and all(v < dropped for v in logs[:-kept])


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_no_acknowledged_event(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_topic(broker.bootstrap, "crash", 2)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap)
    acknowledged: list[bytes] = []
    rng = random.Random(int(os.environ.get("WEIR_SEED", "6")))
    for round_number in range(20):
        agent.start()
        stop = threading.Event()
        thread = threading.Thread(
            target=_send_until_broken, args=(agent.socket, round_number, acknowledged, stop)
        )
        thread.start()
        time.sleep(rng.uniform(0.05, 0.4))
        agent.kill()
        stop.set()
        thread.join()
    agent.start()
    try:
        records = read_topic(broker.bootstrap, "crash", 2, len(acknowledged), timeout=90,
                             covering=acknowledged)  # fmt: skip
        counts = Counter(v for _, _, v in records)
    finally:
        agent.stop()
    missing = [v for v in acknowledged if counts[v] == 0]
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    with capsys.disabled():
        print(f"\nkill -9 x20: {len(acknowledged)} acknowledged, {duplicates} duplicates")
    assert not missing
    assert len(acknowledged) > 100


def _send_until_broken(
    path: Path, round_number: int, acknowledged: list[bytes], stop: threading.Event
) -> None:
    try:
        with AgentClient(path, timeout_s=5) as client:
            for i in range(1_000_000):
                if stop.is_set():
                    return
                value = f"{round_number}-{i}".encode()
                (response,) = client.send_all([Event(topic="crash", value=value, key=value)])
                if response.ok:
                    acknowledged.append(value)
    except (ConnectionError, OSError):
        return
