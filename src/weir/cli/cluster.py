"""`weir cluster up`: a development cluster on this machine — one ZooKeeper and N brokers.
`weir cluster elect-leaders`: preferred or unclean leader elections, as kafka-leader-election.sh.

Starts ZooKeeper (`weir.cli.zookeeper.ZooKeeperServer`), then `weir broker start --zookeeper ...`
children on consecutive ports, waits for each broker's ready line and prints one line

    weir cluster ready: bootstrap 127.0.0.1:9092,127.0.0.1:9093 zookeeper 127.0.0.1:2181

It stays in the foreground. Ctrl-C or SIGTERM stops the brokers, then ZooKeeper, and exits 0;
a child that dies is reported with the end of its log, the rest are stopped, and it exits 1.
Everything lives under the data directory: zookeeper/, broker-N/ and broker-N.log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from weir.cli import kafka_errors
from weir.cli.clients import add_bootstrap, add_client_settings, admin_client
from weir.cli.zookeeper import (
    LoggedProcess,
    StartError,
    ZooKeeperServer,
    ensure_port_free,
    signals_ignored,
    sigterm_interrupts,
)

HOST = "127.0.0.1"
BROKER_READY = "weir broker ready on "  # the line `weir broker start` prints once it serves
READY_LINE = "weir cluster ready: bootstrap {bootstrap} zookeeper {zookeeper}"
BROKER_STOP_TIMEOUT = 30.0  # a broker's controlled shutdown moves its leaderships first
POLL_SECONDS = 0.1


@dataclass
class BrokerChild:
    """One `weir broker start` child of the cluster."""

    node_id: int
    rack: str | None
    port: int
    data_dir: Path
    #: a TOML file of broker settings every broker of the cluster starts with
    config: Path | None = None
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
        return command + (["--rack", self.rack] if self.rack else [])

    def ready(self) -> bool:
        lines = self.child.log_since_start().splitlines()
        return any(line.startswith(BROKER_READY) for line in lines)


def plan_brokers(
    data_dir: Path, count: int, racks: Sequence[str], base_port: int, config: Path | None = None
) -> list[BrokerChild]:
    """Broker i (1..count) listens on base_port + i - 1 and sits in racks[(i - 1) % len(racks)]."""
    return [
        BrokerChild(
            node_id=i,
            rack=racks[(i - 1) % len(racks)] if racks else None,
            port=base_port + i - 1,
            data_dir=data_dir / f"broker-{i}",
            config=config,
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
    up.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="wait this long for ZooKeeper, then the brokers (default 60)")  # fmt: skip
    up.set_defaults(run=run_up)
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
        args.data_dir, args.brokers, args.racks, args.base_port, args.broker_config
    )
    with sigterm_interrupts():
        try:
            _start(zookeeper, brokers, args.timeout)
            print(ready_line(brokers, zookeeper), flush=True)
            _supervise(zookeeper, brokers)
        except KeyboardInterrupt:
            return 0
        except StartError as exc:
            print(f"weir: {exc}", file=sys.stderr)
            return 1
        finally:
            with signals_ignored():
                _stop(zookeeper, brokers)


def _start(zookeeper: ZooKeeperServer, brokers: Sequence[BrokerChild], timeout: float) -> None:
    for broker in brokers:  # before anything starts, so a taken port fails fast
        ensure_port_free(HOST, broker.port)
    zookeeper.start()
    zookeeper.wait_ready(timeout)
    for broker in brokers:
        broker.child.spawn(broker.command(zookeeper.connect))
    deadline = time.monotonic() + timeout
    while not all(broker.ready() for broker in brokers):
        _check_running(zookeeper, brokers)
        if time.monotonic() > deadline:
            late = next(broker for broker in brokers if not broker.ready())
            raise StartError(f"{late.child.name} not ready within {timeout:g}s; "
                             f"{late.child.describe_log()}")  # fmt: skip
        time.sleep(POLL_SECONDS)


def _supervise(zookeeper: ZooKeeperServer, brokers: Sequence[BrokerChild]) -> NoReturn:
    """Watch the children until one exits (StartError) or a signal interrupts."""
    while True:
        _check_running(zookeeper, brokers)
        time.sleep(POLL_SECONDS)


def _check_running(zookeeper: ZooKeeperServer, brokers: Sequence[BrokerChild]) -> None:
    for child in (zookeeper.child, *(broker.child for broker in brokers)):
        if child.process is not None and child.poll() is not None:
            raise child.exit_error()


def _stop(zookeeper: ZooKeeperServer, brokers: Sequence[BrokerChild]) -> None:
    """Brokers first (all at once), while ZooKeeper still serves their shutdown; then ZooKeeper."""
    for broker in brokers:
        broker.child.terminate()
    deadline = time.monotonic() + BROKER_STOP_TIMEOUT
    for broker in brokers:
        broker.child.wait_stopped(max(0.0, deadline - time.monotonic()))
    zookeeper.stop()


def run_elect_leaders(args: argparse.Namespace) -> int:
    try:
        partitions = _election_partitions(args)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 2
    admin = admin_client(args)
    kind = ElectionType.PREFERRED if args.election_type == "preferred" else ElectionType.UNCLEAN
    try:
        results = admin.elect_leaders(kind, partitions).result()
    except KafkaException as exc:
        return kafka_errors.fail(exc)
    elected, not_needed, failed = [], [], []
    for tp, outcome in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        error = outcome.args[0] if isinstance(outcome, KafkaException) else outcome
        if error is None:
            elected.append(name)
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            not_needed.append(name)
        else:
            failed.append(f"{name}: {error.str()}")
    label = args.election_type.upper()
    if elected:
        print(f"Successfully completed leader election ({label}) for partitions "
              + ", ".join(elected))  # fmt: skip
    if not_needed:
        print("Valid replica already elected for partitions " + ", ".join(not_needed))
    for line in failed:
        print(f"Error completing leader election ({label}) for partition: {line}",
              file=sys.stderr)  # fmt: skip
    return 1 if failed else 0


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
