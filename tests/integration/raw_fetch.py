"""A fetcher speaking Fetch v12 by hand over one connection, with the session fields (KIP-227)
set as the caller says: for the fetch session tests and the fetch session bench, which need
requests no real client sends (a follower's replica id, wrong epochs, forgotten partitions)."""

from __future__ import annotations

import datetime
import socket
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from raw_requests import encode_request, recv_exact

from weir.protocol.apis import ApiKey
from weir.protocol.codec import decode_response
from weir.records import iter_batches

FETCH_VERSION = 12
PARTITION_MAX_BYTES = 1 << 20
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Answer:
    """One partition of a Fetch response."""

    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int
    #: the offset after the last record returned; None: no records
    next_offset: int | None
    records: bytes


@dataclass(frozen=True, slots=True)
class FetchExchange:
    error_code: ErrorCode
    session_id: int
    partitions: dict[TopicPartition, Answer]
    request_bytes: int
    response_bytes: int


class RawFetcher:
    """One connection to a broker; each `fetch` is one Fetch v12 round trip."""

    def __init__(
        self, port: int, *, replica_id: int = -1, client_id: str = "raw-fetcher",
        timeout: float = 30,
    ) -> None:  # fmt: skip
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.replica_id = replica_id
        self.client_id = client_id
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def fetch(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        session_id: int = 0,
        epoch: int = -1,
        forgotten: Iterable[TopicPartition] = (),
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        leader_epoch: int = -1,
    ) -> FetchExchange:
        body = fetch_v12.FetchRequest(
            replica_id=self.replica_id,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=64 << 20,
            isolation_level=0,
            session_id=session_id,
            session_epoch=epoch,
            topics=_topics(offsets, leader_epoch),
            forgotten_topics_data=_forgotten(forgotten),
        )
        self._correlation_id += 1
        request = encode_request(ApiKey.FETCH, FETCH_VERSION, body, self._correlation_id,
                                 self.client_id)  # fmt: skip
        self.sock.sendall(request)
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        payload = recv_exact(self.sock, size)
        answered, response = decode_response(ApiKey.FETCH, FETCH_VERSION, payload)
        assert answered == self._correlation_id
        partitions = {(t.topic, p.partition_index): _answer(p)
                      for t in response.responses for p in t.partitions}  # fmt: skip
        return FetchExchange(response.error_code, response.session_id, partitions,
                             len(request), 4 + size)  # fmt: skip


def _topics(offsets: Mapping[TopicPartition, int], leader_epoch: int) -> tuple[Any, ...]:
    topics: dict[str, list[Any]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append(fetch_v12.FetchPartition(
            partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
            partition_max_bytes=PARTITION_MAX_BYTES,
        ))  # fmt: skip
    return tuple(fetch_v12.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items())


def _forgotten(partitions: Iterable[TopicPartition]) -> tuple[Any, ...]:
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    return tuple(fetch_v12.ForgottenTopic(topic=t, partitions=tuple(ps))
                 for t, ps in topics.items())  # fmt: skip


def _answer(p: Any) -> Answer:
    records = bytes(p.records or b"")
    next_offset = None
    for header in iter_batches(records):
        next_offset = header.next_offset
    return Answer(p.error_code, p.high_watermark, p.log_start_offset, next_offset, records)
