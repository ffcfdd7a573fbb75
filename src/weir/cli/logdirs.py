"""`weir log-dirs describe`: every broker's log directories with the size and offset lag of each
partition replica they hold (DescribeLogDirs), printed as kafka-log-dirs.sh --describe prints
them: one JSON document, `{"version": 1, "brokers": [{"broker": N, "logDirs": [{"logDir": ...,
"error": null, "partitions": [{"partition": "T-P", "size": ..., "offsetLag": ...,
"isFuture": false}]}]}]}`, with the volume's total and usable bytes added to each directory."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.types import TopicName
from kio.static.primitive import i32

from weir.cli.broker_socket import BrokerConnection, connect_any
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, security_settings
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity, ClientSettingsError

CLIENT_ID = "weir-log-dirs"
VERSION = 4


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
