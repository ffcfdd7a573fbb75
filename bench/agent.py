"""Agent throughput: events/s accepted in process and through the socket, per durability class,
beside confluent-kafka producing the same events directly, all in one run against one broker.
In process, `*_in_process` is one event per `Agent.send` call and `*_in_process_send_batch` is
BATCH events per `Agent.send_batch` call, both from THREADS concurrent callers.

Usage: python bench/agent.py [--events N] [--size BYTES] [--out bench/results/agent.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).parent))
from broker import start_broker
from weir.agent.agent import Agent
from weir.agent.client import AgentClient
from weir.agent.config import AgentConfig
from weir.agent.event import Event
from weir.agent.queue import Durability
from weir.agent.server import AgentSocketServer

THREADS = 16
BATCH = 500


def in_process(agent: Agent, topic: str, count: int, value: bytes) -> float:
    """Events/s through `Agent.send` from THREADS concurrent callers, one event per call."""
    per_thread = count // THREADS

    def run() -> None:
        for _ in range(per_thread):
            agent.send(topic, value)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return per_thread * THREADS / (time.perf_counter() - started)


def in_process_batch(agent: Agent, topic: str, count: int, value: bytes) -> float:
    """Events/s through `Agent.send_batch` from THREADS concurrent callers, BATCH per call."""
    per_thread = count // THREADS
    values = [value] * BATCH

    def run() -> None:
        for start in range(0, per_thread, BATCH):
            results = agent.send_batch(topic, values[: min(BATCH, per_thread - start)])
            assert not any(results)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return per_thread * THREADS / (time.perf_counter() - started)


def through_socket(path: Path, topic: str, count: int, value: bytes) -> float:
    """Events/s through one pipelined framed-protocol connection."""
    events = [Event(topic=topic, value=value) for _ in range(count)]
    with AgentClient(path) as client:
        started = time.perf_counter()
        responses = client.send_all(events)
        elapsed = time.perf_counter() - started
    assert all(r.ok for r in responses)
    return count / elapsed


def direct(bootstrap: str, topic: str, count: int, value: bytes) -> float:
    """confluent-kafka, acks=all and idempotence, until every delivery report arrived."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "agent.json"
    )
    args = parser.parse_args()
    value = b"x" * args.size
    with tempfile.TemporaryDirectory() as directory:
        process, bootstrap = start_broker(Path(directory) / "broker")
        try:
            results = run_all(Path(directory), bootstrap, args.events, value)
        finally:
            process.terminate()
            process.wait(30)
    report = {"events": args.events, "size": args.size, "threads_in_process": THREADS,
              "send_batch_events_per_call": BATCH, "python": platform.python_version(),
              "results_events_per_s": results}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def run_all(directory: Path, bootstrap: str, count: int, value: bytes) -> dict[str, Any]:
    config = AgentConfig(
        bootstrap_server=bootstrap,
        spool=directory / "spool",
        socket=directory / "agent.sock",
        queue_bytes=256 << 20,
        topic_durability={"bench-logs": Durability.LOGS, "bench-logs-s": Durability.LOGS},
    )
    agent = Agent(config)
    server = AgentSocketServer(config.socket, agent)
    server.serve_in_background()
    results: dict[str, Any] = {}
    try:
        for name in ("bench-logs", "bench-events", "bench-logs-s", "bench-events-s"):
            agent.send(name, b"warm-up")
        results["logs_in_process"] = in_process(agent, "bench-logs", count, value)
        results["events_in_process"] = in_process(agent, "bench-events", count, value)
        results["logs_in_process_send_batch"] = in_process_batch(agent, "bench-logs", count, value)
        results["events_in_process_send_batch"] = in_process_batch(
            agent, "bench-events", count, value
        )
        results["logs_socket"] = through_socket(config.socket, "bench-logs-s", count, value)
        results["events_socket"] = through_socket(config.socket, "bench-events-s", count, value)
        agent.wait_drained(300)
        results["confluent_kafka_direct"] = direct(bootstrap, "bench-direct", count, value)
    finally:
        server.shutdown()
        server.server_close()
        agent.close()
    return {k: round(v) for k, v in results.items()}


if __name__ == "__main__":
    main()
