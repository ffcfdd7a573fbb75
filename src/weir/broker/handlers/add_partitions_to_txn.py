"""AddPartitionsToTxn (24): a transactional producer registers the partitions it is about to
write before writing to them. Partitions of unknown topics are answered
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka does; the client
versions (v0-v3) are served, not the brokers' batched verification form."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import add_partitions_refusals
from weir.broker.context import BrokerContext, fenced_error, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

#: the first version whose clients understand PRODUCER_FENCED (KIP-588)
FENCED_SINCE = 2


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, request.api_version)
    body = request.body
    requested = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in requested if not _exists(broker, *tp)}
    refused = add_partitions_refusals(broker, body.v3_and_below_transactional_id, requested)
    if broker.transactions is None:
        errors = dict.fromkeys(requested, ErrorCode.coordinator_not_available)
    elif refused:
        errors = refused
    elif unknown:
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                  else ErrorCode.operation_not_attempted for tp in requested}  # fmt: skip
    else:
        error = await broker.transactions.add_partitions(
            body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            requested,
        )
        if error is ErrorCode.producer_fenced:
            error = fenced_error(request.api_version, FENCED_SINCE)
        errors = dict.fromkeys(requested, error)
    return make(
        m.AddPartitionsToTxnResponse,
        throttle_time=datetime.timedelta(0),
        results_by_topic_v3_and_below=_by_topic(m, errors),
    )


def _exists(broker: BrokerContext, topic: str, index: int) -> bool:
    info = broker.metadata.topic(topic)
    return info is not None and 0 <= index < info.partitions


def _by_topic(m: Any, errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    topics: dict[str, list[Any]] = {}
    for (topic, index), error in errors.items():
        topics.setdefault(topic, []).append(
            make(m.AddPartitionsToTxnPartitionResult, partition_index=index,
                 partition_error_code=error)
        )  # fmt: skip
    return tuple(
        make(m.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(results))
        for topic, results in topics.items()
    )
