"""Produce (0): validate and append one batch per partition. acks=1 answers once the leader has
appended; acks=-1 (all) answers once every in-sync replica has the batch (the high watermark
reached it; a delayed produce, no polling) or `timeout_ms` ran out (REQUEST_TIMED_OUT), and is
refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than `min.insync.replicas` (before the
append) or NOT_ENOUGH_REPLICAS_AFTER_APPEND (after it). On a single node the batch is in sync
once appended. acks=0 gets no response. Records a topic refuses are named in `record_errors`.
A client over its `producer_byte_rate` quota (the request's bytes count) is answered with its
throttle time and then muted for it (`client_quotas`); nothing is refused for it. Each batch
appended is counted for the audit (`weir.broker.audit`): its bytes, and its records from its
header."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import produce_error
from weir.broker.client_quotas import client_identity, throttle_connection
from weir.broker.context import BrokerContext, make
from weir.broker.request_times import remote_wait
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.protocol.errors import InvalidRequestError
from weir.records import BatchHeader, peek_transactional

ACKS_ALL = -1
VALID_ACKS = (0, 1, ACKS_ALL)
CLIENT_THROTTLE_VERSION = 6  # KIP-219: clients from this version wait out a throttle themselves


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.PRODUCE, request.api_version)
    body = request.body
    answered: list[tuple[str, list[Any]]] = []
    waits = []
    transactional_id = getattr(body, "transactional_id", None)
    unverified = await _verify_transactional(broker, body)
    audit = broker.audit
    for topic in body.topic_data:
        partitions: list[Any] = []
        for data in topic.partition_data:
            refused = produce_error(broker, topic.name, transactional_id, request.client_id)
            if refused[0] is ErrorCode.none:
                refused = unverified.get((topic.name, data.index), refused)
            response, message, end_offset = _append(
                m, broker, topic.name, data, body.acks, refused
            )
            if response.error_code != ErrorCode.none:
                where = f"{topic.name}-{data.index}"
                broker.request_log.refused(request, where, response.error_code, message)
                partitions.append(response)
                continue
            if audit is not None:
                audit.produced(request.client_id, topic.name, data.index, len(data.records),
                               BatchHeader(data.records).records_count)  # fmt: skip
            if body.acks == ACKS_ALL and broker.replicas.replicating(
                topic.name, data.index, end_offset
            ):
                waits.append((topic.name, len(partitions), data.index, end_offset))
            partitions.append(response)
        answered.append((topic.name, partitions))
    if waits:
        with remote_wait():
            await _wait_replicated(broker, request, m, answered, waits)
    topics = [
        make(m.TopicProduceResponse, name=name, partition_responses=tuple(partitions))
        for name, partitions in answered
    ]
    throttle_ms = _record_quota(broker, request)
    if body.acks == 0:
        failed = [p for t in topics for p in t.partition_responses if p.error_code]
        if failed:  # no response is read: closing the connection is how Kafka tells the client
            raise InvalidRequestError(f"acks=0 produce failed with {failed[0].error_code.name}")
        return None
    return make(m.ProduceResponse, responses=tuple(topics),
                throttle_time=datetime.timedelta(milliseconds=throttle_ms))  # fmt: skip


def _record_quota(broker: BrokerContext, request: Request) -> int:
    """The request's bytes counted against the client's produce quota; its throttle time."""
    quotas = broker.quotas
    if quotas is None or not quotas.produce.enabled:
        return 0
    throttle_ms = quotas.produce.record(*client_identity(request.client_id), request.size)
    throttle_connection(
        throttle_ms, client_throttles=request.api_version >= CLIENT_THROTTLE_VERSION
    )
    return throttle_ms


async def _wait_replicated(
    broker: BrokerContext,
    request: Request,
    m: Any,
    answered: list[tuple[str, list[Any]]],
    waits: list[tuple[str, int, int, int]],
) -> None:
    """Wait for acks=all partitions to be replicated; their errors replace the responses."""
    timeout_ms = int(request.body.timeout.total_seconds() * 1000)
    if len(waits) == 1:  # the usual case: awaited here, without a task of its own
        topic, _, index, end = waits[0]
        errors = [await broker.replicas.wait_replicated(topic, index, end, timeout_ms)]
    else:
        errors = await asyncio.gather(*(
            broker.replicas.wait_replicated(topic, index, end, timeout_ms)
            for topic, _, index, end in waits
        ))  # fmt: skip
    by_topic = {name: partitions for name, partitions in answered}
    for (topic, position, index, _), error in zip(waits, errors, strict=True):
        if error is ErrorCode.none:
            continue
        message = f"acks=all: {error.name}"
        broker.request_log.refused(request, f"{topic}-{index}", error, message)
        by_topic[topic][position] = _error(m, index, error, message)


def _append(
    m: Any,
    broker: BrokerContext,
    topic: str,
    data: Any,
    acks: int,
    refused: tuple[ErrorCode, str],
) -> tuple[Any, str | None, int]:
    """The partition's response, the reason for its error if it has one, and the log end
    offset after the append (-1 if nothing was appended). `refused`: why authorization
    or transaction verification refused the batch, if either did."""
    if acks not in VALID_ACKS:
        message = f"acks={acks}"
        return _error(m, data.index, ErrorCode.invalid_required_acks, message), message, -1
    if refused[0] is not ErrorCode.none:
        error, message = refused
        return _error(m, data.index, error, message), message, -1
    result = broker.replicas.append(topic, data.index, data.records, acks=acks)
    record_errors: tuple[Any, ...] = ()
    if hasattr(m, "BatchIndexAndErrorMessage"):
        record_errors = tuple(
            make(m.BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=why)
            for i, why in result.record_errors
        )
    response = make(
        m.PartitionProduceResponse,
        index=data.index,
        error_code=result.error,
        base_offset=result.base_offset,
        log_append_time=_datetime(result.log_append_time),
        log_start_offset=result.log_start_offset,
        record_errors=record_errors,
        error_message=result.message,
    )
    return response, result.message, result.end_offset


async def _verify_transactional(
    broker: BrokerContext, body: Any
) -> dict[tuple[str, int], tuple[ErrorCode, str]]:
    """The transactional batches that KIP-890's verification refuses (see
    `weir.broker.txn.verification`): one check per partition of a transaction."""
    batches = [(topic.name, data.index, data.records)
               for topic in body.topic_data for data in topic.partition_data
               if data.records is not None and peek_transactional(data.records)]  # fmt: skip
    if not batches or broker.verification is None or body.acks not in VALID_ACKS:
        return {}
    return await broker.verification.verify(getattr(body, "transactional_id", None), batches)


def _error(m: Any, index: int, error: ErrorCode, message: str) -> Any:
    return make(
        m.PartitionProduceResponse,
        index=index,
        error_code=error,
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        record_errors=(),
        error_message=message,
    )


def _datetime(milliseconds: int) -> datetime.datetime | None:
    if milliseconds < 0:
        return None
    return datetime.datetime.fromtimestamp(milliseconds / 1000, tz=datetime.UTC)
