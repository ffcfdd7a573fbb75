"""AddPartitionsToTxn (24): a transactional producer registers the partitions it is about to
write before writing to them (v0-v3). Partitions of unknown topics are answered
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka does. v4, served
in cluster mode, is the brokers' batched form: several transactions at once, and with
`verify_only` a partition leader's question whether partitions are in a producer's ongoing
transaction (KIP-890, see `weir.broker.txn.verification`)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import add_partitions_refusals
from weir.broker.context import BrokerContext, fenced_error, make
from weir.broker.handlers.per_partition import partition_errors
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

#: the first version whose clients understand PRODUCER_FENCED (KIP-588)
FENCED_SINCE = 2
#: the first version that carries several transactions (brokers only)
BATCHED_SINCE = 4


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, request.api_version)
    body = request.body
    if request.api_version >= BATCHED_SINCE:
        results = [
            make(m.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                 topic_results=_by_topic(m, await _one(broker, txn, request.api_version)))
            for txn in body.transactions
        ]  # fmt: skip
        return make(m.AddPartitionsToTxnResponse, throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.none, results_by_transaction=tuple(results))  # fmt: skip
    requested = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    refused = add_partitions_refusals(broker, body.v3_and_below_transactional_id, requested)
    errors = refused or await _add(
        broker, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
        body.v3_and_below_producer_epoch, requested, request.api_version,
    )  # fmt: skip
    return make(
        m.AddPartitionsToTxnResponse,
        throttle_time=datetime.timedelta(0),
        results_by_topic_v3_and_below=_by_topic(m, errors),
    )


async def _one(broker: BrokerContext, txn: Any, version: int) -> dict[tuple[str, int], ErrorCode]:
    """One transaction of a batched (v4) request: verified or added."""
    requested = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
    if not txn.verify_only:
        return await _add(broker, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                          requested, version)  # fmt: skip
    if broker.transactions is None:
        return dict.fromkeys(requested, ErrorCode.coordinator_not_available)
    return broker.transactions.verify_partitions(
        txn.transactional_id, txn.producer_id, txn.producer_epoch, requested
    )


async def _add(
    broker: BrokerContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    requested: list[tuple[str, int]],
    version: int,
) -> dict[tuple[str, int], ErrorCode]:
    unknown = {tp for tp in requested if not _exists(broker, *tp)}
    if broker.transactions is None:
        return dict.fromkeys(requested, ErrorCode.coordinator_not_available)
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                else ErrorCode.operation_not_attempted for tp in requested}  # fmt: skip
    error = await broker.transactions.add_partitions(
        transactional_id, producer_id, producer_epoch, requested
    )
    if error is ErrorCode.producer_fenced:
        error = fenced_error(version, FENCED_SINCE)
    return dict.fromkeys(requested, error)


def _exists(broker: BrokerContext, topic: str, index: int) -> bool:
    info = broker.metadata.topic(topic)
    return info is not None and 0 <= index < info.partitions


def _by_topic(m: Any, errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    return partition_errors(errors, m.AddPartitionsToTxnPartitionResult,
                            m.AddPartitionsToTxnTopicResult, error="partition_error_code",
                            partitions="results_by_partition")  # fmt: skip
