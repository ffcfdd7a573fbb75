"""Fault kit for replication: a real ZooKeeper and brokers each in a network namespace of its
own, faults (kill -9, SIGSTOP, network partition), a write/read workload with real clients, and
a Jepsen-style queue checker. Used by tests/cluster/test_replication_faults.py and
bench/faults.py (and by movekit.py for faults during partition moves); it imports no pytest, so
the benches can use it too.

Network: a bridge in the root namespace with the first address of a private /24 (10.77.X.1),
and one namespace per broker joined to it by a veth pair (broker N at 10.77.X.(10+N), port 9092).
ZooKeeper listens on the bridge address; clients and this process stay in the root namespace.
There is no netem here, so a partition is `ip link set <host-side veth> down`: the broker is
cut off from everyone, ZooKeeper included, and the packets are lost, not refused.

Everything created (namespaces, veths, bridge, processes) is named after this process id and
removed by `FaultCluster.close()`; `sweep_stale()` removes what a killed run left behind.

Test traffic never leaves the machine. Kafka clients (librdkafka above all) re-dial every broker
they ever learned until their process exits, so once a bridge is gone its addresses would follow
the default route off the machine. Before anything is created, the whole test range gets an
`unreachable` route that is never removed: a live bridge's connected /24 is more specific and wins,
and a dead bridge's addresses fail at once with "No route to host". `FaultCluster.close()` also
closes the clients it tracks (`track`, `admin`) and stops its brokers before the network goes.

The checker follows Jepsen's queue checks: every acknowledged value must be read back (lost),
no value may sit at two offsets (duplicated), no offset may hold two values for any two
observers, acknowledger included (divergent), and each reader sees offsets gap-free and in
order within one assignment.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kio.schema.metadata.v12 import request as metadata_request

import waiting
from weir.cli.zookeeper import ZooKeeperServer, find_installation
from weir.protocol.codec import decode_response, encode_request

T = TypeVar("T")

CHROOT = "/weir"
BROKER_PORT = 9092
NAME_PREFIX = "wflt"  # namespaces: wflt-<pid>-b<N>; interfaces: wf-<pid base 36>-<br|hN|nN>
#: every bridge takes a /24 of this range; scripts/test installs the same route before the suite
TEST_RANGE = "10.77.0.0/16"
#: the unreachable route's metric: any other route to these addresses is preferred to it
UNREACHABLE_METRIC = 4000
READY_TIMEOUT = 60.0
ZOOKEEPER_TIMEOUT = 10.0  # no read of the harness waits longer on ZooKeeper
SESSION_TIMEOUT_MS = 6000
#: broker settings for fault runs: short session and lag timeouts so that faults resolve quickly
BROKER_CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
    "replica.lag.time.max.ms": 5000,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}
#: librdkafka logs at this syslog level and below go to stderr (2: critical; its errors are
#: counted through error_cb anyway, and faults make every client log connection failures)
LIBRDKAFKA_LOG_LEVEL = 2
FAULT_KINDS = ("kill_leader", "kill_follower", "kill_controller", "pause", "partition")


class FaultKitError(RuntimeError):
    """The harness could not do what it was asked (not a finding about the broker)."""


#: what a condition may raise while the cluster is under faults: `poll` takes it for "not yet"
UNSETTLED = (OSError, FaultKitError, NoNodeError, ValueError, KafkaException)


def poll(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """`waiting.poll`, taking UNSETTLED for "not yet"; FaultKitError after `timeout` seconds."""
    return waiting.poll(
        condition, timeout, what, interval=interval, ignoring=UNSETTLED, failure=FaultKitError
    )


# ---- network -------------------------------------------------------------------------------------


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise FaultKitError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def make_test_range_unroutable() -> None:
    """Install (idempotently) and keep the `unreachable` route for the whole test range."""
    ip("route", "replace", "unreachable", TEST_RANGE, "metric", str(UNREACHABLE_METRIC))


def route_of(address: str) -> str:
    """How the kernel would route to `address` now (`ip route get`'s answer, or its error)."""
    result = ip("route", "get", address, check=False)
    return (result.stdout or result.stderr).strip()


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


def _subnets_in_use() -> set[int]:
    text = ip("-o", "-4", "addr", "show").stdout
    return {int(m.group(1)) for m in re.finditer(r"inet 10\.77\.(\d+)\.", text)}


class BrokerNetwork:
    """A bridge and one namespace per broker; `isolate(n)` / `heal(n)` cut broker n off."""

    def __init__(self, brokers: int, owner: int | None = None) -> None:
        self.owner = owner or os.getpid()
        tag = _base36(self.owner)
        self.bridge = f"wf-{tag}-br"  # interface names have at most 15 characters
        self.nodes = list(range(1, brokers + 1))
        self._host_ifaces = {n: f"wf-{tag}-h{n}" for n in self.nodes}
        self._ns_ifaces = {n: f"wf-{tag}-n{n}" for n in self.nodes}
        self.subnet = -1
        self.isolated: set[int] = set()
        self.created = False

    def namespace(self, node: int) -> str:
        return f"{NAME_PREFIX}-{self.owner}-b{node}"

    @property
    def bridge_ip(self) -> str:
        return f"10.77.{self.subnet}.1"

    def broker_ip(self, node: int) -> str:
        return f"10.77.{self.subnet}.{10 + node}"

    def create(self) -> None:
        make_test_range_unroutable()
        used = _subnets_in_use()
        self.subnet = next(s for s in range(20, 250) if s not in used)
        self.created = True
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for node in self.nodes:
            ns, host, inner = self.namespace(node), self._host_ifaces[node], self._ns_ifaces[node]
            ip("netns", "add", ns)
            ip("link", "add", host, "type", "veth", "peer", "name", inner)
            ip("link", "set", inner, "netns", ns)
            ip("link", "set", host, "master", self.bridge)
            ip("link", "set", host, "up")
            ip("-n", ns, "addr", "add", f"{self.broker_ip(node)}/24", "dev", inner)
            ip("-n", ns, "link", "set", inner, "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def isolate(self, node: int) -> None:
        """Drop every packet to and from broker `node` (its bridge port goes down)."""
        ip("link", "set", self._host_ifaces[node], "down")
        self.isolated.add(node)

    def heal(self, node: int) -> None:
        ip("link", "set", self._host_ifaces[node], "up")
        self.isolated.discard(node)

    def destroy(self) -> list[str]:
        """Remove everything `create` made; the errors met (an empty list when all went)."""
        if not self.created:
            return []
        commands = [("netns", "del", self.namespace(n)) for n in self.nodes]
        commands += [("link", "del", self._host_ifaces[n]) for n in self.nodes]
        commands.append(("link", "del", self.bridge))
        errors = []
        for args in commands:  # a namespace takes its end of the veth pair, and so the pair
            result = ip(*args, check=False)
            gone = "Cannot find" in result.stderr or "No such file" in result.stderr
            if result.returncode and not gone:
                errors.append(f"ip {' '.join(args)}: {result.stderr.strip()}")
        self.created = False
        return errors


def netns_unavailable() -> str | None:
    """Why brokers cannot get network namespaces here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces and veth pairs need root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"{NAME_PREFIX}-{os.getpid()}-probe"
    result = ip("netns", "add", probe, check=False)
    if result.returncode:
        return f"`ip netns add` failed: {result.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def sweep_stale() -> list[str]:
    """Remove namespaces and interfaces of earlier fault runs whose process is gone."""
    removed = []
    for line in ip("netns", "list", check=False).stdout.splitlines():
        match = re.match(rf"{NAME_PREFIX}-(\d+)-b(\d+)", line.strip())
        if match and not _alive(int(match.group(1))):
            ip("netns", "del", match.group(0), check=False)
            removed.append(match.group(0))
    live_tags = {_base36(pid) for pid in _pids()}
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        match = re.match(r"\d+: (wf-([0-9a-z]+)-(?:br|h\d+|n\d+))[@:]", line)
        if match and match.group(2) not in live_tags:
            ip("link", "del", match.group(1), check=False)
            removed.append(match.group(1))
    return removed


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


# ---- processes -----------------------------------------------------------------------------------


def toml_text(config: dict[str, object]) -> str:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        return json.dumps(v) if isinstance(v, str) else str(v)

    return "".join(f'"{k}" = {value(v)}\n' for k, v in config.items())


def cpu_seconds(pid: int) -> float:
    """User and system CPU time process `pid` has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class NamespacedBroker:
    """`weir broker start` inside broker `node_id`'s namespace. Files in `directory`: data/,
    broker.toml, broker.log (appended across restarts), ready. The process id is the broker's
    own (`setpriv` and `ip netns exec` exec into it), so signals reach the broker itself."""

    def __init__(
        self,
        directory: Path,
        node_id: int,
        network: BrokerNetwork,
        zookeeper: str,
        config: dict[str, object],
        *,
        verbose: bool = False,
    ) -> None:
        self.directory = directory
        self.node_id = node_id
        self.verbose = verbose  # weir --verbose: DEBUG logging
        self.network = network
        self.zookeeper = zookeeper
        directory.mkdir(parents=True, exist_ok=True)
        self.data_dir = directory / "data"
        self.log_path = directory / "broker.log"
        self.ready_path = directory / "ready"
        self.config_path = directory / "broker.toml"
        self.config_path.write_text(toml_text(config))
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False
        #: CPU-seconds of this broker's earlier (killed or stopped) processes
        self.cpu_before = 0.0

    @property
    def address(self) -> tuple[str, int]:
        return self.network.broker_ip(self.node_id), BROKER_PORT

    @property
    def bootstrap(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def command(self) -> list[str]:
        guard = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        return [
            *guard,
            "ip",
            "netns",
            "exec",
            self.network.namespace(self.node_id),
            sys.executable,
            "-m",
            "weir.cli.main",
            *(["--verbose"] if self.verbose else []),
            "broker",
            "start",
            "--config",
            str(self.config_path),
            "--zookeeper",
            self.zookeeper,
            "--node-id",
            str(self.node_id),
            "--data-dir",
            str(self.data_dir),
            "--listen",
            self.bootstrap,
            "--ready-file",
            str(self.ready_path),
        ]

    def spawn(self) -> None:
        """Start the process (call from the main thread: the death signal follows the thread
        that spawned it)."""
        self.ready_path.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== faultkit: start at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self.paused = False

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not (self.ready_path.exists() and self.ready_path.read_text().strip()):
            if not self.running():
                raise FaultKitError(f"broker {self.node_id} exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise FaultKitError(
                    f"broker {self.node_id} not ready in {timeout:g}s: {self.log_tail()}"
                )
            time.sleep(0.05)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None, f"broker {self.node_id} is not running"
        return self.process.pid

    def cpu_seconds(self) -> float:
        """CPU-seconds of every process this broker has had."""
        return self.cpu_before + (cpu_seconds(self.pid) if self.running() else 0.0)

    def kill(self) -> None:
        """kill -9 (a paused process dies too)."""
        self._end(signal.SIGKILL)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (a controlled shutdown), SIGKILL after `timeout`."""
        return self._end(signal.SIGTERM, timeout)

    def _end(self, sig: int, timeout: float = 30) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.cpu_before += cpu_seconds(self.process.pid)
            self.process.send_signal(sig)
            if self.paused:
                self.process.send_signal(signal.SIGCONT)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process, self.paused = None, False
        return code

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


# ---- raw requests to one broker ------------------------------------------------------------------

_SIZE = struct.Struct(">i")
_correlation = itertools.count(1)


@dataclass(frozen=True, slots=True)
class MetadataView:
    controller: int
    brokers: frozenset[int]
    leaders: dict[int, int]  # partition -> leader, of the one topic asked about


def metadata_of(
    address: tuple[str, int], topic: str | None = None, timeout: float = 1.0
) -> MetadataView:
    """What the broker at `address` (and only it) answers to Metadata v12 for `topic` (or for
    no topic)."""
    wanted = (
        () if topic is None else (metadata_request.MetadataRequestTopic(topic_id=None, name=topic),)
    )
    body = metadata_request.MetadataRequest(
        topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    response = raw_call(address, 3, 12, body, timeout)
    leaders = {
        int(p.partition_index): int(p.leader_id)
        for t in response.topics
        if t.name == topic
        for p in t.partitions
    }
    return MetadataView(
        int(response.controller_id), frozenset(int(b.node_id) for b in response.brokers), leaders
    )


def raw_call(
    address: tuple[str, int], api_key: int, version: int, body: Any, timeout: float = 1.0
) -> Any:
    """The response of the broker at `address` to one request, on a connection of its own."""
    correlation = next(_correlation)
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(api_key, version, correlation, "faultkit", body))
        (size,) = _SIZE.unpack(_recv_exact(sock, _SIZE.size))
        _, response = decode_response(api_key, version, _recv_exact(sock, size))
    return response


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


# ---- the cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


class FaultCluster:
    """ZooKeeper and `brokers` brokers, each in its own namespace, under `directory`.
    Use as a context manager, or `start()` and always `close()`."""

    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        config: dict[str, object] | None = None,
        *,
        verbose: bool = False,
    ) -> None:
        self.directory = directory
        self.config = {**BROKER_CONFIG, **(config or {})}
        self.verbose = verbose
        self.network = BrokerNetwork(brokers)
        self.zookeeper: ZooKeeperServer | None = None
        self.zk: KazooClient | None = None
        self.brokers: dict[int, NamespacedBroker] = {}
        self._lock = threading.Lock()
        self._clients: list[object] = []  # closed by close() before the brokers and network go

    def __enter__(self) -> FaultCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def session_timeout_s(self) -> float:
        return int(self.config["zookeeper.session.timeout.ms"]) / 1000  # type: ignore[call-overload]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        sweep_stale()
        self.network.create()
        zk_dir = self.directory / "zookeeper"
        self.zookeeper = ZooKeeperServer(
            zk_dir,
            host=self.network.bridge_ip,
            port=_free_port(self.network.bridge_ip),
            installation=find_installation(),
        )
        self.zookeeper.start()
        self.zookeeper.wait_ready()
        self.zk = KazooClient(hosts=self.zookeeper.connect, timeout=10)
        self.zk.start(timeout=30)
        connect = f"{self.zookeeper.connect}{CHROOT}"
        for node in self.network.nodes:
            self.brokers[node] = NamespacedBroker(
                self.directory / f"broker-{node}",
                node,
                self.network,
                connect,
                self.config,
                verbose=self.verbose,
            )
        for broker in self.brokers.values():
            broker.spawn()
        for broker in self.brokers.values():
            broker.wait_ready()
        poll(lambda: self.registered() == set(self.brokers), READY_TIMEOUT, "all registered")
        poll(self.settled, READY_TIMEOUT, "every broker naming the controller and all brokers")

    def settled(self) -> bool:
        """Whether every broker lists all brokers and names the same live controller (admin
        clients wait for a controller in metadata)."""
        views = [metadata_of(b.address) for b in self.brokers.values()]
        controllers = {v.controller for v in views}
        return (
            len(controllers) == 1
            and controllers <= set(self.brokers)
            and all(v.brokers == set(self.brokers) for v in views)
        )

    def track(self, client: T) -> T:
        """`client` (a Kafka client, or a thread with `stop()`) is closed by `close()` before
        the brokers and their network go, if it is not closed already."""
        self._clients.append(client)
        return client

    def close(self) -> list[str]:
        """Stop everything, even after a failure half-way; leftovers that could not go.
        Clients first, then brokers, then ZooKeeper, and the network last."""
        problems = []
        while self._clients:
            close_client(self._clients.pop())
        gc.collect()  # an AdminClient has no close(): its handle goes with its last reference
        for broker in self.brokers.values():
            with contextlib.suppress(Exception):
                broker.kill()
        if self.zk is not None:
            with contextlib.suppress(Exception):
                self.zk.stop()
                self.zk.close()
            self.zk = None
        if self.zookeeper is not None:
            with contextlib.suppress(Exception):
                self.zookeeper.stop()
        for node in list(self.network.isolated):
            with contextlib.suppress(Exception):
                self.network.heal(node)
        problems += self.network.destroy()
        return problems

    # ---- what ZooKeeper says --------------------------------------------------------------------

    def _read(self, path: str, children: bool = False) -> Any:
        """A znode's data (or children) within ZOOKEEPER_TIMEOUT; NoNodeError if it is missing,
        FaultKitError if ZooKeeper does not answer."""
        assert self.zk is not None
        read = self.zk.get_children_async if children else self.zk.get_async
        try:
            return read(f"{CHROOT}{path}").get(timeout=ZOOKEEPER_TIMEOUT)
        except NoNodeError:
            raise
        except (KazooTimeoutError, KazooException) as exc:
            raise FaultKitError(f"ZooKeeper read of {path}: {exc!r}") from exc

    def registered(self) -> set[int]:
        try:
            return {int(c) for c in self._read("/brokers/ids", children=True)}
        except NoNodeError:
            return set()

    def controller(self) -> int | None:
        try:
            data, _ = self._read("/controller")
        except NoNodeError:
            return None
        return int(json.loads(data)["brokerid"])

    def wait_controller(self, timeout: float = 30) -> int:
        controller = poll(self.controller, timeout, "a controller")
        assert controller is not None
        return controller

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        document = json.loads(
            self._read(f"/brokers/topics/{topic}/partitions/{partition}/state")[0]
        )
        return PartitionState(
            int(document["leader"]), int(document["leader_epoch"]), tuple(sorted(document["isr"]))
        )

    def replicas(self, topic: str, partition: int) -> list[int]:
        document = json.loads(self._read(f"/brokers/topics/{topic}")[0])
        return [int(r) for r in document["partitions"][str(partition)]]

    def moves(self, topic: str) -> dict[int, tuple[list[int], list[int]]]:
        """The topic's partitions being moved: partition -> (replicas being added, being
        removed), from the topic's assignment znode."""
        document = json.loads(self._read(f"/brokers/topics/{topic}")[0])
        adding = document.get("adding_replicas") or {}
        removing = document.get("removing_replicas") or {}
        return {int(p): (list(adding.get(p, [])), list(removing.get(p, [])))
                for p in {*adding, *removing}}  # fmt: skip

    def isr_full(self, topic: str, partitions: int) -> bool:
        for p in range(partitions):
            state = self.partition_state(topic, p)
            if set(state.isr) != set(self.replicas(topic, p)) or state.leader < 0:
                return False
        return True

    # ---- health, as the availability monitor sees it --------------------------------------------

    def healthy(self) -> list[int]:
        """Brokers running, not paused and not cut off."""
        with self._lock:
            return [
                n
                for n, b in self.brokers.items()
                if b.running() and not b.paused and n not in self.network.isolated
            ]

    # ---- faults ---------------------------------------------------------------------------------

    def kill(self, node: int) -> None:
        with self._lock:
            self.brokers[node].kill()

    def restart(self, node: int, timeout: float = READY_TIMEOUT) -> None:
        """Start a killed broker again on the same data once ZooKeeper forgot the old one (a
        broker id still registered is refused)."""
        poll(
            lambda: node not in self.registered(),
            self.session_timeout_s * 3 + 10,
            f"broker {node}'s old registration gone",
        )
        broker = self.brokers[node]
        broker.spawn()
        broker.wait_ready(timeout)
        poll(lambda: node in self.registered(), timeout, f"broker {node} registered")

    def pause(self, node: int) -> None:
        with self._lock:
            self.brokers[node].pause()

    def resume(self, node: int) -> None:
        with self._lock:
            self.brokers[node].resume()

    def isolate(self, node: int) -> None:
        with self._lock:
            self.network.isolate(node)

    def heal(self, node: int) -> None:
        with self._lock:
            self.network.heal(node)

    def undo_faults(self) -> None:
        """Resume, heal and restart whatever a failed round left paused, cut off or dead."""
        for node, broker in self.brokers.items():
            if broker.paused:
                self.resume(node)
            if node in self.network.isolated:
                self.heal(node)
        for node, broker in self.brokers.items():
            if not broker.running():
                with contextlib.suppress(FaultKitError):
                    self.restart(node)

    def broker_cpu_seconds(self) -> float:
        return sum(b.cpu_seconds() for b in self.brokers.values())

    # ---- topics ---------------------------------------------------------------------------------

    def admin(self) -> AdminClient:
        config = {"bootstrap.servers": self.bootstrap, "log_level": LIBRDKAFKA_LOG_LEVEL}
        return self.track(AdminClient(config))

    def create_topic(
        self,
        topic: str,
        partitions: int = 3,
        replication: int = 3,
        config: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> None:
        wanted = NewTopic(topic, partitions, replication, config=config or {})
        admin = self.admin()  # kept: its futures fail once it is garbage
        for future in admin.create_topics([wanted], request_timeout=30).values():
            future.result(timeout)
        poll(lambda: self.isr_full(topic, partitions), timeout, f"{topic} fully in sync")


def close_client(client: object, timeout: float = 10) -> None:
    """Close a Kafka client (a producer's unsent messages are dropped) or stop a client thread;
    an AdminClient has no close() and goes when it is garbage."""
    with contextlib.suppress(Exception):
        if isinstance(client, Producer):
            client.purge()
            client.close()
        elif isinstance(client, Consumer):
            client.close()
        elif isinstance(client, threading.Thread):
            getattr(client, "stop", lambda: None)()
            client.join(timeout)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ---- the workload --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Read:
    reader: str
    session: int  # a reader's assignment generation: offsets are checked within one
    partition: int
    offset: int
    value: bytes


@dataclass(slots=True)
class History:
    """Everything the clients saw, appended from their threads under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    ack_times: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, partition)
    sent: int = 0
    send_errors: Counter[str] = field(default_factory=Counter)
    client_errors: Counter[str] = field(default_factory=Counter)
    fatal: list[str] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)

    def ack(self, value: bytes, partition: int, offset: int) -> None:
        with self.lock:
            self.acked[value] = (partition, offset)
            self.ack_times.append((time.monotonic(), partition))

    def read(self, entry: Read) -> None:
        with self.lock:
            self.reads.append(entry)


def producer_config(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "request.timeout.ms": 10_000,
        "message.timeout.ms": 180_000,
        "log_level": LIBRDKAFKA_LOG_LEVEL,
    }


class ProducerWorker(threading.Thread):
    """Writes b"p{index}-{seq}" round-robin over the partitions at about `rate` msgs/s, until
    stopped or, with `limit`, `limit` records sent; every acknowledged value goes to `history`
    with its partition and offset. A producer that hits a fatal error (its idempotent state is
    broken) is replaced, and the error recorded."""

    def __init__(
        self,
        index: int,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate: float,
        history: History,
        limit: int | None = None,
    ) -> None:
        super().__init__(name=f"faultkit-producer-{index}", daemon=True)
        self.index, self.bootstrap, self.topic = index, bootstrap, topic
        self.partitions, self.rate, self.history = partitions, rate, history
        self.limit = limit
        self.stopping = threading.Event()
        self.unflushed = 0
        self.broken = False  # a fatal error came: replace the producer

    def _on_error(self, error: KafkaError) -> None:
        with self.history.lock:
            self.history.client_errors[error.name()] += 1
            if error.fatal():
                self.history.fatal.append(f"producer {self.index}: {error}")
                self.broken = True

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            self.history.ack(message.value(), message.partition(), message.offset())
            return
        with self.history.lock:
            self.history.send_errors[error.name()] += 1
            if error.fatal():
                self.history.fatal.append(f"producer {self.index}: {error}")
                self.broken = True

    def run(self) -> None:
        producer = Producer({**producer_config(self.bootstrap), "error_cb": self._on_error})
        started = time.monotonic()
        for seq in itertools.count() if self.limit is None else range(self.limit):
            if self.stopping.is_set():
                break
            value = f"p{self.index}-{seq}".encode()
            while not self.stopping.is_set():
                try:
                    producer.produce(
                        self.topic,
                        value,
                        partition=seq % self.partitions,
                        on_delivery=self._delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:  # a fatal error: this producer is done
                    self._on_error(exc.args[0])
                    self.broken = True
                    break
            with self.history.lock:
                self.history.sent += 1
            if self.broken:
                self.broken = False
                producer = self._replace(producer)
            ahead = (seq + 1) / self.rate - (time.monotonic() - started)
            if ahead > 0:
                producer.poll(ahead)
        self.unflushed = producer.flush(60)
        close_client(producer)

    def _replace(self, producer: Producer) -> Producer:
        """A fresh producer (new producer id) after a fatal error; the old one's queue is
        flushed as far as it can be, then it is closed."""
        with contextlib.suppress(Exception):
            producer.flush(5)
        close_client(producer)
        return Producer({**producer_config(self.bootstrap), "error_cb": self._on_error})

    def stop(self) -> None:
        self.stopping.set()


class GroupReader(threading.Thread):
    """One member of a consumer group reading `topic` with auto-commit; every record read goes
    to `history`, tagged with the reader's assignment generation."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, history: History) -> None:
        super().__init__(name=f"faultkit-{name}", daemon=True)
        self.reader, self.bootstrap, self.topic, self.group = name, bootstrap, topic, group
        self.history = history
        self.session = 0
        self.stopping = threading.Event()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.session += 1

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 1000,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 1000,
                "log_level": LIBRDKAFKA_LOG_LEVEL,
                "error_cb": lambda e: self._count(e.name()),
            }
        )
        consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._assigned)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    self._count(error.name())
                    continue
                self.history.read(Read(self.reader, self.session, *_position(message)))
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _count(self, name: str) -> None:
        with self.history.lock:
            self.history.client_errors[f"consumer:{name}"] += 1

    def stop(self) -> None:
        self.stopping.set()


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    def ask() -> tuple[int, int] | None:
        answer = consumer.get_watermark_offsets(TopicPartition(topic, partition), 5, False)
        return None if answer is None else (int(answer[0]), int(answer[1]))

    answer = poll(ask, 60, f"{topic}-{partition} watermarks")
    assert answer is not None
    return answer[1]


def _position(message: Any) -> tuple[int, int, bytes]:
    """(partition, offset, value) of a record a consumer returned."""
    return int(message.partition()), int(message.offset()), bytes(message.value() or b"")


def read_everything(
    bootstrap: str, topic: str, partitions: int, history: History, timeout: float = 90
) -> dict[int, int]:
    """Read every partition from its start to its high watermark with a fresh consumer (reader
    "final"); the high watermark of each partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"faultkit-final-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": LIBRDKAFKA_LOG_LEVEL,
        }
    )
    try:
        ends = {p: high_watermark(consumer, topic, p) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            p, offset, value = _position(message)
            history.read(Read("final", 0, p, offset, value))
            position[p] = max(position[p], offset + 1)
        return ends
    finally:
        consumer.close()


class Workload:
    """Producers and a consumer group on one topic, started and stopped together."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        producers: int = 2,
        consumers: int = 2,
        rate: float = 100.0,
    ) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.history = History()
        self.producers = [
            ProducerWorker(i, bootstrap, topic, partitions, rate, self.history)
            for i in range(producers)
        ]
        group = f"faultkit-group-{uuid.uuid4().hex[:8]}"
        self.readers = [
            GroupReader(f"group-{i}", bootstrap, topic, group, self.history)
            for i in range(consumers)
        ]

    def start(self) -> None:
        for thread in (*self.producers, *self.readers):
            thread.start()

    def stop_producers(self, timeout: float = 90) -> int:
        """Stop writing and flush; how many messages were still unanswered."""
        for producer in self.producers:
            producer.stop()
        for producer in self.producers:
            producer.join(timeout)
        return sum(p.unflushed for p in self.producers)

    def wait_group_caught_up(self, timeout: float) -> bool:
        """Whether the group has read every acknowledged value within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.history.lock:
                seen = {r.value for r in self.history.reads if r.reader.startswith("group")}
                if all(v in seen for v in self.history.acked):
                    return True
            time.sleep(0.5)
        return False

    def stop_readers(self) -> None:
        for reader in self.readers:
            reader.stop()
        for reader in self.readers:
            reader.join(30)


# ---- availability --------------------------------------------------------------------------------


class AvailabilityMonitor(threading.Thread):
    """Every `interval` seconds, asks the healthy brokers (running, not paused, not cut off)
    for the topic's leaders and records which partitions have none that is healthy."""

    def __init__(
        self, cluster: FaultCluster, topic: str, partitions: int, interval: float = 0.25
    ) -> None:
        super().__init__(name="faultkit-availability", daemon=True)
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.interval = interval
        self.samples: list[tuple[float, frozenset[int]]] = []  # (monotonic, leaderless)
        self.stopping = threading.Event()

    def sample(self) -> frozenset[int]:
        """The partitions no healthy broker names a healthy leader for (a broker that has
        just started may not know the topic yet; a client would ask another one)."""
        healthy = self.cluster.healthy()
        led: set[int] = set()
        for node in healthy:
            try:
                leaders = metadata_of(self.cluster.brokers[node].address, self.topic).leaders
            except (OSError, ConnectionError, RuntimeError, ValueError):
                continue
            led |= {p for p, leader in leaders.items() if leader in healthy}
        return frozenset(range(self.partitions)) - led

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                leaderless = self.sample()
            except Exception:  # the cluster is being torn down under us
                continue
            self.samples.append((time.monotonic(), leaderless))

    def leaderless(self, start: float, end: float) -> tuple[float, float]:
        """(seconds with any partition leaderless, partition-seconds leaderless) in
        [start, end), from the samples."""
        any_s = partition_s = 0.0
        window = [s for s in self.samples if start <= s[0] < end]
        for (t, missing), (t_next, _) in zip(
            window, [*window[1:], (end, frozenset())], strict=True
        ):
            span = t_next - t
            if missing:
                any_s += span
                partition_s += span * len(missing)
        return any_s, partition_s

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


# ---- the checker ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Verdict:
    acked: int
    read_final: int
    lost: list[str]
    duplicated: list[str]
    divergent: list[str]
    gaps: list[str]
    disorder: list[str]
    unacked_read: int  # written but not acknowledged (indeterminate), yet present: allowed
    group_missing: int  # acknowledged, never read by the group (it may just be behind)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.divergent or self.gaps or self.disorder)

    def counts(self) -> dict[str, int]:
        return {
            name: (len(value) if isinstance(value, list) else value)
            for name, value in asdict(self).items()
        }


def check(history: History, ends: dict[int, int], examples: int = 10) -> Verdict:
    """Jepsen-queue checks over acknowledgements and every read (see the module docstring)."""
    with history.lock:
        acked, reads = dict(history.acked), list(history.reads)
    at: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    for value, position in acked.items():
        at[position].add(value)
        where[value].add(position)
    for r in reads:
        at[(r.partition, r.offset)].add(r.value)
        where[r.value].add((r.partition, r.offset))
    final = {r.value for r in reads if r.reader == "final"}
    group = {r.value for r in reads if r.reader != "final"}
    lost = [f"{v.decode()} acked at {acked[v]}" for v in acked if v not in final]
    duplicated = [f"{v.decode()} at {sorted(p)}" for v, p in where.items() if len(p) > 1]
    divergent = [f"{p}: {sorted(x.decode() for x in vs)}" for p, vs in at.items() if len(vs) > 1]
    gaps, disorder = _offset_checks(reads, ends)
    return Verdict(
        acked=len(acked),
        read_final=len(final),
        lost=lost[:examples] + _more(lost, examples),
        duplicated=duplicated[:examples] + _more(duplicated, examples),
        divergent=divergent[:examples] + _more(divergent, examples),
        gaps=gaps,
        disorder=disorder,
        unacked_read=len(final - set(acked)),
        group_missing=len(set(acked) - group),
    )


def _more(items: list[str], shown: int) -> list[str]:
    return [f"... and {len(items) - shown} more"] if len(items) > shown else []


def _offset_checks(reads: list[Read], ends: dict[int, int]) -> tuple[list[str], list[str]]:
    """Gaps: the final reader must see exactly 0..end-1 of each partition, and a group member
    must see consecutive offsets within one assignment. Disorder: an offset not above the
    previous one within one assignment (a re-read after a rebalance starts a new one)."""
    gaps: list[str] = []
    disorder: list[str] = []
    runs: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for r in reads:
        runs[(r.reader, r.session, r.partition)].append(r.offset)
    for (reader, session, partition), offsets in sorted(runs.items()):
        for before, after in itertools.pairwise(offsets):
            if after <= before:
                disorder.append(f"{reader}#{session} p{partition}: {after} after {before}")
            elif after != before + 1:
                gaps.append(f"{reader}#{session} p{partition}: {before} then {after}")
    for partition, end in ends.items():
        seen = set(runs.get(("final", 0, partition), []))
        missing = sorted(set(range(end)) - seen)
        if missing:
            gaps.append(
                f"final p{partition}: {len(missing)} of 0..{end - 1} unread, first {missing[:5]}"
            )
    return gaps[:20], disorder[:20]


# ---- rounds of faults ----------------------------------------------------------------------------


@dataclass(slots=True)
class FaultRecord:
    round: int
    kind: str
    target: int
    target_roles: list[str]
    recovery_s: float = 0.0  # from injection to full ISR again
    recovered: bool = False
    left_isr: bool = False
    leaderless_s: float = 0.0
    leaderless_partition_s: float = 0.0
    longest_ack_gap_s: float = 0.0
    note: str = ""


def roles(cluster: FaultCluster, topic: str, partitions: int, node: int) -> list[str]:
    out = []
    if cluster.controller() == node:
        out.append("controller")
    for p in range(partitions):
        out.append(
            f"{'leader' if cluster.partition_state(topic, p).leader == node else 'replica'}-p{p}"
        )
    return out


def choose_target(cluster: FaultCluster, kind: str, topic: str, rng: random.Random) -> int:
    """The broker a fault of `kind` hits: partition 0's leader or one of its followers, the
    controller, or any broker (pause, partition). `isolate_leader` is a partition of
    partition 0's leader, for single-scenario tests."""
    leader = cluster.partition_state(topic, 0).leader
    if kind in ("kill_leader", "isolate_leader"):
        return leader
    if kind == "kill_follower":
        return rng.choice([r for r in cluster.replicas(topic, 0) if r != leader])
    if kind == "kill_controller":
        return cluster.wait_controller()
    return rng.choice(sorted(cluster.brokers))


def inject(
    cluster: FaultCluster,
    kind: str,
    target: int,
    topic: str,
    partitions: int,
    rng: random.Random,
    log: Callable[[str], None],
) -> bool:
    """Do one fault to broker `target` and undo it (restart, resume, heal); whether the
    target left the ISR of every partition while the fault lasted (a killed broker is not
    restarted before it has, so that "ISR full again" cannot be seen before it was not)."""

    def out_of_isr() -> bool:
        return all(target not in cluster.partition_state(topic, p).isr for p in range(partitions))

    if kind.startswith("kill_"):
        cluster.kill(target)
        shrank = eventually(out_of_isr, cluster.session_timeout_s * 4)
        time.sleep(rng.uniform(0.0, 2.0))
        cluster.restart(target)
    elif kind == "pause":
        cluster.pause(target)
        shrank = eventually(out_of_isr, cluster.session_timeout_s + rng.uniform(2.0, 4.0), True)
        cluster.resume(target)
    elif kind in ("partition", "isolate_leader"):
        cluster.isolate(target)
        shrank = eventually(out_of_isr, rng.uniform(8.0, 12.0), True)
        cluster.heal(target)
    else:
        raise ValueError(kind)
    log(f"  {kind} of broker {target} undone; it left the ISR: {shrank}")
    return shrank


def eventually(condition: Callable[[], bool], seconds: float, full: bool = False) -> bool:
    """Whether `condition` held within `seconds` (errors reading ZooKeeper or a broker count
    as not yet); with `full` the whole time passes anyway."""
    deadline = time.monotonic() + seconds
    held = False
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, NoNodeError, ValueError, FaultKitError):
            held = held or condition()
        if held and not full:
            return True
        time.sleep(0.2)
    return held


def longest_ack_gap(history: History, start: float, end: float, partitions: int) -> float:
    """The longest time in [start, end] some partition went without an acknowledgement."""
    with history.lock:
        times = [(t, p) for t, p in history.ack_times if start <= t <= end]
    longest = 0.0
    for p in range(partitions):
        marks = [start, *sorted(t for t, q in times if q == p), end]
        longest = max(longest, max(b - a for a, b in itertools.pairwise(marks)))
    return longest


@dataclass(slots=True)
class Recovery:
    left_isr: bool = False  # the target left the ISR while the fault lasted
    recovered: bool = False  # all brokers registered and every ISR full in time
    note: str = ""  # why not, when not


def fault_and_recover(
    cluster: FaultCluster,
    kind: str,
    target: int,
    topic: str,
    partitions: int,
    rng: random.Random,
    *,
    recover_timeout: float,
    log: Callable[[str], None],
) -> Recovery:
    """Do fault `kind` to broker `target`, undo it and wait up to `recover_timeout` for every
    broker registered and a full ISR on the topic's partitions; a cluster that does not
    recover in time has its faults undone."""
    recovery = Recovery()
    try:
        recovery.left_isr = inject(cluster, kind, target, topic, partitions, rng, log)
        poll(
            lambda: (
                cluster.registered() == set(cluster.brokers) and cluster.isr_full(topic, partitions)
            ),
            recover_timeout,
            "ISR full again",
            interval=0.25,
        )
        recovery.recovered = True
    except FaultKitError as exc:
        recovery.note = str(exc)[:500]
        log(f"  not recovered: {exc}")
        cluster.undo_faults()
    return recovery


def run_round(
    number: int,
    kind: str,
    cluster: FaultCluster,
    workload: Workload,
    monitor: AvailabilityMonitor,
    rng: random.Random,
    *,
    recover_timeout: float,
    log: Callable[[str], None] = print,
) -> FaultRecord:
    topic, partitions = workload.topic, workload.partitions
    target = choose_target(cluster, kind, topic, rng)
    record = FaultRecord(number, kind, target, roles(cluster, topic, partitions, target))
    log(f"round {number}: {kind} on broker {target} ({', '.join(record.target_roles)})")
    start = time.monotonic()
    recovery = fault_and_recover(
        cluster, kind, target, topic, partitions, rng, recover_timeout=recover_timeout, log=log
    )
    record.left_isr, record.recovered = recovery.left_isr, recovery.recovered
    record.note = recovery.note
    end = time.monotonic()
    record.recovery_s = round(end - start, 2)
    any_s, partition_s = monitor.leaderless(start, end)
    record.leaderless_s, record.leaderless_partition_s = round(any_s, 2), round(partition_s, 2)
    record.longest_ack_gap_s = round(longest_ack_gap(workload.history, start, end, partitions), 2)
    log(
        f"  recovered={record.recovered} in {record.recovery_s}s, "
        f"leaderless {record.leaderless_s}s, longest ack gap {record.longest_ack_gap_s}s"
    )
    return record


def fault_plan(rounds: int, rng: random.Random, kinds: tuple[str, ...] = FAULT_KINDS) -> list[str]:
    """`rounds` fault kinds at random; every kind comes once before any repeats when there are
    at least as many rounds as kinds."""
    plan: list[str] = []
    while len(plan) < rounds:
        batch = list(kinds)
        rng.shuffle(batch)
        plan += batch
    return plan[:rounds]


@dataclass(slots=True)
class Outcome:
    seed: int
    records: list[FaultRecord]
    verdict: Verdict
    history: History
    ends: dict[int, int]
    unflushed: int
    seconds: float


def run_faults(
    cluster: FaultCluster,
    topic: str,
    *,
    rounds: int,
    seed: int,
    partitions: int = 3,
    producers: int = 2,
    consumers: int = 2,
    rate: float = 100.0,
    recover_timeout: float = 60.0,
    kinds: tuple[str, ...] = FAULT_KINDS,
    warmup_s: float = 3.0,
    log: Callable[[str], None] = print,
) -> Outcome:
    """Create `topic` (RF 3, min.insync.replicas 2), run the workload through `rounds` faults,
    stop the writers, read everything back and check it."""
    started = time.monotonic()
    log(f"fault seed {seed}")
    rng = random.Random(seed)
    cluster.create_topic(topic, partitions, 3, TOPIC_CONFIG)
    workload = Workload(
        cluster.bootstrap, topic, partitions, producers=producers, consumers=consumers, rate=rate
    )
    monitor = AvailabilityMonitor(cluster, topic, partitions)
    for thread in (*workload.producers, *workload.readers, monitor):
        cluster.track(thread)
    workload.start()
    monitor.start()
    records = []
    try:
        time.sleep(warmup_s)
        for number, kind in enumerate(fault_plan(rounds, rng, kinds), 1):
            records.append(
                run_round(
                    number,
                    kind,
                    cluster,
                    workload,
                    monitor,
                    rng,
                    recover_timeout=recover_timeout,
                    log=log,
                )
            )
            time.sleep(rng.uniform(0.5, 2.0))
    finally:
        unflushed = workload.stop_producers()
        workload.wait_group_caught_up(30)
        workload.stop_readers()
        monitor.stop()
    ends = read_everything(cluster.bootstrap, topic, partitions, workload.history)
    verdict = check(workload.history, ends)
    return Outcome(
        seed,
        records,
        verdict,
        workload.history,
        ends,
        unflushed,
        round(time.monotonic() - started, 1),
    )


def summary(outcome: Outcome) -> dict[str, Any]:
    """The figures of a run, for the table and the JSON."""
    kinds = Counter(r.kind for r in outcome.records)
    leaderless: dict[str, dict[str, float]] = {}
    for kind in kinds:
        mine = [r for r in outcome.records if r.kind == kind]
        leaderless[kind] = {
            "faults": len(mine),
            "leaderless_s_total": round(sum(r.leaderless_s for r in mine), 2),
            "leaderless_s_max": round(max(r.leaderless_s for r in mine), 2),
            "partition_s_total": round(sum(r.leaderless_partition_s for r in mine), 2),
            "longest_ack_gap_s_max": round(max(r.longest_ack_gap_s for r in mine), 2),
            "recovery_s_mean": round(sum(r.recovery_s for r in mine) / len(mine), 2),
            "not_recovered": sum(not r.recovered for r in mine),
        }
    counts = outcome.verdict.counts()
    return {
        "seed": outcome.seed,
        "rounds": len(outcome.records),
        "faults": dict(kinds),
        "acked": counts["acked"],
        "sent": outcome.history.sent,
        "lost": counts["lost"],
        "duplicated": counts["duplicated"],
        "divergent": counts["divergent"],
        "gaps": counts["gaps"],
        "disorder": counts["disorder"],
        "unacked_read": counts["unacked_read"],
        "group_missing": counts["group_missing"],
        "unflushed": outcome.unflushed,
        "fatal_producer_errors": list(outcome.history.fatal),
        "send_errors": dict(outcome.history.send_errors),
        "by_kind": leaderless,
        "seconds": outcome.seconds,
    }


def table(summary_: dict[str, Any]) -> str:
    """The run as text: totals, then one line per fault kind."""
    lines = [
        f"seed {summary_['seed']}  rounds {summary_['rounds']}  acked {summary_['acked']} "
        f"(sent {summary_['sent']})  lost {summary_['lost']}  duplicated "
        f"{summary_['duplicated']}  divergent {summary_['divergent']}  gaps {summary_['gaps']}  "
        f"disorder {summary_['disorder']}  ({summary_['seconds']}s)",
        f"{'fault':<16}{'count':>6}{'leaderless s':>14}{'max s':>8}{'part-s':>9}"
        f"{'ack gap max':>13}{'recover s':>11}{'stuck':>7}",
    ]
    for kind, row in sorted(summary_["by_kind"].items()):
        lines.append(
            f"{kind:<16}{row['faults']:>6}{row['leaderless_s_total']:>14.2f}"
            f"{row['leaderless_s_max']:>8.2f}{row['partition_s_total']:>9.2f}"
            f"{row['longest_ack_gap_s_max']:>13.2f}{row['recovery_s_mean']:>11.2f}"
            f"{row['not_recovered']:>7}"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def fault_cluster(
    directory: Path,
    brokers: int = 3,
    config: dict[str, object] | None = None,
    *,
    verbose: bool = False,
) -> Iterator[FaultCluster]:
    """A started FaultCluster that is closed however the block ends."""
    cluster = FaultCluster(directory, brokers, config, verbose=verbose)
    try:
        cluster.start()
        yield cluster
    finally:
        problems = cluster.close()
        if problems:
            print(f"faultkit cleanup problems: {problems}", file=sys.stderr)
