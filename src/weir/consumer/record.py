"""The record a handler receives.

Owns the `Record` interface and its two forms. `MessageRecord` is what fetchers hand out: a
read-only view over librdkafka's Message (which already holds the key and value as bytes), built
for a whole fetched batch at once by C-level calls, since building an object per record is the
largest cost on the fetch path. `ConsumedRecord` holds plain values: records sent to process
workers are pickled as one, and tests build them directly. Nothing here knows about queues,
offsets or commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

Header = tuple[str, bytes | None]
NO_HEADERS: tuple[Header, ...] = ()
#: Both forms are tuples with the offset third, so a run's offsets are read by one C call.
OFFSET_INDEX = 2


class Record(Protocol):
    """One record of a topic-partition. `timestamp` is in milliseconds (CreateTime or
    LogAppendTime, whichever the topic keeps; -1 when the record has none)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...
    @property
    def timestamp(self) -> int: ...


class ConsumedRecord(NamedTuple):
    """A record as plain values."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]
    timestamp: int


class MessageRecord(tuple[Any, int, int]):
    """A fetched record: (message, partition, offset), the rest read from the message."""

    __slots__ = ()

    partition: int = property(itemgetter(1))  # type: ignore[assignment]
    offset: int = property(itemgetter(2))  # type: ignore[assignment]

    @property
    def topic(self) -> str:
        return self[0].topic()  # type: ignore[no-any-return]

    @property
    def key(self) -> bytes | None:
        return self[0].key()  # type: ignore[no-any-return]

    @property
    def value(self) -> bytes | None:
        return self[0].value()  # type: ignore[no-any-return]

    @property
    def headers(self) -> Sequence[Header]:
        return self[0].headers() or NO_HEADERS

    @property
    def timestamp(self) -> int:
        return self[0].timestamp()[1]  # type: ignore[no-any-return]

    def plain(self) -> ConsumedRecord:
        return ConsumedRecord(
            self.topic, self.partition, self.offset, self.key, self.value,
            self.headers, self.timestamp,
        )  # fmt: skip

    def __reduce__(self) -> tuple[Any, ...]:
        return ConsumedRecord, tuple(self.plain())

    def __repr__(self) -> str:
        return f"MessageRecord({self.topic}-{self.partition}@{self.offset}, key={self.key!r})"


def message_records(
    messages: Sequence[Any], partitions: Sequence[int], offsets: Sequence[int]
) -> list[MessageRecord]:
    """Views over fetched Messages (without errors), with their partitions and offsets (all
    three read off the same messages, so of one length)."""
    return list(map(MessageRecord, zip(messages, partitions, offsets)))  # noqa: B905
