"""What the replica manager answers for one partition of a produce or a fetch, and what a fetch
asks of one partition. Plain values: the file slices a fetch hands out are the caller's to
`release` once sent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from weir.storage import FileSlice


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    #: the log end offset right after the append (what acks=all waits for)
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    #: the leader epoch the fetcher believes current (KIP-320); -1 when it does not say
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchResult:
    topic: str
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    data: FileSlice | None = None
    #: the replica the consumer should read this partition from instead (KIP-392); -1: here
    preferred_read_replica: int = -1
    last_stable_offset: int = -1
    #: for read_committed: (producer id, first offset) of aborted transactions in the range
    aborted: tuple[tuple[int, int], ...] | None = None


def release(results: Sequence[FetchResult]) -> None:
    """Close the file slices a fetch handed out."""
    for result in results:
        if result.data is not None:
            result.data.close()
