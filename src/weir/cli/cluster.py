"""`weir cluster up`: a development cluster on this machine — one ZooKeeper and N brokers.
`weir cluster elect-leaders`: preferred or unclean leader elections, as kafka-leader-election.sh.
`weir cluster roll` (weir.cli.roll) and `weir cluster drain` (weir.cli.reassign) are registered
here too.

Starts ZooKeeper (`weir.cli.zookeeper.ZooKeeperServer`), then `weir broker start --zookeeper ...`
children on consecutive ports, waits for each broker's ready line and prints one line

    weir cluster ready: bootstrap 127.0.0.1:9092,127.0.0.1:9093 zookeeper 127.0.0.1:2181

It stays in the foreground. Ctrl-C or SIGTERM stops the brokers, then ZooKeeper, and exits 0.
A broker that dies is reported with the end of its log and the others keep running;
`weir cluster stop-broker N` and `weir cluster restart-broker N` (same --data-dir) ask the running
`cluster up` to stop or (re)start one. ZooKeeper dying stops everything and exits 1.
Everything lives under the data directory: zookeeper/, broker-N/ and broker-N.log.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from confluent_kafka import ElectionType, KafkaException, TopicPartition

from weir.cli import kafka_errors, reassign, roll
from weir.cli.clients import add_bootstrap, add_client_settings, admin_client
from weir.cli.cluster_requests import ControlError, ask_cluster_up, control_address, elect_leaders
from weir.cli.supervise import (
    Interrupted,
    LoggedProcess,
    StartError,
    StopRequest,
    stop_all,
)
from weir.cli.zookeeper import ZooKeeperServer, ensure_port_free

HOST = "127.0.0.1"
BROKER_READY = "weir broker ready on "  # the line `weir broker start` prints once it serves
READY_LINE = "weir cluster ready: bootstrap {bootstrap} zookeeper {zookeeper}"
BROKER_STOP_TIMEOUT = 30.0  # a broker's controlled shutdown moves its leaderships first
POLL_SECONDS = 0.1
CONTROL_READ_SECONDS = 5.0  # a control request is one short line


@dataclass
class BrokerChild:
    """One `weir broker start` child of the cluster."""

    node_id: int
    rack: str | None
    port: int
    data_dir: Path
    #: a TOML file of broker settings every broker of the cluster starts with
    config: Path | None = None
    #: where it serves Prometheus metrics (`--metrics-port`); None: not served
    metrics_port: int | None = None
    child: LoggedProcess = field(init=False)

    def __post_init__(self) -> None:
        log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.child = LoggedProcess(f"broker {self.node_id}", log_path)

    @property
    def listen(self) -> str:
        return f"{HOST}:{self.port}"

    def command(self, zookeeper: str) -> list[str]:
        command = [sys.executable, "-m", "weir.cli.main", "broker", "start",
                   "--zookeeper", zookeeper, "--node-id", str(self.node_id),
                   "--data-dir", str(self.data_dir), "--listen", self.listen]  # fmt: skip
        if self.config is not None:
            command += ["--config", str(self.config)]
        if self.metrics_port is not None:
            command += ["--metrics-port", str(self.metrics_port)]
        return command + (["--rack", self.rack] if self.rack else [])

    def ready(self) -> bool:
        lines = self.child.log_since_start().splitlines()
        return any(line.startswith(BROKER_READY) for line in lines)


def plan_brokers(
    data_dir: Path,
    count: int,
    racks: Sequence[str],
    base_port: int,
    config: Path | None = None,
    metrics_base_port: int | None = None,
) -> list[BrokerChild]:
    """Broker i (1..count) listens on base_port + i - 1, serves its metrics on
    metrics_base_port + i - 1 (if given) and sits in racks[(i - 1) % len(racks)]."""
    return [
        BrokerChild(
            node_id=i,
            rack=racks[(i - 1) % len(racks)] if racks else None,
            port=base_port + i - 1,
            data_dir=data_dir / f"broker-{i}",
            config=config,
            metrics_port=None if metrics_base_port is None else metrics_base_port + i - 1,
        )
        for i in range(1, count + 1)
    ]


def ready_line(brokers: Sequence[BrokerChild], zookeeper: ZooKeeperServer) -> str:
    bootstrap = ",".join(broker.listen for broker in brokers)
    return READY_LINE.format(bootstrap=bootstrap, zookeeper=zookeeper.connect)


def register(commands: Any) -> None:
    parser = commands.add_parser("cluster", help="run a development cluster on this machine")
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = sub.add_parser("up", help="start ZooKeeper and N brokers in the foreground")
    up.add_argument("--brokers", type=_positive, required=True, metavar="N",
                    help="number of brokers (node ids 1..N)")  # fmt: skip
    up.add_argument("--racks", type=_racks, default=[], metavar="A,B,C",
                    help="broker i gets rack number (i-1) mod len(racks)")  # fmt: skip
    up.add_argument("--broker-config", type=Path, metavar="FILE",
                    help="TOML file of broker settings for every broker (as broker start "
                    "--config), e.g. replica.selector.class = \"rack-aware\"")  # fmt: skip
    up.add_argument("--data-dir", type=Path, default=Path("weir-cluster"),
                    help="where everything is kept (default ./weir-cluster)")  # fmt: skip
    up.add_argument("--zookeeper-port", type=int, default=2181, metavar="P",
                    help="ZooKeeper's client port (default 2181)")  # fmt: skip
    up.add_argument("--base-port", type=int, default=9092, metavar="P",
                    help="broker i listens on P + i - 1 (default 9092)")  # fmt: skip
    up.add_argument("--metrics-base-port", type=int, metavar="P",
                    help="broker i serves Prometheus metrics on P + i - 1 (deploy/prometheus.yml "
                    "scrapes 9308-9310)")  # fmt: skip
    up.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="wait this long for ZooKeeper, then the brokers (default 60)")  # fmt: skip
    up.set_defaults(run=run_up)
    for action, text in (("stop-broker", "stop one broker of `weir cluster up`; it stays down"),
                         ("restart-broker", "(re)start one broker of `weir cluster up`")):
        control = sub.add_parser(action, help=text)
        control.add_argument("node_id", type=_positive, metavar="N", help="the broker's node id")
        control.add_argument("--data-dir", type=Path, default=Path("weir-cluster"),
                             help="the data directory `weir cluster up` was given "
                                  "(default ./weir-cluster)")
        control.set_defaults(run=run_control)
    reassign.add_drain(sub)
    roll.add_roll(sub)
    elect = sub.add_parser(
        "elect-leaders",
        help="elect preferred leaders, or leaders where there are none",
    )
    add_bootstrap(elect)
    add_client_settings(elect)
    elect.add_argument(
        "--election-type",
        choices=["preferred", "unclean"],
        required=True,
        help="preferred: back to each partition's first replica when it is in sync; "
        "unclean: any live replica for partitions without a leader",
    )
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true")
    which.add_argument("--topic", help="this topic's partitions (all, or --partition)")
    which.add_argument("--path-to-json-file", type=Path, metavar="FILE",
                       help='{"partitions": [{"topic": T, "partition": P}, ...]}')  # fmt: skip
    elect.add_argument("--partition", type=int, help="with --topic: only this partition")
    elect.set_defaults(run=run_elect_leaders)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _racks(text: str) -> list[str]:
    racks = [rack.strip() for rack in text.split(",")]
    if not all(racks):
        raise argparse.ArgumentTypeError(f"empty rack name in {text!r}")
    return racks


def run_up(args: argparse.Namespace) -> int:
    zookeeper = ZooKeeperServer(args.data_dir / "zookeeper", host=HOST, port=args.zookeeper_port)
    brokers = plan_brokers(
        args.data_dir, args.brokers, args.racks, args.base_port, args.broker_config,
        args.metrics_base_port,
    )
    with StopRequest() as stop, ControlSocket(args.data_dir) as control:
        supervisor = Supervisor(zookeeper, brokers, stop, args.timeout)
        try:
            supervisor.start()
            print(ready_line(brokers, zookeeper), flush=True)
            supervisor.run(control)
        except Interrupted:
            return 0
        except StartError as exc:
            print(f"weir: {exc}", file=sys.stderr)
            return 1
        finally:
            supervisor.stop_everything()


class Supervisor:
    """ZooKeeper and the brokers of `weir cluster up`, watched from the main thread.

    A broker that dies is reported once and left down (the others keep serving; failover drills
    need exactly that) until `weir cluster restart-broker N` asks for it; ZooKeeper dying ends
    the cluster. Every stop is bounded: SIGTERM, a deadline, SIGKILL, and a report of what had
    to be killed."""

    def __init__(
        self,
        zookeeper: ZooKeeperServer,
        brokers: Sequence[BrokerChild],
        stop: StopRequest,
        timeout: float,
    ) -> None:
        self.zookeeper = zookeeper
        self.brokers = {broker.node_id: broker for broker in brokers}
        self.stop = stop
        self.timeout = timeout
        self.down: set[int] = set()  # reported dead, or stopped on request

    def start(self) -> None:
        for broker in self.brokers.values():  # before anything starts, so a taken port fails fast
            ensure_port_free(HOST, broker.port)
            if broker.metrics_port is not None:
                ensure_port_free(HOST, broker.metrics_port)
        self.zookeeper.start()
        self.zookeeper.wait_ready(self.timeout, self.stop)
        for broker in self.brokers.values():
            broker.child.spawn(broker.command(self.zookeeper.connect))
        deadline = time.monotonic() + self.timeout
        while late := [b for b in self.brokers.values() if not b.ready()]:
            for broker in late:
                if broker.child.poll() is not None:
                    raise broker.child.exit_error()
            if self.zookeeper.poll() is not None:
                raise self.zookeeper.child.exit_error()
            if time.monotonic() > deadline:
                raise StartError(f"{late[0].child.name} not ready within {self.timeout:g}s; "
                                 f"{late[0].child.describe_log()}")  # fmt: skip
            self.stop.sleep(POLL_SECONDS)

    def run(self, control: ControlSocket) -> NoReturn:
        """Watch the children and serve control requests until a stop is requested
        (Interrupted) or ZooKeeper dies (StartError)."""
        while True:
            if self.zookeeper.poll() is not None:
                raise self.zookeeper.child.exit_error()
            for node_id, broker in self.brokers.items():
                if node_id not in self.down and broker.child.poll() is not None:
                    self.down.add(node_id)
                    self._report_death(broker)
            control.serve(self.handle)
            self.stop.sleep(POLL_SECONDS)

    @staticmethod
    def _report_death(broker: BrokerChild) -> None:
        print(f"weir: {broker.child.name} {broker.child.describe_exit()}; the others keep "
              f"running (`weir cluster restart-broker {broker.node_id}` starts it again); "
              f"{broker.child.describe_log()}", file=sys.stderr, flush=True)  # fmt: skip

    def handle(self, action: str, node_id: int) -> str:
        """One control request: the answer line, "ok ..." or "error ..."."""
        broker = self.brokers.get(node_id)
        if broker is None:
            return f"error no broker {node_id} in this cluster (brokers {min(self.brokers)}.." \
                   f"{max(self.brokers)})"  # fmt: skip
        if action == "stop-broker":
            return self.stop_broker(broker)
        if action == "restart-broker":
            stopped = self.stop_broker(broker) if broker.child.running else ""
            return self.start_broker(broker, stopped)
        return f"error unknown action {action!r}"

    def stop_broker(self, broker: BrokerChild) -> str:
        self.down.add(broker.node_id)
        if not broker.child.running:
            return f"ok {broker.child.name} was not running"
        if broker.child.stop(BROKER_STOP_TIMEOUT):
            return (f"ok {broker.child.name} killed: not stopped {BROKER_STOP_TIMEOUT:g}s "
                    "after SIGTERM")  # fmt: skip
        return f"ok {broker.child.name} stopped"

    def start_broker(self, broker: BrokerChild, stopped: str) -> str:
        prefix = f"{stopped.removeprefix('ok ')}; " if stopped else ""
        broker.child.spawn(broker.command(self.zookeeper.connect))
        deadline = time.monotonic() + self.timeout
        while not broker.ready():
            if broker.child.poll() is not None:
                return f"error {prefix}{broker.child.exit_error()}"
            if time.monotonic() > deadline:
                return f"error {prefix}{broker.child.name} not ready within {self.timeout:g}s"
            self.stop.sleep(POLL_SECONDS)
        self.down.discard(broker.node_id)
        return f"ok {prefix}{broker.child.name} ready on {broker.listen}"

    def stop_everything(self) -> None:
        """Brokers first (all at once), while ZooKeeper still serves their shutdown; then
        ZooKeeper. Each group within its bound; what had to be killed is reported."""
        killed = stop_all([broker.child for broker in self.brokers.values()], BROKER_STOP_TIMEOUT)
        if self.zookeeper.stop():
            killed.append(self.zookeeper.child.name)
        if killed:
            print(f"weir: killed after the stop timeout: {', '.join(killed)}", file=sys.stderr)


class ControlSocket:
    """The Unix socket `weir cluster stop-broker|restart-broker` talk to: one request line
    ("ACTION NODE_ID"), one answer line. Its name is abstract (no file to clean up), derived from
    the resolved data directory, so commands find the cluster by its --data-dir."""

    def __init__(self, data_dir: Path) -> None:
        self.address = control_address(data_dir)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def __enter__(self) -> ControlSocket:
        try:
            self.listener.bind(self.address)
        except OSError:
            self.listener.close()
            raise StartError("another `weir cluster up` is running with this data directory") \
                from None  # fmt: skip
        self.listener.listen(4)
        self.listener.setblocking(False)
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()

    def serve(self, handle: Callable[[str, int], str]) -> None:
        """Answer the requests waiting now, if any (never blocks on an idle socket)."""
        while True:
            try:
                connection, _ = self.listener.accept()
            except BlockingIOError:
                return
            with connection:
                connection.settimeout(CONTROL_READ_SECONDS)
                try:
                    answer = self._answer(connection.makefile("r").readline(), handle)
                    connection.sendall(answer.encode() + b"\n")
                except OSError:
                    continue  # the asking command went away: nothing to tell it

    @staticmethod
    def _answer(line: str, handle: Callable[[str, int], str]) -> str:
        match line.split():
            case [action, node] if node.isdigit():
                return handle(action, int(node))
            case _:
                return f"error malformed request {line.strip()!r}"


def run_control(args: argparse.Namespace) -> int:
    """`weir cluster stop-broker|restart-broker N`: ask the running `weir cluster up`."""
    try:
        print(ask_cluster_up(args.data_dir, args.cluster_command, args.node_id))
    except ControlError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 1
    return 0


def run_elect_leaders(args: argparse.Namespace) -> int:
    try:
        partitions = _election_partitions(args)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 2
    admin = admin_client(args)
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    try:
        election = elect_leaders(admin, kind, partitions)
    except KafkaException as exc:
        return kafka_errors.fail(exc)
    label = args.election_type.upper()
    if election.elected:
        print(f"Successfully completed leader election ({label}) for partitions "
              + ", ".join(election.elected))  # fmt: skip
    if election.not_needed:
        print("Valid replica already elected for partitions " + ", ".join(election.not_needed))
    for tp, error in election.failed:
        print(f"Error completing leader election ({label}) for partition: "
              f"{tp.topic}-{tp.partition}: {error.str()}", file=sys.stderr)  # fmt: skip
    return 1 if election.failed else 0


def _election_partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions named by the flags; None for every partition of the cluster."""
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file is not None:
        document = json.loads(args.path_to_json_file.read_text(encoding="utf-8"))
        return [TopicPartition(str(p["topic"]), int(p["partition"]))
                for p in document["partitions"]]  # fmt: skip
    if args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    admin = admin_client(args)
    topic = admin.list_topics(args.topic, timeout=10).topics.get(args.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        raise ValueError(f"unknown topic {args.topic!r}")
    return [TopicPartition(args.topic, index) for index in sorted(topic.partitions)]
