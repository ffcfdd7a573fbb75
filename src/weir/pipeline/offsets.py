"""Offset options and read planning for the Spark source, in pure Python (no IO, no Spark).

Owns the parsing of ``startingOffsets`` / ``endingOffsets`` as Spark's Kafka source spells them
(``earliest``, ``latest``, or JSON ``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and
-1 latest), the resolution of those specs against each partition's log start offset and high
watermark, and the split of offset ranges into Spark input partitions.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
OffsetSpec = int | dict[TopicPartition, int]


class OffsetOptionError(ValueError):
    """An offset option that cannot be understood or applied; raised on the driver."""


class DataLossError(RuntimeError):
    """Offsets to read are no longer in the log (deleted by retention or DeleteRecords)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetRange:
    """The records ``start <= offset < end`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True, slots=True, kw_only=True)
class Watermarks:
    """A partition's log start offset (first readable) and high watermark (next to be written)."""

    log_start: int
    high: int


def parse_offset_spec(text: str | None, *, default: int, option: str) -> OffsetSpec:
    """``earliest`` -> EARLIEST, ``latest`` -> LATEST, JSON -> {(topic, partition): offset}."""
    if text is None or not text.strip():
        return default
    word = text.strip().lower()
    if word == "earliest":
        return EARLIEST
    if word == "latest":
        return LATEST
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OffsetOptionError(f"{option}: not earliest, latest or JSON: {exc}") from exc
    return _per_partition(document, option)


def _per_partition(document: object, option: str) -> dict[TopicPartition, int]:
    if not isinstance(document, dict):
        raise OffsetOptionError(f'{option}: expected {{"topic": {{"partition": offset}}}}')
    offsets: dict[TopicPartition, int] = {}
    for topic, partitions in document.items():
        if not isinstance(partitions, dict):
            raise OffsetOptionError(f"{option}: offsets of topic {topic!r} must be an object")
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or offset < EARLIEST:
                raise OffsetOptionError(f"{option}: bad offset {offset!r} for {topic}-{partition}")
            offsets[(topic, int(partition))] = offset
    return offsets


def resolve(
    spec: OffsetSpec, watermarks: Mapping[TopicPartition, Watermarks], *, option: str
) -> dict[TopicPartition, int]:
    """Absolute offsets for every partition in ``watermarks`` (-2/-1 become log start/high).

    Partitions absent from a per-partition spec take EARLIEST for startingOffsets and LATEST
    for endingOffsets, as in Spark's Kafka source.
    """
    if isinstance(spec, int):
        return {tp: _absolute(spec, marks) for tp, marks in watermarks.items()}
    unknown = sorted(set(spec) - set(watermarks))
    if unknown:
        names = ", ".join(f"{t}-{p}" for t, p in unknown)
        raise OffsetOptionError(f"{option} names partitions that are not subscribed: {names}")
    missing = EARLIEST if option == "startingOffsets" else LATEST
    return {tp: _absolute(spec.get(tp, missing), marks) for tp, marks in watermarks.items()}


def _absolute(offset: int, marks: Watermarks) -> int:
    if offset == EARLIEST:
        return marks.log_start
    if offset == LATEST:
        return marks.high
    return offset


def plan_ranges(
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    watermarks: Mapping[TopicPartition, Watermarks],
    *,
    fail_on_data_loss: bool,
) -> tuple[list[OffsetRange], list[str]]:
    """One range per partition, and warnings for data lost when ``fail_on_data_loss`` is false.

    A start below the log start offset means records were deleted before they were read: that
    raises DataLossError, or moves the start up to the log start offset with a warning.
    """
    ranges: list[OffsetRange] = []
    warnings: list[str] = []
    for tp in sorted(watermarks):
        start, end, marks = starts[tp], ends[tp], watermarks[tp]
        if start < marks.log_start:
            message = data_loss_message(tp, start, marks.log_start)
            if fail_on_data_loss:
                raise DataLossError(message)
            warnings.append(message)
            start = marks.log_start
        if end > marks.high:
            raise OffsetOptionError(
                f"endingOffsets {end} for {tp[0]}-{tp[1]} is beyond its high watermark {marks.high}"
            )
        ranges.append(OffsetRange(topic=tp[0], partition=tp[1], start=start, end=max(start, end)))
    return ranges, warnings


def data_loss_message(tp: TopicPartition, wanted: int, log_start: int) -> str:
    return (
        f"{tp[0]}-{tp[1]}: offsets {wanted}..{log_start - 1} were deleted before they were read "
        f"(log start offset is now {log_start}). Some data may have been lost; set "
        f"failOnDataLoss=false to continue from the log start offset instead of failing."
    )


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Ranges split so that there are at least ``min_partitions`` of similar size when possible.

    Like Spark's Kafka source ``minPartitions``: a range gets a share of the pieces in
    proportion to its size, and empty ranges are dropped.
    """
    nonempty = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in nonempty)
    if total == 0:
        return []
    pieces: list[OffsetRange] = []
    for r in nonempty:
        parts = max(1, min(r.size, math.ceil(min_partitions * r.size / total)))
        pieces.extend(_split(r, parts))
    return pieces


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
    return [
        OffsetRange(topic=r.topic, partition=r.partition, start=lo, end=hi)
        for lo, hi in itertools.pairwise(bounds)
        if hi > lo
    ]


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): offset}`` as ``{"topic": {"partition": offset}}`` (JSON keys)."""
    document: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        document.setdefault(topic, {})[str(partition)] = offset
    return document


def offsets_from_json(document: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """The inverse of ``offsets_to_json``."""
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in document.items()
        for partition, offset in partitions.items()
    }


def admit(
    starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int], max_records: int
) -> dict[TopicPartition, int]:
    """End offsets moved back so that at most ``max_records`` records lie between the two.

    Every partition gets a share of ``max_records`` in proportion to its backlog, rounded
    down; what rounding leaves over goes to the largest backlogs first, so a limit of at
    least one record always makes progress. Partitions absent from ``starts`` keep their end.
    """
    backlog = {tp: max(0, end - starts.get(tp, end)) for tp, end in ends.items()}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(ends)
    shares = {tp: max_records * size // total for tp, size in backlog.items()}
    left = max_records - sum(shares.values())
    for tp in sorted(backlog, key=lambda t: (shares[t] - backlog[t], t)):
        if left == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: starts[tp] + shares[tp] if tp in starts else end for tp, end in ends.items()}
