"""Cluster brokers for tests: `weir broker start --zookeeper ...` as child processes, what each
one answers to a raw Metadata request, what ZooKeeper holds, and `poll` (waiting.poll), which
waits through the errors of brokers starting, stopping or failing over.

`ClusterBroker` follows tests/integration/broker_process.py (ready file, one log file, a kill at
teardown) and adds what a cluster member needs: `--zookeeper`, `--node-id`, `--rack`, a port
kept across a stop and a start, and SIGSTOP/SIGCONT. `BrokerSet` starts several at once (their
start-up overlaps) and kills whatever is left at teardown.

`metadata_of(broker)` asks exactly that broker (one socket, kio's Metadata v12): a client library
would send its metadata requests to whichever broker it likes once it knows the cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.retry import KazooRetry
from kio.schema.metadata.v12 import request as metadata_request

import waiting
from weir.protocol.codec import decode_response, encode_request

IN_CI = os.environ.get("CI") == "true"
#: every test puts its cluster under this chroot, so the chroot handling is exercised
CHROOT = "/weir"
READY_TIMEOUT = 60  # a broker process on a shared two-core machine, beside ZooKeeper's JVM
SPREAD_TIMEOUT = 15  # the controller's requests reaching every broker
METADATA = 3
METADATA_VERSION = 12
_SIZE = struct.Struct(">i")
_correlation = itertools.count(1)

T = TypeVar("T")


def require_tool(name: str) -> str:
    """The path of a command-line tool; skips without it locally, fails without it in CI."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is not installed (scripts/bootstrap installs it as root)")
        pytest.skip(f"{name} is not installed")
    return path


def toml_text(config: dict[str, object]) -> str:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, str):
            return json.dumps(v)
        return str(v)

    return "".join(f'"{k}" = {value(v)}\n' for k, v in config.items())


class ClusterBroker:
    """One `weir broker start --zookeeper ...` child. Files live in `directory`: data/,
    broker.toml, broker.log (stdout and stderr, appended across restarts), ready.
    `restart()` keeps the data directory and the port."""

    def __init__(
        self,
        directory: Path,
        node_id: int,
        zookeeper: str,
        *,
        rack: str | None = None,
        config: dict[str, object] | None = None,
        port: int = 0,
    ) -> None:
        self.directory = directory
        self.node_id = node_id
        self.zookeeper = zookeeper
        self.rack = rack
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self.data_dir = directory / "data"
        self.log_path = directory / "broker.log"
        self.ready_path = directory / "ready"
        self.config_file: Path | None = None
        if config:
            self.config_file = directory / "broker.toml"
            self.config_file.write_text(toml_text(config))
        self._log_start = 0

    def __repr__(self) -> str:
        return f"<broker {self.node_id} on {self.bootstrap}>"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    @property
    def pid(self) -> int:
        assert self.process is not None, f"broker {self.node_id} is not running"
        return self.process.pid

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "weir.cli.main", "broker", "start",
                   "--zookeeper", self.zookeeper, "--node-id", str(self.node_id),
                   "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
                   "--ready-file", str(self.ready_path)]  # fmt: skip
        if self.rack is not None:
            command += ["--rack", self.rack]
        if self.config_file is not None:
            command += ["--config", str(self.config_file)]
        return command

    def spawn(self) -> None:
        """Start the process; `wait_ready()` waits for it to join the cluster."""
        self.ready_path.unlink(missing_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready_path.exists() or not self.ready_path.read_text().strip():
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"broker {self.node_id} exited with {self.process.returncode}:\n"
                    f"{self.logs_since_start()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"broker {self.node_id} not ready after {timeout}s:\n{self.logs_since_start()}"
                )
            time.sleep(0.05)
        self.port = int(self.ready_path.read_text().strip().rsplit(":", 1)[1])

    def start(self, timeout: float = READY_TIMEOUT) -> None:
        self.spawn()
        self.wait_ready(timeout)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_exit(self, timeout: float) -> int:
        """The exit code of a process expected to end by itself within `timeout` seconds."""
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        """Send `sig` (a paused process is resumed first) and wait; SIGKILL after `timeout`."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            if sig != signal.SIGKILL:
                self.process.send_signal(signal.SIGCONT)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code

    def kill(self) -> None:
        """kill -9: a crash."""
        self.stop(signal.SIGKILL)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def logs_since_start(self) -> str:
        return self.logs().encode()[self._log_start :].decode(errors="replace")


class BrokerSet:
    """The brokers of one test; `kill_all()` at teardown."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.brokers: list[ClusterBroker] = []

    def add(
        self,
        node_id: int,
        zookeeper: str,
        *,
        rack: str | None = None,
        config: dict[str, object] | None = None,
        name: str | None = None,
    ) -> ClusterBroker:
        """A broker, not started yet."""
        directory = self.directory / (name or f"broker-{node_id}")
        broker = ClusterBroker(directory, node_id, zookeeper, rack=rack, config=config)
        self.brokers.append(broker)
        return broker

    def start_cluster(
        self,
        zookeeper: str,
        count: int,
        *,
        racks: Iterable[str | None] | None = None,
        config: dict[str, object] | None = None,
    ) -> dict[int, ClusterBroker]:
        """Brokers 1..count (racks in turn), started together; node id -> broker."""
        rack_list = list(racks) if racks is not None else [None] * count
        started = {
            node_id: self.add(node_id, zookeeper, rack=rack_list[node_id - 1], config=config)
            for node_id in range(1, count + 1)
        }
        start_together(started.values())
        return started

    def kill_all(self) -> None:
        for broker in self.brokers:
            broker.kill()


def start_together(brokers: Iterable[ClusterBroker], timeout: float = READY_TIMEOUT) -> None:
    brokers = list(brokers)
    for broker in brokers:
        broker.spawn()
    for broker in brokers:
        broker.wait_ready(timeout)


def start_three(
    brokers: BrokerSet, zookeeper: str, config: dict[str, object], racks: str = "abc"
) -> dict[int, ClusterBroker]:
    """Brokers 1, 2, 3 in `racks` on `zookeeper` + CHROOT; returns once every one lists all
    three and names the same controller."""
    started = brokers.start_cluster(f"{zookeeper}{CHROOT}", 3, racks=racks, config=config)
    wait_settled(started.values())
    return started


def wait_settled(brokers: Iterable[ClusterBroker]) -> int:
    """Poll until every broker lists exactly these brokers and names the same controller (a
    broker names none until the controller's first UpdateMetadata, and confluent-kafka's admin
    calls then wait for one); the controller's id."""
    brokers = list(brokers)
    ids = sorted(b.node_id for b in brokers)

    def settled() -> int | None:
        views = metadata_of_all(brokers).values()
        controllers = {v.controller for v in views}
        if len(controllers) == 1 and all(sorted(v.brokers) == ids for v in views):
            [controller] = controllers
            return controller if controller in ids else None
        return None

    controller = poll(settled, SPREAD_TIMEOUT, f"{ids} listed everywhere, one controller")
    return controller


def wait_same_everywhere(
    brokers: Iterable[ClusterBroker], topic: str, partitions: int, timeout: float = 15
) -> MetadataView:
    """Poll until every broker shows `topic` with `partitions` partitions, each with a leader,
    all brokers alike; one of the views."""
    brokers = list(brokers)

    def agreed() -> MetadataView | None:
        views = list(metadata_of_all(brokers).values())
        if not all(v.has_leaders(topic, partitions) for v in views):
            return None
        if any(v.topics[topic] != views[0].topics[topic] for v in views):
            return None
        return views[0]

    view = poll(agreed, timeout, f"{topic}: {partitions} led partitions, alike on {brokers}")
    return view


def create_topics(admin: Any, *topics: Any, timeout: float = 30) -> None:
    """Create confluent-kafka `NewTopic`s through `admin`, raising the first failure."""
    for future in admin.create_topics(list(topics), request_timeout=timeout).values():
        future.result()


# ---- polling -----------------------------------------------------------------------------------


#: what a condition may raise while brokers start, stop or fail over: `poll` takes it for "not yet"
UNSETTLED = (OSError, RuntimeError)


def poll(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """`waiting.poll`, taking UNSETTLED for "not yet"."""
    return waiting.poll(condition, timeout, what, interval=interval, ignoring=UNSETTLED)


def timed_poll(
    condition: Callable[[], T], timeout: float, what: str, interval: float = 0.1
) -> tuple[T, float]:
    """`waiting.timed_poll`, taking UNSETTLED for "not yet"."""
    return waiting.timed_poll(condition, timeout, what, interval=interval, ignoring=UNSETTLED)


# ---- raw requests to one broker ----------------------------------------------------------------


def exchange(
    address: tuple[str, int], api_key: int, version: int, body: Any, timeout: float = 10
) -> Any:
    """Send one request on a new connection and return the decoded response body."""
    correlation_id = next(_correlation)
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(encode_request(api_key, version, correlation_id, "cluster-test", body))
        (size,) = _SIZE.unpack(_recv_exact(sock, _SIZE.size))
        answered, response = decode_response(api_key, version, _recv_exact(sock, size))
    if answered != correlation_id:
        raise RuntimeError(f"response for request {answered}, expected {correlation_id}")
    return response


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"broker closed after {len(data)} of {count} bytes")
        data += chunk
    return bytes(data)


@dataclass(frozen=True, slots=True)
class PartitionView:
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MetadataView:
    """What one broker answers to Metadata for all topics."""

    controller: int
    brokers: dict[int, tuple[str, int, str | None]]
    topics: dict[str, dict[int, PartitionView]]
    topic_errors: dict[str, int]

    def leaders(self, topic: str) -> dict[int, int]:
        return {p: v.leader for p, v in self.topics.get(topic, {}).items()}

    def has_leaders(self, topic: str, count: int) -> bool:
        partitions = self.topics.get(topic, {})
        return len(partitions) == count and all(v.leader >= 0 for v in partitions.values())


def metadata_of(address: tuple[str, int], topics: list[str] | None = None) -> MetadataView:
    """Metadata v12 (all topics, or `topics`, without auto-creation) from the broker at
    `address`, and only from it."""
    wanted = None
    if topics is not None:
        wanted = tuple(metadata_request.MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    body = metadata_request.MetadataRequest(
        topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    response = exchange(address, METADATA, METADATA_VERSION, body)
    return MetadataView(
        controller=int(response.controller_id),
        brokers={int(b.node_id): (b.host, int(b.port), b.rack) for b in response.brokers},
        topics={
            t.name: {
                int(p.partition_index): PartitionView(
                    error_code=int(p.error_code),
                    leader=int(p.leader_id),
                    leader_epoch=int(p.leader_epoch),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                    offline=tuple(int(r) for r in p.offline_replicas),
                )
                for p in t.partitions
            }
            for t in response.topics
            if t.error_code == 0
        },
        topic_errors={t.name: int(t.error_code) for t in response.topics if t.error_code != 0},
    )


def metadata_of_all(brokers: Iterable[ClusterBroker]) -> dict[int, MetadataView]:
    return {b.node_id: metadata_of(b.address) for b in brokers}


# ---- ZooKeeper as the tests read it ------------------------------------------------------------


class ZooKeeperView:
    """A kazoo client on the server's root; paths are given inside `chroot`. Reads are retried
    through a lost connection (kazoo's retry), so a reconnect does not fail a test."""

    def __init__(self, hosts: str, chroot: str) -> None:
        self.chroot = chroot.rstrip("/")
        self.client = KazooClient(hosts=hosts, timeout=10)
        self.client.start(timeout=30)
        self.retry = KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0, deadline=20)

    def path(self, path: str) -> str:
        return f"{self.chroot}{path}"

    def get(self, path: str) -> bytes | None:
        try:
            data, _ = self.retry(self.client.get, self.path(path))
        except NoNodeError:
            return None
        return bytes(data) if data is not None else b""

    def json(self, path: str) -> Any:
        data = self.get(path)
        return None if data is None else json.loads(data)

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self.retry(self.client.get_children, self.path(path)))
        except NoNodeError:
            return []

    def exists(self, path: str) -> bool:
        return self.retry(self.client.exists, self.path(path)) is not None

    def controller(self) -> int | None:
        document = self.json("/controller")
        return None if document is None else int(document["brokerid"])

    def controller_epoch(self) -> int | None:
        data = self.get("/controller_epoch")
        return None if data is None else int(data)

    def live_brokers(self) -> list[int]:
        return sorted(int(c) for c in self.children("/brokers/ids") if c.isdigit())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()


@contextlib.contextmanager
def zookeeper_view(hosts: str, chroot: str) -> Iterator[ZooKeeperView]:
    view = ZooKeeperView(hosts, chroot)
    try:
        yield view
    finally:
        view.close()
