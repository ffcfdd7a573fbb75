"""Agent throughput: events/s accepted in process and through the socket, per durability class,
beside confluent-kafka producing the same events directly, all in one run against one broker.

In process, `*_in_process` is one event per `Agent.send` call from THREADS concurrent callers
(`events_in_process_many_callers`: MANY_CALLERS of them, so group commits are shared more
widely), and `*_in_process_send_batch` is BATCH events per `Agent.send_batch` call.

Through the socket, clients run in their own processes (as applications do) and pipeline framed
SEND requests encoded before the clock starts, so the figure is the agent's: `*_socket` is one
connection, `events_socket_many_connections` is CONNECTIONS concurrent ones.
`socket_python_client` is one `weir.agent.client.AgentClient.send_all` in this process, encoding
included. `confluent_kafka_direct` produces to the broker with acks=all and idempotence.

While the cluster is reachable the agent's senders deliver in the same process as the callers
are answered (they share one interpreter lock); the `*_cluster_down` figures are taken last, after
the broker was stopped, and measure what accepting alone costs (what callers see during an outage,
or a burst the senders have not caught up with).

Delivery (`delivery_*`, run first): at-least-once (the shared idempotent producer) beside
exactly-once (a transaction per batch, a producer per queue) into a topic of P partitions.
`delivery_backlog_*`: events/s from the start of an agent to the last acknowledgement of a
backlog stored while the cluster was unreachable (the senders' own pace, full batches);
`delivery_live_*`: events/s from the first store to the last acknowledgement while callers store
as fast as they can and the senders deliver meanwhile (batches as large as the backlog lets
them be; callers and senders share the interpreter); `delivery_latency_ms_*`: the median time
from `Agent.send` of one event, alone, to its acknowledgement by the cluster (a transaction's
extra round trips show here).

Usage: python bench/agent.py [--events N] [--size BYTES] [--delivery-only]
                             [--out bench/results/agent.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))
from broker import start_broker
from weir.agent.agent import Agent
from weir.agent.client import CHUNK, WINDOW, AgentClient
from weir.agent.config import AgentConfig, DeliveryGuarantee
from weir.agent.event import Event
from weir.agent.queue import Durability
from weir.agent.server import AgentSocketServer
from weir.agent.wire import PREAMBLE, ClientConnection, encode_send

THREADS = 16
MANY_CALLERS = 64
CONNECTIONS = 16
BATCH = 500


def _in_threads(callers: int, work: Callable[[], None]) -> float:
    """Seconds for `callers` threads to run `work` each."""
    threads = [threading.Thread(target=work) for _ in range(callers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def in_process(agent: Agent, topic: str, count: int, value: bytes, callers: int = THREADS) -> float:
    """Events/s through `Agent.send` from `callers` concurrent threads, one event per call."""
    per_thread = count // callers

    def run() -> None:
        for _ in range(per_thread):
            agent.send(topic, value)

    return per_thread * callers / _in_threads(callers, run)


def in_process_batch(agent: Agent, topic: str, count: int, value: bytes) -> float:
    """Events/s through `Agent.send_batch` from THREADS concurrent callers, BATCH per call."""
    per_thread = count // THREADS
    values = [value] * BATCH

    def run() -> None:
        for start in range(0, per_thread, BATCH):
            results = agent.send_batch(topic, values[: min(BATCH, per_thread - start)])
            assert not any(results)

    return per_thread * THREADS / _in_threads(THREADS, run)


def _pipeline_frames(path: Path, frames: list[bytes], go: ProcessEvent, out: Any) -> None:
    """A client process: connects, waits for `go`, pipelines `frames` (CHUNK per write, at most
    WINDOW unanswered), and reports (start, end, refused) once every answer arrived."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(PREAMBLE)
        replies = ClientConnection()
        go.wait()
        started = time.perf_counter()
        answered = refused = sent = 0
        while answered < len(frames):
            if sent < len(frames) and sent - answered <= WINDOW - CHUNK:
                sock.sendall(b"".join(frames[sent : sent + CHUNK]))
                sent = min(sent + CHUNK, len(frames))
                continue
            replies.receive_data(sock.recv(1 << 20))
            for response in replies.next_responses():
                answered += 1
                refused += not response.ok
        out.put((started, time.perf_counter(), refused))


def through_socket(path: Path, topic: str, count: int, value: bytes, connections: int) -> float:
    """Events/s through `connections` concurrent client processes, pipelining framed SENDs."""
    per_connection = count // connections
    frames = [encode_send(i + 1, Event(topic=topic, value=value)) for i in range(per_connection)]
    context = multiprocessing.get_context("fork")
    go, out = context.Event(), context.Queue()
    clients = [context.Process(target=_pipeline_frames, args=(path, frames, go, out))
               for _ in range(connections)]  # fmt: skip
    for client in clients:
        client.start()
    time.sleep(0.5)
    go.set()
    reports = [out.get(timeout=600) for _ in clients]
    for client in clients:
        client.join()
    assert not any(refused for _, _, refused in reports), reports
    elapsed = max(end for _, end, _ in reports) - min(start for start, _, _ in reports)
    return per_connection * connections / elapsed


def python_client(path: Path, topic: str, count: int, value: bytes) -> float:
    """Events/s through one `AgentClient.send_all` in this process (encoding included)."""
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


DELIVERY_PARTITIONS = (1, 4)
LATENCY_SAMPLES = 200
#: a loopback port nothing listens on: an agent given it stores events and delivers none
UNREACHABLE = "127.0.0.1:1"


def delivery(
    directory: Path, bootstrap: str, guarantee: DeliveryGuarantee, partitions: int, count: int,
    value: bytes,
) -> dict[str, float]:
    """Through agents with `guarantee` on a topic of `partitions` partitions: events/s draining a
    backlog stored while the cluster was unreachable, events/s stored and delivered together,
    and the median delivery latency of one event alone."""
    name = f"{guarantee.value}-p{partitions}"
    topic = f"bench-delivery-{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    config = AgentConfig(bootstrap_server=bootstrap, spool=directory / f"spool-{name}",
                         queue_bytes=256 << 20, delivery_guarantee=guarantee)  # fmt: skip
    keys = [str(i).encode() for i in range(BATCH)]
    batches = count // BATCH
    agent = Agent(config)
    try:
        agent.send_batch(topic, [b"warm-up"] * BATCH, keys)
        assert agent.wait_drained(60), "warm-up events not delivered"
        started = time.perf_counter()
        for _ in range(batches):
            agent.send_batch(topic, [value] * BATCH, keys)
        assert agent.wait_drained(600), "events not delivered"
        live = batches * BATCH / (time.perf_counter() - started)
        latency = _median_delivery_ms(agent, topic, value, keys)
    finally:
        agent.close()
    offline = Agent(replace(config, bootstrap_server=UNREACHABLE,
                            delivery_guarantee=DeliveryGuarantee.AT_LEAST_ONCE))  # fmt: skip
    for _ in range(batches):
        offline.send_batch(topic, [value] * BATCH, keys)
    offline.close()
    started = time.perf_counter()
    agent = Agent(config)
    try:
        assert agent.wait_drained(600), "backlog not delivered"
        backlog = batches * BATCH / (time.perf_counter() - started)
    finally:
        agent.close()
    return {f"delivery_backlog_{name}": backlog, f"delivery_live_{name}": live,
            f"delivery_latency_ms_{name}": latency}  # fmt: skip


def _median_delivery_ms(agent: Agent, topic: str, value: bytes, keys: list[bytes]) -> float:
    """From `send` of one event alone to the cluster's acknowledgement (its queue empty)."""
    latencies = []
    for index in range(LATENCY_SAMPLES):
        sent = time.perf_counter()
        agent.send(topic, value, keys[index % len(keys)])
        while any(q.state().depth for q in agent.registry.queues()):
            time.sleep(0.0002)
        latencies.append((time.perf_counter() - sent) * 1000)
    return sorted(latencies)[len(latencies) // 2]


def delivery_side_by_side(
    directory: Path, bootstrap: str, count: int, value: bytes
) -> dict[str, float]:
    results: dict[str, float] = {}
    for partitions in DELIVERY_PARTITIONS:
        for guarantee in (DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE):
            results |= delivery(directory, bootstrap, guarantee, partitions, count, value)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--delivery-only", action="store_true", help="only the delivery guarantees side by side"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "agent.json"
    )
    args = parser.parse_args()
    value = b"x" * args.size
    with tempfile.TemporaryDirectory() as directory:
        process, bootstrap = start_broker(Path(directory) / "broker")
        try:
            side_by_side = delivery_side_by_side(Path(directory), bootstrap, args.events, value)
            results = {k: round(v, 2) for k, v in side_by_side.items()}
            if not args.delivery_only:
                results |= run_all(Path(directory), bootstrap, args.events, value, process)
        finally:
            if process.poll() is None:
                process.terminate()
            process.wait(30)
    report = {"events": args.events, "size": args.size, "threads_in_process": THREADS,
              "many_callers_in_process": MANY_CALLERS, "socket_connections": CONNECTIONS,
              "send_batch_events_per_call": BATCH, "python": platform.python_version(),
              "results_events_per_s": results}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def with_cluster_down(
    agent: Agent, path: Path, broker: subprocess.Popen[bytes], count: int, value: bytes
) -> dict[str, float]:
    """Accepting alone: the broker is stopped, so the senders only wait to retry."""
    broker.terminate()
    broker.wait(30)
    deadline = time.monotonic() + 60
    while agent.cluster_reachable and time.monotonic() < deadline:
        time.sleep(0.1)
    return {
        "logs_in_process_cluster_down": in_process(agent, "bench-logs", count, value),
        "events_in_process_cluster_down": in_process(agent, "bench-events", count, value),
        "events_in_process_many_callers_cluster_down": in_process(
            agent, "bench-events-m", count, value, MANY_CALLERS
        ),
        "logs_socket_cluster_down": through_socket(path, "bench-logs-s", count, value, 1),
        "events_socket_cluster_down": through_socket(path, "bench-events-s", count, value, 1),
        "events_socket_many_connections_cluster_down": through_socket(
            path, "bench-events-c", count, value, CONNECTIONS
        ),
    }


TOPICS = ("bench-logs", "bench-events", "bench-logs-s", "bench-events-s", "bench-events-c",
          "bench-events-m", "bench-client")  # fmt: skip


def run_all(
    directory: Path, bootstrap: str, count: int, value: bytes, broker: subprocess.Popen[bytes]
) -> dict[str, Any]:
    logs = {t: Durability.LOGS for t in TOPICS if "logs" in t}
    config = AgentConfig(bootstrap_server=bootstrap, spool=directory / "spool",
                         socket=directory / "agent.sock", queue_bytes=256 << 20,
                         topic_durability=logs)  # fmt: skip
    agent = Agent(config)
    server = AgentSocketServer(config.socket, agent)
    server.serve_in_background()
    results: dict[str, Any] = {}
    try:
        for name in TOPICS:
            agent.send(name, b"warm-up")
        assert agent.wait_drained(60), "warm-up events not delivered"
        results["logs_in_process"] = in_process(agent, "bench-logs", count, value)
        results["events_in_process"] = in_process(agent, "bench-events", count, value)
        results["events_in_process_many_callers"] = in_process(
            agent, "bench-events-m", count, value, MANY_CALLERS
        )
        results["logs_in_process_send_batch"] = in_process_batch(agent, "bench-logs", count, value)
        results["events_in_process_send_batch"] = in_process_batch(
            agent, "bench-events", count, value
        )
        results["logs_socket"] = through_socket(config.socket, "bench-logs-s", count, value, 1)
        results["events_socket"] = through_socket(config.socket, "bench-events-s", count, value, 1)
        results["events_socket_many_connections"] = through_socket(
            config.socket, "bench-events-c", count, value, CONNECTIONS
        )
        results["socket_python_client"] = python_client(config.socket, "bench-client", count, value)
        agent.wait_drained(300)
        results["confluent_kafka_direct"] = direct(bootstrap, "bench-direct", count, value)
        results |= with_cluster_down(agent, config.socket, broker, count, value)
    finally:
        server.shutdown()
        server.server_close()
        agent.close()
    return {k: round(v) for k, v in results.items()}


if __name__ == "__main__":
    main()
