"""Helpers shared by the storage unit tests."""

from __future__ import annotations

from collections.abc import Callable

from weir.records import Record, build_batch, iter_batches, iter_records
from weir.storage import PartitionLog

OpenLog = Callable[..., PartitionLog]


def batch(values: list[bytes], timestamp: int = 0, keys: list[bytes | None] | None = None) -> bytes:
    keys = keys if keys is not None else [None] * len(values)
    records = [
        Record(offset=i, timestamp=timestamp, key=k, value=v)
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    return build_batch(records)


def all_values(log: PartitionLog, start: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record readable from `start` to the high watermark."""
    out: list[tuple[int, bytes | None]] = []
    offset = start
    while offset < log.high_watermark:
        info = log.read(offset, 1 << 20)
        if info.data is None:
            break
        for header in iter_batches(info.data.read_bytes(), verify_crc=True):
            out += [(r.offset, r.value) for r in iter_records(header) if r.offset >= start]
            offset = header.next_offset
    return out
