"""`weir reassign`: move partitions between brokers, as kafka-reassign-partitions.sh does, with
its JSON files and its messages.

- `generate --topics-to-move-json-file F --broker-list 1,2,3` prints the topics' current
  assignment and a proposed one over those brokers (Kafka's default placement, rack-aware when
  every broker has a rack, each topic keeping its replication factor); nothing is changed.
- `execute --reassignment-json-file F` starts the moves the file lists (AlterPartitionReassignments
  to the controller) after printing the current assignment to keep for a rollback. A partition
  already moving is refused unless `--additional` is given, which replaces its target. With
  `--throttle B` the moves copy at B bytes a second (`reassign_throttle`).
- `verify --reassignment-json-file F` says of each partition whether its move is complete,
  and once all are, clears the throttles (unless `--preserve-throttles`).
- `cancel --reassignment-json-file F` cancels the listed moves under way (the partitions go back
  to their original replicas).
- `list` shows every move under way with the replicas being added and removed.

Changing a topic's replication factor is a reassignment to more or fewer replicas.

The files are Kafka's: `{"version": 1, "topics": [{"topic": "t"}]}` and `{"version": 1,
"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}`
(a `log_dirs` entry other than "any" moves that replica to that log directory of its broker,
with `--replica-alter-log-dirs-throttle` as its copy rate: `weir.cli.logdirs`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.describe_configs.v1 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from weir.cli import logdirs
from weir.cli.broker_socket import BrokerConnection, BrokerConnectionError, connect_any
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, security_settings
from weir.cli.reassign_progress import ProgressReporter, ReplicaCopy, replica_copies, summary
from weir.cli.reassign_throttle import (
    Change,
    apply_throttle,
    check_rate,
    clear_throttles,
    throttle_plan,
)
from weir.cluster.placement import (
    CONSISTENT_HASH,
    KAFKA,
    POOL_CONFIG,
    BrokerSpec,
    HashRing,
    PlacementError,
    assign,
    no_broker_in_pool,
)
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity, ClientSettingsError

CLIENT_ID = "weir-reassign"
#: how long a request waits for a controller that is moving, and between looks
CONTROLLER_WAIT_S = 15.0
CONTROLLER_RETRY_S = 0.5
#: how long `verify` waits for the brokers' metadata to show a move the controller completed
METADATA_SETTLE_S = 5.0
TIMEOUT = datetime.timedelta(seconds=30)
TopicPartition = tuple[str, int]
TOPIC_RESOURCE = 2
PLACEMENT_STRATEGY = "replica.placement.strategy"
EXPECTED_RATE = "replica.placement.expected.bytes.per.second"
BROKER_RESOURCE = 4
BROKER_POOL = "broker.pool"


def register(commands: Any) -> None:
    reassign = commands.add_parser(
        "reassign", help="move partitions between brokers (as kafka-reassign-partitions.sh)"
    )
    sub = reassign.add_subparsers(dest="reassign_command", required=True, metavar="ACTION")
    generate = sub.add_parser("generate", help="propose an assignment of topics over brokers")
    generate.add_argument("--topics-to-move-json-file", type=Path, required=True)
    generate.add_argument("--broker-list", required=True, metavar="ID[,ID...]")
    generate.set_defaults(run=run_generate)
    execute = sub.add_parser("execute", help="start the moves a reassignment file lists")
    execute.add_argument("--additional", action="store_true",
                         help="replace the targets of partitions already moving")  # fmt: skip
    execute.add_argument("--throttle", type=int, metavar="BYTES_PER_SECOND",
                         help="hold the moves' replication to this rate (verify removes it)")
    execute.add_argument("--replica-alter-log-dirs-throttle", type=int,
                         metavar="BYTES_PER_SECOND",
                         help="hold moves between a broker's log directories to this rate")
    execute.set_defaults(run=run_execute)
    verify = sub.add_parser("verify", help="whether the moves of a reassignment file are done")
    verify.add_argument("--preserve-throttles", action="store_true",
                        help="leave the throttles in place once the moves are done")
    verify.set_defaults(run=run_verify)
    cancel = sub.add_parser("cancel", help="cancel the moves of a reassignment file")
    cancel.set_defaults(run=run_cancel)
    listing = sub.add_parser("list", help="the moves under way")
    listing.set_defaults(run=run_list)
    for parser in (execute, verify, cancel):
        parser.add_argument("--reassignment-json-file", type=Path, required=True)
    for parser in (generate, execute, verify, cancel, listing):
        add_bootstrap(parser)
        add_client_settings(parser)


# ---- talking to the cluster ----------------------------------------------------------------------


class Cluster:
    """The cluster's metadata, and requests to its controller."""

    def __init__(self, args: argparse.Namespace) -> None:
        try:
            self.security = ClientSecurity.of(security_settings(args))
        except ClientSettingsError as exc:
            raise SystemExit(f"weir: {exc}") from None
        self.bootstrap = args.bootstrap_server
        self.metadata = self._metadata()

    def refresh(self) -> None:
        self.metadata = self._metadata()

    def strategies(self, topics: list[str]) -> dict[str, str]:
        """Each topic's `replica.placement.strategy` (its own, or the brokers' default)."""
        return {topic: values.get(PLACEMENT_STRATEGY) or KAFKA
                for topic, values in self._topic_placement(topics).items()}  # fmt: skip

    def topic_pools(self, topics: list[str]) -> dict[str, str]:
        """Each topic's `replica.placement.pool` ("": none)."""
        return {topic: values.get(POOL_CONFIG) or ""
                for topic, values in self._topic_placement(topics).items()}  # fmt: skip

    def expected_rates(self, topics: list[str]) -> dict[str, int]:
        """Each topic's `replica.placement.expected.bytes.per.second` (0: not known)."""
        return {topic: int(values.get(EXPECTED_RATE) or 0)
                for topic, values in self._topic_placement(topics).items()}  # fmt: skip

    def _topic_placement(self, topics: list[str]) -> dict[str, dict[str, str | None]]:
        if not topics:
            return {}
        found = {}
        keys = (PLACEMENT_STRATEGY, POOL_CONFIG, EXPECTED_RATE)
        for result in self._describe(TOPIC_RESOURCE, topics, keys):
            if result.error_code is not ErrorCode.none:
                raise SystemExit(f"weir: {result.resource_name}: "
                                 f"{result.error_code.name.upper()}: {result.error_message}")
            found[result.resource_name] = {c.name: c.value for c in result.configs}
        return found

    def broker_pools(self) -> dict[int, str]:
        """Each broker's `broker.pool` ("": none), asked of the broker itself; a broker that
        cannot be asked counts as in none."""
        return {node_id: values.get(BROKER_POOL) or ""
                for node_id, values in self.broker_settings((BROKER_POOL,)).items()}  # fmt: skip

    def broker_settings(self, keys: tuple[str, ...]) -> dict[int, dict[str, str | None]]:
        """The settings named `keys` of each broker, asked of the broker itself (nothing for a
        broker that cannot be asked)."""
        settings = {}
        for node in self.metadata.brokers:
            try:
                results = self._describe(BROKER_RESOURCE, [str(node.node_id)], keys,
                                         address=(node.host, node.port))  # fmt: skip
            except BrokerConnectionError:
                results = []
            settings[node.node_id] = {c.name: c.value for r in results for c in r.configs}
        return settings

    def racks(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in self.metadata.brokers}

    def addresses(self) -> dict[int, tuple[str, int]]:
        return {b.node_id: (b.host, b.port) for b in self.metadata.brokers}

    def leaders(self) -> dict[TopicPartition, int]:
        return {(t.name, p.partition_index): p.leader_id
                for t in self.metadata.topics for p in t.partitions}  # fmt: skip

    def _describe(
        self, resource_type: int, names: list[str], keys: tuple[str, ...],
        address: tuple[str, int] | None = None,
    ) -> Any:  # fmt: skip
        body = describe_configs.DescribeConfigsRequest(
            resources=tuple(describe_configs.DescribeConfigsResource(
                resource_type=i8(resource_type), resource_name=name,
                configuration_keys=keys) for name in names),
            include_synonyms=False,
        )  # fmt: skip
        if address is None:
            connection = connect_any(self.bootstrap, self.security, timeout=ADMIN_TIMEOUT,
                                     client_id=CLIENT_ID)  # fmt: skip
        else:
            connection = BrokerConnection(*address, self.security, timeout=ADMIN_TIMEOUT,
                                          client_id=CLIENT_ID)  # fmt: skip
        with connection as conn:
            return conn.call(ApiKey.DESCRIBE_CONFIGS, 1, body).results

    def _metadata(self) -> Any:
        with connect_any(self.bootstrap, self.security, timeout=ADMIN_TIMEOUT,
                         client_id=CLIENT_ID) as conn:  # fmt: skip
            return conn.call(ApiKey.METADATA, 1, MetadataRequest(topics=None))

    def assignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        return {(t.name, p.partition_index): tuple(p.replica_nodes)
                for t in self.metadata.topics for p in t.partitions}  # fmt: skip

    def to_controller(self, api_key: int, body: Any) -> Any:
        """`body` to the controller; while the controller moves (NOT_CONTROLLER, none named
        yet, or the named one not reachable) it is looked up again, for CONTROLLER_WAIT_S."""
        deadline = time.monotonic() + CONTROLLER_WAIT_S
        while True:
            response, why = self._try_controller(api_key, body)
            if response is not None:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"weir: {why}")
            time.sleep(CONTROLLER_RETRY_S)
            self.metadata = self._metadata()
        if response.error_code is not ErrorCode.none:
            message = f": {response.error_message}" if response.error_message else ""
            raise SystemExit(f"weir: {response.error_code.name.upper()}{message}")
        return response

    def _try_controller(self, api_key: int, body: Any) -> tuple[Any, str]:
        """(the controller's response, "") or (None, why it could not be had now)."""
        controller = next((b for b in self.metadata.brokers
                           if b.node_id == self.metadata.controller_id), None)  # fmt: skip
        if controller is None:
            return None, "the cluster names no controller"
        try:
            with BrokerConnection(controller.host, controller.port, self.security,
                                  timeout=ADMIN_TIMEOUT, client_id=CLIENT_ID) as conn:  # fmt: skip
                response = conn.call(api_key, 0, body)
        except BrokerConnectionError as exc:
            return None, f"the controller: {exc}"
        if response.error_code is ErrorCode.not_controller:
            return None, f"broker {controller.node_id} is no longer the controller"
        return response, ""

    def brokers(self) -> list[int]:
        return sorted(b.node_id for b in self.metadata.brokers)

    def alter_configs(
        self, resource_type: int, name: str, changes: list[Change], broker: int | None
    ) -> str | None:
        """IncrementalAlterConfigs of one resource, sent to `broker` (a broker's own configs
        go to it) or to any broker; an error line or None."""
        body = alter_configs.IncrementalAlterConfigsRequest(
            resources=(alter_configs.AlterConfigsResource(
                resource_type=i8(resource_type), resource_name=name,
                configs=tuple(alter_configs.AlterableConfig(
                    name=k, config_operation=i8(op), value=v) for k, v, op in changes)),),
            validate_only=False,
        )  # fmt: skip
        nodes = [b for b in self.metadata.brokers if broker is None or b.node_id == broker]
        if not nodes:
            return f"broker {broker} is not in the cluster"
        why = ""
        for node in nodes:
            try:
                with BrokerConnection(node.host, node.port, self.security, timeout=ADMIN_TIMEOUT,
                                      client_id=CLIENT_ID) as conn:  # fmt: skip
                    [result] = conn.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
            except BrokerConnectionError as exc:
                why = str(exc)
                continue
            if result.error_code is not ErrorCode.none:
                return f"{result.error_code.name.upper()}: {result.error_message}"
            return None
        return why

    def ongoing(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        body = ListPartitionReassignmentsRequest(timeout=i32Timedelta.parse(TIMEOUT), topics=None)
        response = self.to_controller(ApiKey.LIST_PARTITION_REASSIGNMENTS, body)
        return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                              list(p.removing_replicas))
                for t in response.topics for p in t.partitions}  # fmt: skip

    def alter(self, targets: dict[TopicPartition, tuple[int, ...] | None]
              ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:  # fmt: skip
        by_topic: dict[str, list[ReassignablePartition]] = {}
        for (topic, index), target in sorted(targets.items(), key=lambda item: item[0]):
            by_topic.setdefault(topic, []).append(ReassignablePartition(
                partition_index=i32(index),
                replicas=None if target is None else tuple(BrokerId(r) for r in target)))
        body = AlterPartitionReassignmentsRequest(timeout=i32Timedelta.parse(TIMEOUT), topics=tuple(
            ReassignableTopic(name=TopicName(t), partitions=tuple(ps))
            for t, ps in by_topic.items()))  # fmt: skip
        response = self.to_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body)
        return {(t.name, p.partition_index): (p.error_code, p.error_message)
                for t in response.responses for p in t.partitions}  # fmt: skip


def _copies_by_partition(
    cluster: Cluster, moving: dict[TopicPartition, tuple[list[int], list[int], list[int]]]
) -> dict[TopicPartition, list[ReplicaCopy]]:
    """The copies of `moving`'s added replicas, by partition."""
    adding = {tp: added for tp, (_, added, _) in moving.items() if added}
    copies: dict[TopicPartition, list[ReplicaCopy]] = {}
    if adding:
        for copy in replica_copies(cluster.metadata, cluster.security, adding):
            copies.setdefault(copy.partition, []).append(copy)
    return copies


def _drain_progress(cluster: Cluster, moves: dict[TopicPartition, Any]) -> str:
    moving = {tp: state for tp, state in cluster.ongoing().items() if tp in moves}
    cluster.refresh()
    copies = [c for cs in _copies_by_partition(cluster, moving).values() for c in cs]
    return summary(copies, len(moves) - len(moving), len(moves))


# ---- the files -----------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise SystemExit(f"weir: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise SystemExit(f"weir: {path} is not JSON: {exc}") from None


def read_plan(path: Path) -> dict[TopicPartition, tuple[int, ...]]:
    """A reassignment file's partitions and their target replicas."""
    document = _read_json(path)
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SystemExit(f"weir: {path} lists no partitions")
    plan: dict[TopicPartition, tuple[int, ...]] = {}
    for entry in entries:
        try:
            tp = (str(entry["topic"]), int(entry["partition"]))
            replicas = tuple(int(r) for r in entry["replicas"])
        except (KeyError, TypeError, ValueError):
            raise SystemExit(f"weir: {path}: {entry!r} needs a topic, a partition and a list "
                             "of replicas") from None  # fmt: skip
        dirs = entry.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or len(dirs) != len(replicas)):
            raise SystemExit(f"weir: {path}: {tp[0]}-{tp[1]}: log_dirs must list one entry "
                             "per replica")  # fmt: skip
        if tp in plan:
            raise SystemExit(f"weir: {path} lists {tp[0]}-{tp[1]} twice")
        plan[tp] = replicas
    return plan


def plan_json(plan: dict[TopicPartition, tuple[int, ...]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())
    ]})  # fmt: skip


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# ---- the actions ---------------------------------------------------------------------------------


def run_generate(args: argparse.Namespace) -> int:
    document = _read_json(args.topics_to_move_json_file)
    try:
        topics = [str(t["topic"]) for t in document["topics"]]
    except (KeyError, TypeError):
        raise SystemExit(f"weir: {args.topics_to_move_json_file}: expected "
                         '{"topics": [{"topic": "..."}], "version": 1}') from None  # fmt: skip
    try:
        wanted = [int(b) for b in args.broker_list.split(",") if b.strip()]
    except ValueError:
        raise SystemExit(f"weir: --broker-list takes broker ids, not {args.broker_list!r}"
                         ) from None  # fmt: skip
    cluster = Cluster(args)
    known = {b.node_id: b.rack for b in cluster.metadata.brokers}
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise SystemExit(f"weir: brokers {unknown} are not in the cluster")
    current = cluster.assignment()
    missing = sorted(set(topics) - {t for t, _ in current})
    if missing:
        raise SystemExit(f"weir: unknown topic {', '.join(missing)}")
    specs = broker_specs({node_id: known[node_id] for node_id in wanted})
    strategies = cluster.strategies(topics)
    topic_pools = cluster.topic_pools(topics)
    broker_pools = cluster.broker_pools()
    existing, proposed = {}, {}
    for topic in topics:
        partitions = {i: r for (t, i), r in current.items() if t == topic}
        existing.update({(topic, i): r for i, r in partitions.items()})
        factor = len(next(iter(partitions.values())))
        pool = topic_pools.get(topic, "")
        in_pool = [s for s in specs if broker_pools.get(s.node_id, "") == pool]
        if not in_pool:
            raise SystemExit(f"weir: {topic}: {no_broker_in_pool(pool)} (of --broker-list)")
        try:
            placed = assign(strategies[topic], in_pool, topic, len(partitions), factor)
        except PlacementError as exc:
            raise SystemExit(f"weir: {topic}: {exc}") from None
        proposed.update({(topic, i): tuple(r) for i, r in placed.items()})
    print("Current partition replica assignment")
    print(plan_json(existing))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def run_execute(args: argparse.Namespace) -> int:
    check_rate("--throttle", args.throttle)
    check_rate("--replica-alter-log-dirs-throttle", args.replica_alter_log_dirs_throttle)
    plan = read_plan(args.reassignment_json_file)
    dir_moves = logdirs.read_log_dir_moves(
        _read_json(args.reassignment_json_file)["partitions"], args.reassignment_json_file
    )
    cluster = Cluster(args)
    if dir_moves:  # before anything changes: every directory must be its broker's
        logdirs.check_log_dirs(logdirs.broker_addresses(cluster.metadata), cluster.security,
                               dir_moves)  # fmt: skip
    current = cluster.assignment()
    missing = [_name(tp) for tp in plan if tp not in current]
    if missing:
        raise SystemExit(f"weir: unknown partitions {', '.join(missing)}")
    moving = cluster.ongoing()
    if moving and not args.additional:
        raise SystemExit("weir: Cannot execute because there is an existing partition "
                         "assignment.  Use --additional to override this and create a new "
                         "partition assignment in addition to the existing one.")  # fmt: skip
    print("Current partition replica assignment")
    print()
    print(plan_json({tp: current[tp] for tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle is not None:
        _throttle(cluster, plan, current, moving, args.throttle)
    started, failed = _report(cluster.alter(dict(plan)))
    if started:
        print(f"Successfully started partition reassignments for {','.join(started)}")
    if dir_moves and not logdirs.execute_log_dir_moves(
        cluster.bootstrap, cluster.security, dir_moves, args.replica_alter_log_dirs_throttle
    ):
        failed = True
    return 1 if failed else 0


def _throttle(
    cluster: Cluster,
    plan: dict[TopicPartition, tuple[int, ...]],
    current: dict[TopicPartition, tuple[int, ...]],
    moving: dict[TopicPartition, tuple[list[int], list[int], list[int]]],
    rate: int,
) -> None:
    """Set the replication throttle before any move starts; a throttle not set stops the
    execution. (The log directories' throttle goes with their moves, `logdirs`.)"""
    origins = {tp: tuple(r for r in replicas if r not in moving.get(tp, ([], [], []))[1])
               for tp, replicas in current.items()}  # fmt: skip
    errors = apply_throttle(cluster, throttle_plan(plan, origins), rate, None)
    if errors:
        raise SystemExit("weir: throttle not set, no partition moved: " + "; ".join(errors))
    print("Warning: You must run --verify periodically, until the reassignment completes, to "
          "ensure the throttle is removed.")  # fmt: skip
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def _report(outcome: dict[TopicPartition, tuple[ErrorCode, str | None]]) -> tuple[list[str], bool]:
    """The partitions the controller accepted; each refusal goes to stderr. (accepted, any
    refused)"""
    refused = {tp: o for tp, o in outcome.items() if o[0] is not ErrorCode.none}
    for tp, (code, message) in sorted(refused.items()):
        print(f"weir: {_name(tp)}: {code.name.upper()}{f': {message}' if message else ''}",
              file=sys.stderr)  # fmt: skip
    return [_name(tp) for tp in sorted(outcome) if tp not in refused], bool(refused)


def run_verify(args: argparse.Namespace) -> int:
    plan = read_plan(args.reassignment_json_file)
    cluster = Cluster(args)
    moving = cluster.ongoing()
    current = cluster.assignment()
    deadline = time.monotonic() + METADATA_SETTLE_S
    while time.monotonic() < deadline and any(
        tp not in moving and current.get(tp) != target for tp, target in plan.items()
    ):  # a move just completed: the broker answering Metadata may not have heard yet
        time.sleep(CONTROLLER_RETRY_S)
        cluster.refresh()
        current = cluster.assignment()
    print("Status of partition reassignment:")
    failed = False
    copies = _copies_by_partition(cluster, {tp: moving[tp] for tp in plan if tp in moving})
    for tp, target in sorted(plan.items()):
        if tp in moving:
            print(f"Reassignment of partition {_name(tp)} is still in progress.")
            for copy in copies.get(tp, ()):
                print(f"  {copy.describe()}")
        elif current.get(tp) == target:
            print(f"Reassignment of partition {_name(tp)} is completed.")
        else:
            failed = True
            print(f"There is no active reassignment of partition {_name(tp)}, but replica set "
                  f"is {list(current.get(tp, ()))} rather than {list(target)}.")  # fmt: skip
    if failed or any(tp in moving for tp in plan) or args.preserve_throttles:
        return 1 if failed else 0
    brokers = cluster.brokers()
    topics = sorted({topic for topic, _ in plan})
    print(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    print(f"Clearing topic-level throttles on topic(s) {','.join(topics)}")
    errors = clear_throttles(cluster, topics, brokers)
    for error in errors:
        print(f"weir: throttle not cleared on {error}", file=sys.stderr)
    return 1 if errors else 0


def run_cancel(args: argparse.Namespace) -> int:
    plan = read_plan(args.reassignment_json_file)
    cluster = Cluster(args)
    moving = cluster.ongoing()
    wanted = {tp: None for tp in plan if tp in moving}
    if wanted:
        cancelled, failed = _report(cluster.alter(dict(wanted)))
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {','.join(cancelled)}")
        if failed:
            return 1
    idle = [_name(tp) for tp in sorted(plan) if tp not in moving]
    if idle:
        print(f"None of the specified partition reassignments are active: {','.join(idle)}"
              if not wanted else f"Not moving: {','.join(idle)}")  # fmt: skip
    return 0


def run_list(args: argparse.Namespace) -> int:
    moving = Cluster(args).ongoing()
    if not moving:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, (replicas, adding, removing) in sorted(moving.items()):
        print(f"{_name(tp)}: replicas: {','.join(map(str, replicas))}. "
              f"adding: {','.join(map(str, adding))}. "
              f"removing: {','.join(map(str, removing))}.")  # fmt: skip
    return 0


# ---- draining a broker ---------------------------------------------------------------------------


def add_drain(sub: Any) -> None:
    """`weir cluster drain`: registered under `weir cluster`."""
    drain = sub.add_parser("drain", help="move every replica off one broker, before it retires")
    drain.add_argument("--broker", type=int, required=True, metavar="N",
                       help="the broker to empty")  # fmt: skip
    drain.add_argument("--dry-run", action="store_true", help="print the moves, make none")
    drain.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                       help="wait this long for the moves to complete (default 600; 0: start "
                       "them and return)")  # fmt: skip
    add_bootstrap(drain)
    add_client_settings(drain)
    drain.set_defaults(run=run_drain)


class DrainError(ValueError):
    """A broker cannot be emptied: some partition has no other broker to go to."""


def broker_specs(racks: dict[int, str | None]) -> list[BrokerSpec]:
    """Placement's view of brokers, as the controller builds it: racks only when all have one."""
    rack_aware = all(rack is not None for rack in racks.values())
    return [BrokerSpec(b, racks[b] if rack_aware else None) for b in sorted(racks)]


def drain_plan(assignment: dict[TopicPartition, tuple[int, ...]], racks: dict[int, str | None],
               leaving: int, strategies: dict[str, str] | None = None,
               pools: dict[int, str] | None = None, topic_pools: dict[str, str] | None = None,
               ) -> dict[TopicPartition, tuple[int, ...]]:  # fmt: skip
    """The moves that take `leaving` out of every replica set. A consistent-hash topic's
    (`strategies`) replica goes where the ring of the other brokers puts it, so the topic moves
    only the leaving broker's ring share. Any other's goes to the live broker (of `racks`) that
    holds fewest replicas so far among those not in the set, preferring one whose rack the
    set's other replicas do not use yet, so rack spread is kept where the brokers allow.
    Only brokers of the topic's pool (`topic_pools`, the brokers' in `pools`) are candidates.
    Nothing else moves. DrainError names the partitions that have nowhere to go."""
    strategies, pools, topic_pools = strategies or {}, pools or {}, topic_pools or {}
    rings: dict[str, HashRing] = {}

    def ring_of(pool: str) -> HashRing:
        if pool not in rings:
            rings[pool] = HashRing(broker_specs({b: r for b, r in racks.items()
                                                 if b != leaving and pools.get(b, "") == pool}))
        return rings[pool]

    load = {broker: 0 for broker in racks if broker != leaving}
    for replicas in assignment.values():
        for broker in replicas:
            if broker in load:
                load[broker] += 1
    plan, stuck = {}, []
    for tp, replicas in sorted(assignment.items()):
        if leaving not in replicas:
            continue
        staying = [r for r in replicas if r != leaving]
        used = {racks.get(r) for r in staying}
        pool = topic_pools.get(tp[0], "")
        candidates = [b for b in load if b not in staying and pools.get(b, "") == pool]
        if not candidates:
            where = f" in pool {pool!r}" if pool else ""
            stuck.append(f"{tp[0]}-{tp[1]} ({len(replicas)} replicas{where})")
            continue
        if strategies.get(tp[0]) == CONSISTENT_HASH:
            chosen = ring_of(pool).replacement(*tp, replicas.index(leaving), staying)
        else:
            chosen = min(candidates, key=lambda b: (racks[b] is not None and racks[b] in used,
                                                    load[b], b))  # fmt: skip
        load[chosen] += 1
        plan[tp] = tuple(chosen if r == leaving else r for r in replicas)
    if stuck:
        raise DrainError(f"broker {leaving} cannot be emptied: {len(load)} other brokers are "
                         f"too few for {', '.join(stuck)}")  # fmt: skip
    return plan


def run_drain(args: argparse.Namespace) -> int:
    cluster = Cluster(args)
    racks = {b.node_id: b.rack for b in cluster.metadata.brokers}
    if args.broker not in racks:
        raise SystemExit(f"weir: broker {args.broker} is not in the cluster")
    try:
        assignment = cluster.assignment()
        topics = sorted({t for t, _ in assignment})
        moves = drain_plan(assignment, racks, args.broker, cluster.strategies(topics),
                           cluster.broker_pools(), cluster.topic_pools(topics))  # fmt: skip
    except DrainError as exc:
        raise SystemExit(f"weir: {exc}") from None
    if not moves:
        print(f"Broker {args.broker} holds no replicas.")
        return 0
    print(f"Moves that empty broker {args.broker}:")
    print(plan_json(moves))
    if args.dry_run:
        return 0
    if cluster.ongoing():
        raise SystemExit("weir: partitions are being reassigned already; wait for them "
                         "(weir reassign list) and try again")  # fmt: skip
    started, failed = _report(cluster.alter(dict(moves)))
    print(f"Started {len(started)} partition reassignments")
    if failed:
        return 1
    if args.timeout <= 0:
        return 0
    deadline = time.monotonic() + args.timeout
    reporter = ProgressReporter(lambda: _drain_progress(cluster, moves))
    while any(tp in moves for tp in cluster.ongoing()):
        if time.monotonic() > deadline:
            raise SystemExit(f"weir: moves still under way after {args.timeout:g}s "
                             "(weir reassign list)")  # fmt: skip
        reporter.tick()
        time.sleep(1.0)
    print(f"Broker {args.broker} holds no replicas now: it can be stopped.")
    return 0
