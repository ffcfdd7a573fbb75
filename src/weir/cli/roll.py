"""`weir cluster roll`: restart a cluster's brokers one at a time, as an operator rolls a Kafka
cluster for a configuration change or an upgrade, the cluster fully replicated between restarts.

The brokers go in node-id order, the controller last (so the controller moves once). For each:

1. restart it: by default ask the `weir cluster up` running on --data-dir (restart-broker:
   SIGTERM, so a controlled shutdown that moves its leaderships away first, then a start waited
   until the broker is ready); with --command CMD, run CMD through /bin/sh with `{id}` replaced
   by the node id (`systemctl restart weir@{id}`; it must return once the broker has stopped and
   started again), then wait until the broker is registered and answers Metadata again;
2. wait until every partition has its full ISR in the Metadata of every live broker;
3. elect preferred leaders of every partition (ElectLeaders, as `weir cluster elect-leaders`).

The cluster must be fully replicated before the first restart too. Each wait (the ISR, an
election, a --command and the registration after it) is bounded by --timeout; a restart through
`weir cluster up` by that command's own --timeout. A failure stops the roll: one line on stderr
names the broker, what went wrong (the under-replicated partitions with their replicas and ISR,
or the command's status and output) and the brokers not restarted; the exit status is 1. Bad
arguments exit 2 with nothing done.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.metadata.v1.request import MetadataRequest

from weir.cli import kafka_errors
from weir.cli.broker_socket import BrokerConnection, BrokerConnectionError, connect_any
from weir.cli.clients import add_bootstrap, add_client_settings, admin_client, security_settings
from weir.cli.cluster_requests import ControlError, Election, ask_cluster_up, elect_leaders
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity, ClientSettingsError

CLIENT_ID = "weir-roll"
ID_PLACEHOLDER = "{id}"
DEFAULT_TIMEOUT_S = 300.0
#: between two looks at the cluster while waiting
POLL_S = 0.5
#: how long one broker may take to answer one Metadata request
METADATA_TIMEOUT_S = 10.0
#: how many problems a failure names before "and N more"
SHOWN_PROBLEMS = 10
#: the lines of a failed --command's output that are shown
SHOWN_OUTPUT_LINES = 5
TopicPartition = tuple[str, int]
#: an ElectLeaders request refused as a whole while the controller moves, or lost on the way
CONTROLLER_MOVING = frozenset({
    KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
})  # fmt: skip


class RollError(RuntimeError):
    """A step of the roll failed; the message says what, for the operator."""


def add_roll(sub: Any) -> None:
    """`weir cluster roll`: registered under `weir cluster`."""
    roll = sub.add_parser("roll", help="restart every broker in turn, fully replicated between")
    how = roll.add_mutually_exclusive_group()
    how.add_argument("--data-dir", type=Path, default=Path("weir-cluster"),
                     help="restart through the `weir cluster up` running on this data directory "
                          "(default ./weir-cluster)")  # fmt: skip
    how.add_argument("--command", metavar="CMD",
                     help="restart broker N by running CMD with {id} replaced by N, e.g. "
                          "'systemctl restart weir@{id}'")  # fmt: skip
    roll.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S,
                      metavar="SECONDS", help="bound of each wait: the ISR, an election, a "
                      f"--command (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    add_bootstrap(roll)
    add_client_settings(roll)
    roll.set_defaults(run=run_roll)


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


# ---- what the roll decides ---------------------------------------------------------------------


def roll_order(node_ids: Iterable[int], controller: int | None) -> list[int]:
    """The brokers in node-id order, the controller last."""
    return sorted(node_ids, key=lambda node_id: (node_id == controller, node_id))


def restart_command(template: str, node_id: int) -> str:
    """`template` with every `{id}` replaced by the node id (other braces, a shell's `${X}`
    among them, are left as they are)."""
    return template.replace(ID_PLACEHOLDER, str(node_id))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as one broker's Metadata shows it."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def fully_replicated(self) -> bool:
        return self.leader >= 0 and set(self.isr) == set(self.replicas)

    def describe(self) -> str:
        replicas, isr = ",".join(map(str, self.replicas)), ",".join(map(str, self.isr))
        return f"{self.name} (leader {self.leader}, replicas {replicas}, isr {isr})"


@dataclass(frozen=True, slots=True)
class BrokerView:
    """What one broker answers to Metadata for every topic."""

    controller: int
    brokers: dict[int, tuple[str, int]]
    partitions: dict[TopicPartition, PartitionState]


def replication_problems(
    views: Mapping[int, BrokerView | str], expected: Iterable[int]
) -> list[str]:
    """What keeps the cluster from being fully replicated, as the views of the `expected`
    brokers show it (a string is why that broker gave none): a broker that does not answer or
    is not registered, then `partition_problems`. Empty when every broker answers and every
    partition has its full ISR everywhere."""
    expected = sorted(expected)
    answered = {n: v for n, v in views.items() if isinstance(v, BrokerView)}
    problems = [f"broker {n} does not answer: {views.get(n, 'not asked')}"
                for n in expected if n not in answered]  # fmt: skip
    registered = set().union(*(v.brokers for v in answered.values())) if answered else set()
    problems += [f"broker {n} is not registered" for n in expected if n not in registered]
    return problems + partition_problems(answered)


def partition_problems(views: Mapping[int, BrokerView]) -> list[str]:
    """The partitions some broker does not list, or shows without a leader or its full ISR;
    each named once, as the first broker (by node id) showing the problem shows it."""
    every = sorted(set().union(*(v.partitions for v in views.values())) if views else ())
    problems = []
    for tp in every:
        states = [(n, v.partitions.get(tp)) for n, v in sorted(views.items())]
        if missing := [n for n, state in states if state is None]:
            problems.append(f"{tp[0]}-{tp[1]} not listed by broker {missing[0]} yet")
        elif lagging := [s for _, s in states if s is not None and not s.fully_replicated]:
            problems.append(lagging[0].describe())
    return problems


def summary(problems: list[str]) -> str:
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    more = len(problems) - SHOWN_PROBLEMS
    return f"{shown}; and {more} more" if more > 0 else shown


# ---- reading the cluster -----------------------------------------------------------------------


class ClusterMetadata:
    """Metadata v1 from the brokers themselves, one connection per request: the bootstrap
    servers first, then every broker address learnt so far (the bootstrap broker may be the
    one restarting)."""

    def __init__(self, bootstrap: str, security: ClientSecurity) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.addresses: dict[int, tuple[str, int]] = {}

    def any_view(self) -> BrokerView:
        known = ",".join(f"{host}:{port}" for host, port in self.addresses.values())
        servers = ",".join(filter(None, (self.bootstrap, known)))
        with connect_any(servers, self.security, timeout=METADATA_TIMEOUT_S,
                         client_id=CLIENT_ID) as conn:  # fmt: skip
            return self._learn(conn)

    def view_of(self, node_id: int) -> BrokerView:
        host, port = self.addresses[node_id]
        with BrokerConnection(host, port, self.security, timeout=METADATA_TIMEOUT_S,
                              client_id=CLIENT_ID) as conn:  # fmt: skip
            return self._learn(conn)

    def views(self, node_ids: Iterable[int]) -> dict[int, BrokerView | str]:
        """Each broker's own view, or why it gave none."""
        self.any_view()
        views: dict[int, BrokerView | str] = {}
        for node_id in node_ids:
            try:
                views[node_id] = self.view_of(node_id)
            except (BrokerConnectionError, KeyError) as exc:
                views[node_id] = "its address is unknown" if isinstance(exc, KeyError) else str(exc)
        return views

    def _learn(self, conn: BrokerConnection) -> BrokerView:
        response = conn.call(ApiKey.METADATA, 1, MetadataRequest(topics=None))
        view = BrokerView(
            controller=int(response.controller_id),
            brokers={int(b.node_id): (b.host, int(b.port)) for b in response.brokers},
            partitions={
                (t.name, int(p.partition_index)): PartitionState(
                    topic=t.name, partition=int(p.partition_index), leader=int(p.leader_id),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                )
                for t in response.topics if int(t.error_code) == 0 for p in t.partitions
            },
        )  # fmt: skip
        self.addresses.update(view.brokers)
        return view


def wait_for(check: Callable[[], list[str]], timeout: float, failure: str) -> float:
    """Call `check` until it finds no problem; the seconds it took. After `timeout` seconds,
    RollError: "`failure` after T s: " and the last problems."""
    started = time.monotonic()
    while True:
        try:
            problems = check()
        except BrokerConnectionError as exc:
            problems = [str(exc)]
        if not problems:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RollError(f"{failure} after {timeout:g}s: {summary(problems)}")
        time.sleep(POLL_S)


def wait_fully_replicated(
    cluster: ClusterMetadata, brokers: list[int], timeout: float
) -> tuple[float, int]:
    """Wait until every broker answers and every partition has its full ISR everywhere;
    (the seconds it took, how many partitions were not fully replicated at the first look)."""
    first_look: list[int] = []

    def check() -> list[str]:
        views = cluster.views(brokers)
        if not first_look:
            answered = {n: v for n, v in views.items() if isinstance(v, BrokerView)}
            first_look.append(len(partition_problems(answered)))
        return replication_problems(views, brokers)

    took = wait_for(check, timeout, "not fully replicated")
    return took, first_look[0] if first_look else 0


# ---- restarting one broker ---------------------------------------------------------------------


class Restarter(Protocol):
    def restart(self, node_id: int, timeout: float) -> str:
        """Restart the broker and wait until it is back; what to say about it."""
        ...


@dataclass
class ClusterUpRestart:
    """Through the control socket of `weir cluster up` (restart-broker)."""

    data_dir: Path

    def restart(self, node_id: int, timeout: float) -> str:
        try:
            return ask_cluster_up(self.data_dir, "restart-broker", node_id)
        except ControlError as exc:
            raise RollError(str(exc)) from None


@dataclass
class CommandRestart:
    """By running the operator's command, then waiting for the broker to register again."""

    template: str
    cluster: ClusterMetadata

    def restart(self, node_id: int, timeout: float) -> str:
        command = restart_command(self.template, node_id)
        self._run(command, timeout)
        took = wait_for(lambda: self._not_back(node_id), timeout, "not back")
        return f"`{command}` done; registered again after {took:.1f}s"

    @staticmethod
    def _run(command: str, timeout: float) -> None:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, capture_output=True,
                text=True, timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise RollError(f"`{command}` still running after {timeout:g}s") from None
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()[-SHOWN_OUTPUT_LINES:]
            said = f": {' | '.join(output)}" if output else ""
            raise RollError(f"`{command}` exited with status {done.returncode}{said}")

    def _not_back(self, node_id: int) -> list[str]:
        if node_id not in self.cluster.any_view().brokers:
            return [f"broker {node_id} is not registered"]
        self.cluster.view_of(node_id)  # it answers: BrokerConnectionError is "not yet"
        return []


# ---- the roll ----------------------------------------------------------------------------------


@dataclass
class Roll:
    """The steps of one roll, each printed as it ends."""

    cluster: ClusterMetadata
    #: a new admin client that has reached the cluster
    connect_admin: Callable[[], AdminClient]
    restarter: Restarter
    timeout: float
    admin: AdminClient | None = None

    def broker(self, node_id: int, brokers: list[int]) -> None:
        started = time.monotonic()
        said = self.restarter.restart(node_id, self.timeout)
        print(f"Broker {node_id}: restarted in {time.monotonic() - started:.1f}s ({said})",
              flush=True)  # fmt: skip
        took, lagging = wait_fully_replicated(self.cluster, brokers, self.timeout)
        count = len(self.cluster.any_view().partitions)
        print(f"Broker {node_id}: all {count} partitions fully replicated after {took:.1f}s "
              f"({lagging} under-replicated when it came back)", flush=True)  # fmt: skip
        self.elect_preferred(f"Broker {node_id}")

    def elect_preferred(self, label: str) -> None:
        """Preferred leaders for every partition, the failed ones asked again until the
        timeout (a controller that has not seen the ISR grow yet refuses them)."""
        started, deadline = time.monotonic(), time.monotonic() + self.timeout
        election = self._elect(None, deadline)
        elected, already = len(election.elected), len(election.not_needed)
        while election.failed:
            if time.monotonic() > deadline:
                failures = [f"{tp.topic}-{tp.partition}: {kafka_errors.error_line(e)}"
                            for tp, e in election.failed]  # fmt: skip
                raise RollError(f"preferred leader election failed: {summary(failures)}")
            time.sleep(POLL_S)
            election = self._elect([tp for tp, _ in election.failed], deadline)
            elected, already = elected + len(election.elected), already + len(election.not_needed)
        print(f"{label}: preferred leader election: {elected} partitions elected, {already} "
              f"already led by their preferred replica ({time.monotonic() - started:.1f}s)",
              flush=True)  # fmt: skip

    def _elect(self, partitions: list[KafkaTopicPartition] | None, deadline: float) -> Election:
        """One ElectLeaders request, asked again while the controller moves (NOT_CONTROLLER
        from a controller just restarted): each time with a new admin client, which looks the
        controller up afresh."""
        while True:
            if self.admin is None:
                self.admin = self.connect_admin()
            try:
                return elect_leaders(self.admin, ElectionType.PREFERRED, partitions)
            except KafkaException as exc:
                error = kafka_errors.kafka_error(exc)
                if error is None or error.code() not in CONTROLLER_MOVING:
                    raise
                if time.monotonic() > deadline:
                    raise
            self.admin = None
            time.sleep(POLL_S)


def run_roll(args: argparse.Namespace) -> int:
    if args.command is not None and ID_PLACEHOLDER not in args.command:
        print(f"weir: --command must name the broker with {ID_PLACEHOLDER}, as in "
              "'systemctl restart weir@{id}'", file=sys.stderr)  # fmt: skip
        return 2
    try:
        security = ClientSecurity.of(security_settings(args))
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None
    cluster = ClusterMetadata(args.bootstrap_server, security)
    view = cluster.any_view()
    order = roll_order(view.brokers, view.controller)
    restarter: Restarter = (CommandRestart(args.command, cluster) if args.command is not None
                            else ClusterUpRestart(args.data_dir))  # fmt: skip
    roll = Roll(cluster, lambda: admin_client(args), restarter, args.timeout)
    roll.admin = roll.connect_admin()  # before anything restarts: a refused client stops here
    return _roll(roll, order, view.controller)


def _roll(roll: Roll, order: list[int], controller: int) -> int:
    started = time.monotonic()
    last = f"controller {controller} last" if controller in order else "no controller named"
    print(f"Rolling {len(order)} brokers in the order {', '.join(map(str, order))} ({last})",
          flush=True)  # fmt: skip
    try:
        took, _ = wait_fully_replicated(roll.cluster, order, roll.timeout)
    except RollError as exc:
        print(f"weir: not rolling: {exc}", file=sys.stderr)
        return 1
    print(f"All {len(roll.cluster.any_view().partitions)} partitions fully replicated "
          f"({took:.1f}s)", flush=True)  # fmt: skip
    for index, node_id in enumerate(order):
        try:
            roll.broker(node_id, order)
        except (RollError, KafkaException) as exc:
            error = kafka_errors.kafka_error(exc)
            reason = kafka_errors.error_line(error) if error is not None else str(exc)
            untouched = _not_restarted(order[index + 1 :])
            print(f"weir: broker {node_id}: {reason}; the roll stopped, {untouched}",
                  file=sys.stderr)  # fmt: skip
            return 1
    print(f"Rolled {len(order)} brokers in {time.monotonic() - started:.1f}s")
    return 0


def _not_restarted(rest: list[int]) -> str:
    if not rest:
        return "it was the last broker"
    noun = "broker" if len(rest) == 1 else "brokers"
    return f"{noun} {', '.join(map(str, rest))} not restarted"
