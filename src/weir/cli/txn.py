"""`weir txn list|describe|find-hanging`, as kafka-transactions.sh does them.

list asks every broker of the cluster (ListTransactions), since each knows only the
transactional ids it coordinates; describe finds the id's coordinator (FindCoordinator, key type
transaction) and asks it (DescribeTransactions). find-hanging asks the leaders of a topic's
partitions which producers have a transaction open there (DescribeProducers) and reports those
open longer than the longest transaction timeout whose coordinator knows no such ongoing
transaction on that partition: their records hold read_committed consumers back for good.
abort ends such a transaction as Kafka's admin abortTransaction does: it finds the producer
whose transaction starts at the given offset (DescribeProducers), or takes its id and epochs as
given, and asks the partition's leader to write an ABORT marker (WriteTxnMarkers).
librdkafka has no admin call for these, so they speak the Kafka protocol directly, one request
at a time, starting from the first of the bootstrap servers (`--bootstrap-server a:1,b:2`) that
answers.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import sys
import time
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0 import response as describe_response
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v4.request import MetadataRequestTopic
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.serial import entity_reader
from kio.static.primitive import TZAware, i8, i16, i32, i64

from weir.cli.broker_socket import BrokerConnection, Decoder, connect_any
from weir.cli.clients import ADMIN_TIMEOUT, add_bootstrap, add_client_settings, security_settings
from weir.cli.table import print_table
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity, ClientSettingsError

CLIENT_ID = "weir-txn"
TRANSACTION_KEY = i8(1)
HANGING_COLUMNS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")  # fmt: skip


def register(commands: Any) -> None:
    txn = commands.add_parser("txn", help="list and describe transactions")
    sub = txn.add_subparsers(dest="txn_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="transactional ids known to the cluster's coordinators")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        help="only ids in this state (Ongoing, PrepareCommit, ...); repeatable",
    )
    listing.add_argument(
        "--producer-id",
        type=int,
        action="append",
        default=[],
        help="only ids with this producer id; repeatable",
    )
    listing.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                         help="only transactions open longer than MS milliseconds")  # fmt: skip
    listing.set_defaults(run=run_list)
    describe = sub.add_parser("describe", help="one transactional id's current transaction")
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(run=run_describe)
    hanging = sub.add_parser(
        "find-hanging", help="transactions open on a partition that no coordinator knows of"
    )
    hanging.add_argument("--topic", required=True)
    hanging.add_argument("--partition", type=int, help="only this partition")
    hanging.add_argument("--max-transaction-timeout", type=float, default=15.0, metavar="MINUTES",
                         help="the brokers' transaction.max.timeout.ms, in minutes (default 15): "
                         "only transactions open longer are considered")  # fmt: skip
    hanging.set_defaults(run=run_find_hanging)
    abort = _register_abort(sub)
    for parser in (listing, describe, hanging, abort):
        add_bootstrap(parser)
        add_client_settings(parser)


def _register_abort(sub: Any) -> argparse.ArgumentParser:
    abort: argparse.ArgumentParser = sub.add_parser(
        "abort", help="abort a hanging transaction on one partition"
    )
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int,
                       help="the first offset of the open transaction to abort")  # fmt: skip
    given = abort.add_argument_group(
        "or the producer itself", "as DescribeProducers (and `weir txn find-hanging`) show it"
    )
    given.add_argument("--producer-id", type=int)
    given.add_argument("--producer-epoch", type=int)
    given.add_argument("--coordinator-epoch", type=int)
    abort.set_defaults(run=run_abort)
    return abort


def connect(host: str, port: int, security: ClientSecurity | None = None,
            timeout: float = ADMIN_TIMEOUT) -> BrokerConnection:  # fmt: skip
    """One connection to a broker, secured as `security` says, that reads DescribeTransactions
    v0 with its start time nullable."""
    return BrokerConnection(host, port, security or ClientSecurity(), timeout=timeout,
                            client_id=CLIENT_ID, decoders=_DECODERS)  # fmt: skip


def connect_bootstrap(bootstrap: str, security: ClientSecurity) -> BrokerConnection:
    """`connect` to the first of the bootstrap servers (`HOST:PORT[,HOST:PORT...]`) that
    answers."""
    return connect_any(bootstrap, security, timeout=ADMIN_TIMEOUT, client_id=CLIENT_ID,
                       decoders=_DECODERS)  # fmt: skip


def _read_describe_transactions(payload: bytes) -> tuple[int, Any]:
    """DescribeTransactions v0 read with its start time nullable: Kafka sends -1 for an id with
    no transaction open, which kio's reader of the declared (non-null) timestamp refuses."""
    cls = _describe_transactions_response()
    header, used = entity_reader(cls.__header_schema__)(payload, 0)
    body, _ = entity_reader(cls)(payload, used)
    return header.correlation_id, body


_DECODERS: dict[tuple[int, int], Decoder] = {
    (ApiKey.DESCRIBE_TRANSACTIONS, 0): _read_describe_transactions,
}


@functools.cache
def _describe_transactions_response() -> Any:
    state = _derived(describe_response.TransactionState,
                     {"transaction_start_time": TZAware | None})  # fmt: skip
    return _derived(describe_response.DescribeTransactionsResponse,
                    {"transaction_states": tuple[state, ...]})  # type: ignore[valid-type]  # fmt: skip


def _derived(cls: Any, types: dict[str, Any]) -> Any:
    """kio's message class `cls` with the field types in `types` replaced."""
    fields = []
    for f in dataclasses.fields(cls):
        extra = {} if f.default is dataclasses.MISSING else {"default": f.default}
        fields.append((f.name, types.get(f.name, f.type),
                       dataclasses.field(metadata=f.metadata, **extra)))  # fmt: skip
    schema = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")
    return dataclasses.make_dataclass(
        cls.__name__, fields, namespace={name: getattr(cls, name) for name in schema},
        frozen=True, slots=True, kw_only=True,
    )  # fmt: skip


def _security(args: argparse.Namespace) -> ClientSecurity:
    """How to connect, from --command-config and -X (librdkafka's names)."""
    try:
        return ClientSecurity.of(security_settings(args))
    except ClientSettingsError as exc:
        raise SystemExit(f"weir: {exc}") from None


def _brokers(bootstrap: str, security: ClientSecurity | None = None) -> list[tuple[int, str, int]]:
    with connect_bootstrap(bootstrap, security or ClientSecurity()) as conn:
        metadata = conn.call(ApiKey.METADATA, 1, MetadataRequest(topics=()))
    return sorted((b.node_id, b.host, b.port) for b in metadata.brokers)


def run_list(args: argparse.Namespace) -> int:
    request = ListTransactionsRequest(
        state_filters=tuple(args.state),
        producer_id_filters=tuple(ProducerId(p) for p in args.producer_id),
        duration_filter=i64(args.duration_filter),
    )
    rows, failed = [], False
    security = _security(args)
    for node_id, host, port in _brokers(args.bootstrap_server, security):
        with connect(host, port, security=security) as conn:
            response = conn.call(ApiKey.LIST_TRANSACTIONS, 1, request)
        if response.error_code is not ErrorCode.none:
            print(f"weir: broker {node_id}: {response.error_code.name.upper()}", file=sys.stderr)
            failed = True
        for unknown in response.unknown_state_filters:
            print(f"weir: unknown state {unknown!r}", file=sys.stderr)
        rows += [(t.transactional_id, node_id, t.producer_id, t.transaction_state)
                 for t in response.transaction_states]  # fmt: skip
    print_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), sorted(rows))
    return 1 if failed else 0


def run_describe(args: argparse.Namespace) -> int:
    transactional_id = args.transactional_id
    security = _security(args)
    with connect_bootstrap(args.bootstrap_server, security) as conn:
        request = FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY)
        found = conn.call(ApiKey.FIND_COORDINATOR, 3, request)
    if found.error_code is not ErrorCode.none:
        print(f"weir: no coordinator for {transactional_id!r}: {found.error_code.name.upper()}",
              file=sys.stderr)  # fmt: skip
        return 1
    with connect(found.host, found.port, security=security) as conn:
        response = conn.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(transactional_id),)))  # fmt: skip
    [state] = response.transaction_states
    if state.error_code is not ErrorCode.none:
        print(f"weir: {transactional_id!r}: {state.error_code.name.upper()}", file=sys.stderr)
        return 1
    _print_description(found.node_id, state)
    return 0


def _print_description(coordinator: int, state: Any) -> None:
    started = state.transaction_start_time
    start_ms = -1 if started is None else round(started.timestamp() * 1000)
    duration = "-" if start_ms < 0 else str(round(time.time() * 1000) - start_ms)
    timeout_ms = round(state.transaction_timeout / datetime.timedelta(milliseconds=1))
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    rows = [
        ("CoordinatorId", coordinator), ("TransactionalId", state.transactional_id),
        ("ProducerId", state.producer_id), ("ProducerEpoch", state.producer_epoch),
        ("TransactionState", state.transaction_state), ("TransactionTimeoutMs", timeout_ms),
        ("CurrentTransactionStartTimeMs", start_ms if start_ms >= 0 else "-"),
        ("TransactionDurationMs", duration), ("TopicPartitions", partitions or "-"),
    ]  # fmt: skip
    for name, value in rows:
        print(f"{name:<32}{value}")


@dataclasses.dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer's transaction open on one partition, as its leader sees it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int


def hanging(
    open_here: list[OpenTransaction],
    coordinators: dict[int, tuple[str, set[tuple[str, int]]] | None],
    now_ms: int,
    max_timeout_ms: int,
) -> list[OpenTransaction]:
    """Of the transactions open on partitions, those that hang: open (by their last write)
    longer than `max_timeout_ms`, and whose producer's coordinator (`coordinators`: producer id
    -> (state, partitions of its current transaction), or None when no coordinator knows the
    producer) has no ongoing transaction including that partition."""
    out = []
    for txn in open_here:
        if now_ms - txn.last_timestamp <= max_timeout_ms:
            continue
        known = coordinators.get(txn.producer_id)
        if known is not None and known[0] == "Ongoing" and (txn.topic, txn.partition) in known[1]:
            continue
        out.append(txn)
    return out


class TxnToolError(Exception):
    """A failure the command reports on one line and exits 1 for."""


def _topic_metadata(
    bootstrap: str, name: str, security: ClientSecurity
) -> tuple[dict[int, tuple[str, int]], Any]:
    """(node id -> address of every broker, the topic's metadata); TxnToolError if the topic
    is unknown."""
    with connect_bootstrap(bootstrap, security) as conn:
        metadata = conn.call(ApiKey.METADATA, 4, MetadataRequestV4(
            topics=(MetadataRequestTopic(name=TopicName(name)),),
            allow_auto_topic_creation=False))  # fmt: skip
    brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
    topic = next((t for t in metadata.topics if t.name == name), None)
    if topic is None or topic.error_code is not ErrorCode.none:
        reason = topic.error_code.name.upper() if topic is not None else "not found"
        raise TxnToolError(f"topic {name!r}: {reason}")
    return brokers, topic


def run_find_hanging(args: argparse.Namespace) -> int:
    security = _security(args)
    try:
        brokers, topic = _topic_metadata(args.bootstrap_server, args.topic, security)
    except TxnToolError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 1
    by_leader: dict[int, list[int]] = {}
    for p in topic.partitions:
        if args.partition is None or p.partition_index == args.partition:
            by_leader.setdefault(p.leader_id, []).append(p.partition_index)
    open_here = []
    for leader, indexes in sorted(by_leader.items()):
        if leader not in brokers:
            print(f"weir: partitions {indexes} have no leader now", file=sys.stderr)
            return 1
        wanted = TopicRequest(name=TopicName(args.topic),
                              partition_indexes=tuple(i32(i) for i in indexes))  # fmt: skip
        with connect(*brokers[leader], security=security) as conn:
            response = conn.call(ApiKey.DESCRIBE_PRODUCERS, 0,
                                 DescribeProducersRequest(topics=(wanted,)))  # fmt: skip
        for t in response.topics:
            for p in t.partitions:
                open_here += [
                    OpenTransaction(t.name, p.partition_index, s.producer_id, s.producer_epoch,
                                    s.current_txn_start_offset, s.last_timestamp)
                    for s in p.active_producers if s.current_txn_start_offset >= 0
                ]  # fmt: skip
    now_ms = round(time.time() * 1000)
    max_timeout_ms = round(args.max_transaction_timeout * 60_000)
    candidates = hanging(open_here, {}, now_ms, max_timeout_ms)
    found = hanging(candidates, _coordinators_of({c.producer_id for c in candidates}, brokers,
                                                 security),
                    now_ms, max_timeout_ms)  # fmt: skip
    print_table(HANGING_COLUMNS, [
        (t.topic, t.partition, t.producer_id, t.producer_epoch, t.start_offset, t.last_timestamp,
         f"{(now_ms - t.last_timestamp) / 60_000:.1f}") for t in found])  # fmt: skip
    return 0


def _coordinators_of(
    producer_ids: set[int],
    brokers: dict[int, tuple[str, int]],
    security: ClientSecurity | None = None,
) -> dict[int, tuple[str, set[tuple[str, int]]] | None]:
    """What the coordinators know of each producer's current transaction."""
    known: dict[int, tuple[str, set[tuple[str, int]]] | None] = dict.fromkeys(producer_ids)
    if not producer_ids:
        return known
    request = ListTransactionsRequest(
        state_filters=(), producer_id_filters=tuple(ProducerId(p) for p in producer_ids),
        duration_filter=i64(-1),
    )  # fmt: skip
    for node_id, address in sorted(brokers.items()):
        with connect(*address, security=security) as conn:
            listed = conn.call(ApiKey.LIST_TRANSACTIONS, 1, request)
            for t in listed.transaction_states:
                described = conn.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
                    transactional_ids=(TransactionalId(t.transactional_id),)))  # fmt: skip
                for state in described.transaction_states:
                    if state.error_code is ErrorCode.none and state.producer_id in known:
                        partitions = {(x.topic, int(p)) for x in state.topics for p in x.partitions}
                        known[state.producer_id] = (state.transaction_state, partitions)
        del node_id
    return known


# ---- abort ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class AbortSpec:
    """What an ABORT marker for one partition needs (Kafka's AbortTransactionSpec)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def run_abort(args: argparse.Namespace) -> int:
    security = _security(args)
    try:
        leader = _partition_leader(args.bootstrap_server, args.topic, args.partition, security)
        spec = _abort_spec(args, leader, security)
        _write_abort_marker(leader, spec, security)
    except TxnToolError as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 1
    return 0


def _partition_leader(
    bootstrap: str, topic: str, partition: int, security: ClientSecurity
) -> tuple[str, int]:
    brokers, metadata = _topic_metadata(bootstrap, topic, security)
    found = next((p for p in metadata.partitions if p.partition_index == partition), None)
    if found is None:
        raise TxnToolError(f"topic {topic!r} has no partition {partition}")
    if found.leader_id not in brokers:
        raise TxnToolError(f"{topic}-{partition} has no leader now")
    return brokers[found.leader_id]


def _abort_spec(
    args: argparse.Namespace, leader: tuple[str, int], security: ClientSecurity
) -> AbortSpec:
    """The producer to abort: the one whose open transaction starts at --start-offset, or the
    one named by --producer-id, --producer-epoch and --coordinator-epoch."""
    if args.start_offset is not None:
        return _open_transaction_at(leader, args.topic, args.partition, args.start_offset,
                                    security)  # fmt: skip
    if args.producer_id is None:
        raise TxnToolError("name the transaction to abort with --start-offset, or with "
                           "--producer-id, --producer-epoch and --coordinator-epoch")  # fmt: skip
    for option in ("producer_epoch", "coordinator_epoch"):
        if getattr(args, option) is None:
            raise TxnToolError(f"--{option.replace('_', '-')} is required with --producer-id")
    # -1 (no marker seen yet) becomes 0, which no coordinator epoch is below
    return AbortSpec(args.topic, args.partition, args.producer_id, args.producer_epoch,
                     max(args.coordinator_epoch, 0))  # fmt: skip


def _open_transaction_at(
    leader: tuple[str, int], topic: str, partition: int, start_offset: int,
    security: ClientSecurity,
) -> AbortSpec:
    wanted = TopicRequest(name=TopicName(topic), partition_indexes=(i32(partition),))
    with connect(*leader, security=security) as conn:
        response = conn.call(ApiKey.DESCRIBE_PRODUCERS, 0,
                             DescribeProducersRequest(topics=(wanted,)))  # fmt: skip
    [state] = [p for t in response.topics for p in t.partitions]
    if state.error_code is not ErrorCode.none:
        raise TxnToolError(f"cannot read the producers of {topic}-{partition}: "
                           f"{state.error_code.name.upper()}")  # fmt: skip
    for producer in state.active_producers:
        if producer.current_txn_start_offset == start_offset:
            return AbortSpec(topic, partition, producer.producer_id, producer.producer_epoch,
                             max(producer.coordinator_epoch, 0))  # fmt: skip
    raise TxnToolError(f"no open transaction starts at offset {start_offset} of "
                       f"{topic}-{partition}")  # fmt: skip


def _write_abort_marker(
    leader: tuple[str, int], spec: AbortSpec, security: ClientSecurity
) -> None:
    body = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=ProducerId(spec.producer_id), producer_epoch=i16(spec.producer_epoch),
        transaction_result=False, coordinator_epoch=i32(spec.coordinator_epoch),
        topics=(WritableTxnMarkerTopic(name=TopicName(spec.topic),
                                       partition_indexes=(i32(spec.partition),)),),
    ),))  # fmt: skip
    with connect(*leader, security=security) as conn:
        response = conn.call(ApiKey.WRITE_TXN_MARKERS, 1, body)
    errors = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
    if errors != [ErrorCode.none]:
        reason = errors[0].name if errors else "no answer for the partition"
        raise TxnToolError(f"aborting the transaction of producer {spec.producer_id} (epoch "
                           f"{spec.producer_epoch}) on {spec.topic}-{spec.partition} failed: "
                           f"{reason}")  # fmt: skip
