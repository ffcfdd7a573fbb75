"""`weir log-dirs describe`: every broker's log directories with the size and offset lag of each
partition replica they hold (DescribeLogDirs), printed as kafka-log-dirs.sh --describe prints
them: one JSON document, `{"version": 1, "brokers": [{"broker": N, "logDirs": [{"logDir": ...,
"error": null, "partitions": [{"partition": "T-P", "size": ..., "offsetLag": ...,
"isFuture": false}]}]}]}`, with the volume's total and usable bytes added to each directory.

`weir log-dirs move --broker N --topic T --partition P --dir D [--wait]` moves one replica to
another log directory of its broker (AlterReplicaLogDirs); `weir reassign execute` does the same
for the `log_dirs` of a reassignment file (`execute_log_dir_moves`), as
kafka-reassign-partitions.sh does, and sets `replica.alter.log.dirs.io.max.bytes.per.second`
on those brokers for `--replica-alter-log-dirs-throttle`. Every directory is checked against
the broker's `log.dirs` before anything is asked, so a wrong one changes nothing."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32

from weir.cli.broker_socket import BrokerConnection, connect_any
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, security_settings
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity, ClientSettingsError

CLIENT_ID = "weir-log-dirs"
VERSION = 4
ALTER_VERSION = 2
THROTTLE_CONFIG = "replica.alter.log.dirs.io.max.bytes.per.second"
#: how long replicas not created yet (REPLICA_NOT_AVAILABLE) are asked again, as Kafka's tool
RETRY_TIMEOUT_S = 10.0
RETRY_INTERVAL_S = 0.5
BROKER_RESOURCE = 4
SET = 0
#: (topic, partition, broker) -> the log directory the replica goes to
LogDirMoves = dict[tuple[str, int, int], str]


def register(commands: Any) -> None:
    log_dirs = commands.add_parser("log-dirs", help="brokers' log directories and partition sizes")
    sub = log_dirs.add_subparsers(dest="log_dirs_command", required=True, metavar="ACTION")
    describe = sub.add_parser(
        "describe", help="each broker's log directories and the replicas in them, as JSON"
    )
    describe.add_argument("--broker-list", metavar="ID[,ID...]",
                          help="only these brokers (default: every broker)")  # fmt: skip
    describe.add_argument("--topic-list", metavar="TOPIC[,TOPIC...]",
                          help="only these topics' partitions (default: every topic)")  # fmt: skip
    add_bootstrap(describe)
    add_client_settings(describe)
    describe.set_defaults(run=run_describe)
    move = sub.add_parser("move", help="move a replica to another log directory of its broker")
    move.add_argument("--broker", type=int, required=True, metavar="N")
    move.add_argument("--topic", required=True)
    move.add_argument("--partition", type=int, required=True, metavar="P")
    move.add_argument("--dir", required=True, metavar="PATH",
                      help="the absolute path of one of the broker's log.dirs")  # fmt: skip
    move.add_argument("--wait", action="store_true", help="return once the move is done")
    move.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS")
    add_bootstrap(move)
    add_client_settings(move)
    move.set_defaults(run=run_move)


def run_describe(args: argparse.Namespace) -> int:
    try:
        security = ClientSecurity.of(security_settings(args))
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None
    with connect_any(args.bootstrap_server, security, timeout=ADMIN_TIMEOUT,
                     client_id=CLIENT_ID) as conn:  # fmt: skip
        metadata = conn.call(ApiKey.METADATA, 1, MetadataRequest(topics=None))
    brokers = sorted((b.node_id, b.host, b.port) for b in metadata.brokers)
    wanted = _ids(args.broker_list)
    if wanted is not None:
        unknown = sorted(wanted - {node_id for node_id, _, _ in brokers})
        if unknown:
            raise SystemExit(f"weir: no broker {', '.join(map(str, unknown))} in the cluster")
        brokers = [b for b in brokers if b[0] in wanted]
    request = DescribeLogDirsRequest(topics=_topics(args.topic_list, metadata))
    print("Querying brokers for log directories information", file=sys.stderr)
    described, failed = [], False
    for node_id, host, port in brokers:
        with BrokerConnection(host, port, security, timeout=ADMIN_TIMEOUT,
                              client_id=CLIENT_ID) as conn:  # fmt: skip
            response = conn.call(ApiKey.DESCRIBE_LOG_DIRS, VERSION, request)
        if response.error_code is not ErrorCode.none:
            print(f"weir: broker {node_id}: {response.error_code.name.upper()}", file=sys.stderr)
            failed = True
            continue
        described.append({"broker": node_id, "logDirs": [_log_dir(r) for r in response.results]})
    ids = ",".join(str(b["broker"]) for b in described)
    print(f"Received log directory information from brokers {ids}", file=sys.stderr)
    print(json.dumps({"version": 1, "brokers": described}))
    return 1 if failed else 0


def _topics(topic_list: str | None, metadata: Any) -> tuple[DescribableLogDirTopic, ...] | None:
    """Every partition of the named topics, or None (every topic) when none are named."""
    names = [t for t in (topic_list or "").split(",") if t]
    if not names:
        return None
    counts = {t.name: len(t.partitions) for t in metadata.topics}
    missing = sorted(set(names) - counts.keys())
    if missing:
        raise SystemExit(f"weir: unknown topic {', '.join(missing)}")
    return tuple(
        DescribableLogDirTopic(
            topic=TopicName(name), partitions=tuple(map(i32, range(counts[name])))
        )
        for name in names
    )


def _log_dir(result: Any) -> dict[str, Any]:
    error = None if result.error_code is ErrorCode.none else result.error_code.name.upper()
    return {
        "logDir": result.log_dir,
        "error": error,
        "totalBytes": result.total_bytes,
        "usableBytes": result.usable_bytes,
        "partitions": [
            {"partition": f"{topic.name}-{p.partition_index}", "size": p.partition_size,
             "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
            for topic in result.topics for p in topic.partitions
        ],
    }  # fmt: skip


def _ids(text: str | None) -> set[int] | None:
    if not text:
        return None
    try:
        return {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise SystemExit(f"weir: --broker-list takes broker ids, not {text!r}") from None


# ---- moves between log directories (AlterReplicaLogDirs) -----------------------------------------


def read_log_dir_moves(entries: list[Any], source: Path) -> LogDirMoves:
    """The `log_dirs` of a reassignment file's entries (already checked to pair with their
    replicas): every replica given a directory other than "any". Each must be absolute."""
    moves: LogDirMoves = {}
    for entry in entries:
        for broker, path in zip(entry["replicas"], entry.get("log_dirs") or (), strict=False):
            if path == "any":
                continue
            name = f"{entry['topic']}-{entry['partition']}"
            if not isinstance(path, str) or not os.path.isabs(path):
                raise SystemExit(f"weir: {source}: {name}: log directory {path!r} of broker "
                                 f"{broker} is not an absolute path")  # fmt: skip
            moves[(str(entry["topic"]), int(entry["partition"]), int(broker))] = path
    return moves


def execute_log_dir_moves(
    bootstrap: str, security: ClientSecurity, moves: LogDirMoves, throttle: int | None
) -> bool:
    """Check the directories against the brokers' `log.dirs`, set the throttle on the brokers
    moving, then ask each broker to move its replicas; print what started. False if any
    move was refused."""
    brokers = _brokers(bootstrap, security)
    check_log_dirs(brokers, security, moves)
    if throttle is not None:
        for broker in sorted({b for _, _, b in moves}):
            set_log_dir_throttle(brokers[broker], security, broker, throttle)
        print(f"The replica-alter-dir throttle limit was set to {throttle} B/s")
    started, refused = alter_log_dirs(brokers, security, moves)
    if started:
        print("Successfully started log directory move for: "
              + ",".join(f"{t}-{p}-{b}" for t, p, b in started))  # fmt: skip
    for (topic, index, broker), error in sorted(refused.items()):
        print(f"weir: {topic}-{index} on broker {broker}: {error.name.upper()}", file=sys.stderr)
    return not refused


def check_log_dirs(
    brokers: Mapping[int, tuple[str, int]], security: ClientSecurity, moves: LogDirMoves
) -> None:
    """SystemExit, before anything is changed, if a move names an unknown broker or a
    directory its broker does not have."""
    for broker in sorted({b for _, _, b in moves}):
        if broker not in brokers:
            raise SystemExit(f"weir: no broker {broker} in the cluster")
        with _connection(brokers[broker], security) as conn:
            response = conn.call(ApiKey.DESCRIBE_LOG_DIRS, VERSION,
                                 DescribeLogDirsRequest(topics=()))  # fmt: skip
        if response.error_code is not ErrorCode.none:
            raise SystemExit(f"weir: broker {broker}: {response.error_code.name.upper()}")
        have = {r.log_dir for r in response.results}
        for (topic, index, b), path in sorted(moves.items()):
            if b == broker and os.path.normpath(path) not in have:
                raise SystemExit(f"weir: {topic}-{index}: broker {broker} has no log directory "
                                 f"{path} (its log.dirs: {', '.join(sorted(have))})")  # fmt: skip


def alter_log_dirs(
    brokers: Mapping[int, tuple[str, int]], security: ClientSecurity, moves: LogDirMoves
) -> tuple[list[tuple[str, int, int]], dict[tuple[str, int, int], ErrorCode]]:
    """AlterReplicaLogDirs to each broker; replicas not created there yet
    (REPLICA_NOT_AVAILABLE: a reassignment is adding them) are asked again for a while.
    (started, refused with their errors)"""
    pending, started = dict(moves), []
    refused: dict[tuple[str, int, int], ErrorCode] = {}
    deadline = time.monotonic() + RETRY_TIMEOUT_S
    while pending:
        refused = {}
        for broker in sorted({b for _, _, b in pending}):
            mine = {k: v for k, v in pending.items() if k[2] == broker}
            for key, error in _alter_on(brokers[broker], security, mine).items():
                if error is ErrorCode.none:
                    started.append(key)
                    del pending[key]
                else:
                    refused[key] = error
        retry = any(e is ErrorCode.replica_not_available for e in refused.values())
        if not retry or time.monotonic() > deadline:
            break
        time.sleep(RETRY_INTERVAL_S)
    return sorted(started), refused


def _alter_on(
    address: tuple[str, int], security: ClientSecurity, moves: LogDirMoves
) -> dict[tuple[str, int, int], ErrorCode]:
    by_dir: dict[str, dict[str, list[int]]] = {}
    for (topic, index, _), path in moves.items():
        by_dir.setdefault(path, {}).setdefault(topic, []).append(index)
    request = AlterReplicaLogDirsRequest(dirs=tuple(
        AlterReplicaLogDir(path=path, topics=tuple(
            AlterReplicaLogDirTopic(name=TopicName(t), partitions=tuple(map(i32, sorted(ps))))
            for t, ps in sorted(topics.items())))
        for path, topics in sorted(by_dir.items())
    ))  # fmt: skip
    broker = next(iter(moves))[2]
    with _connection(address, security) as conn:
        response = conn.call(ApiKey.ALTER_REPLICA_LOG_DIRS, ALTER_VERSION, request)
    return {(t.topic_name, p.partition_index, broker): p.error_code
            for t in response.results for p in t.partitions}  # fmt: skip


def set_log_dir_throttle(
    address: tuple[str, int], security: ClientSecurity, broker: int, rate: int
) -> None:
    """The broker's dynamic `replica.alter.log.dirs.io.max.bytes.per.second`, set on it."""
    request = alter_v1.IncrementalAlterConfigsRequest(
        resources=(alter_v1.AlterConfigsResource(
            resource_type=i8(BROKER_RESOURCE), resource_name=str(broker),
            configs=(alter_v1.AlterableConfig(name=THROTTLE_CONFIG, config_operation=i8(SET),
                                              value=str(rate)),)),),
        validate_only=False,
    )  # fmt: skip
    with _connection(address, security) as conn:
        [result] = conn.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request).responses
    if result.error_code is not ErrorCode.none:
        raise SystemExit(f"weir: broker {broker}: {THROTTLE_CONFIG}: "
                         f"{result.error_code.name.upper()}: {result.error_message}")  # fmt: skip


def run_move(args: argparse.Namespace) -> int:
    if not os.path.isabs(args.dir):
        raise SystemExit(f"weir: --dir {args.dir!r} is not an absolute path")
    security = _security(args)
    moves: LogDirMoves = {(args.topic, args.partition, args.broker): args.dir}
    if not execute_log_dir_moves(args.bootstrap_server, security, moves, None):
        return 1
    if args.wait:
        brokers = _brokers(args.bootstrap_server, security)
        _wait_moved(brokers[args.broker], security, args, time.monotonic() + args.timeout)
        print(f"{args.topic}-{args.partition} is in {os.path.normpath(args.dir)}")
    return 0


def _wait_moved(
    address: tuple[str, int], security: ClientSecurity, args: argparse.Namespace, deadline: float
) -> None:
    name, target = f"{args.topic}-{args.partition}", os.path.normpath(args.dir)
    while time.monotonic() < deadline:
        with _connection(address, security) as conn:
            response = conn.call(ApiKey.DESCRIBE_LOG_DIRS, VERSION,
                                 DescribeLogDirsRequest(topics=None))  # fmt: skip
        held = {(r.log_dir, p["isFuture"]) for r in response.results
                for p in _log_dir(r)["partitions"] if p["partition"] == name}  # fmt: skip
        if held == {(target, False)}:
            return
        time.sleep(RETRY_INTERVAL_S)
    raise SystemExit(f"weir: {name} did not reach {target} within {args.timeout:g}s")


def _security(args: argparse.Namespace) -> ClientSecurity:
    try:
        return ClientSecurity.of(security_settings(args))
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None


def _brokers(bootstrap: str, security: ClientSecurity) -> dict[int, tuple[str, int]]:
    with connect_any(bootstrap, security, timeout=ADMIN_TIMEOUT, client_id=CLIENT_ID) as conn:
        return broker_addresses(conn.call(ApiKey.METADATA, 1, MetadataRequest(topics=None)))


def broker_addresses(metadata: Any) -> dict[int, tuple[str, int]]:
    return {b.node_id: (b.host, b.port) for b in metadata.brokers}


def _connection(address: tuple[str, int], security: ClientSecurity) -> BrokerConnection:
    return BrokerConnection(*address, security, timeout=ADMIN_TIMEOUT, client_id=CLIENT_ID)
