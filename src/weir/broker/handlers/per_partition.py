"""Per-partition answers, as every handler that answers partition by partition builds them:
entries grouped under their topic, in the order the results give (`by_topic`), and for the APIs
whose entries carry only an error code, those entries too (`partition_errors`, and
`flat_partition_errors` for the inter-broker APIs that do not group them).

Pure functions over kio classes: no state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from weir.broker.context import make

T = TypeVar("T")
TopicPartition = tuple[str, int]


def by_topic(
    results: Iterable[tuple[TopicPartition, T]],
    partition: Callable[[int, T], Any],
    topic: Callable[[str, tuple[Any, ...]], Any],
) -> tuple[Any, ...]:
    """One `topic(name, entries)` per topic of `results` ((topic, index), result) pairs, its
    entries `partition(index, result)`: topics and partitions in the order they come."""
    grouped: dict[str, list[Any]] = {}
    for (name, index), result in results:
        grouped.setdefault(name, []).append(partition(index, result))
    return tuple(topic(name, tuple(entries)) for name, entries in grouped.items())


def partition_errors(
    results: Mapping[TopicPartition, ErrorCode],
    partition_type: type,
    topic_type: type,
    *,
    index: str = "partition_index",
    error: str = "error_code",
    name: str = "name",
    partitions: str = "partitions",
    **same: Any,
) -> tuple[Any, ...]:
    """`by_topic` for answers that are an error code per partition; the keyword arguments
    name the messages' fields where an API names them otherwise, and `same` gives fields every
    partition's entry has alike."""
    return by_topic(
        results.items(),
        lambda i, code: make(partition_type, **{index: i, error: code}, **same),
        lambda n, entries: make(topic_type, **{name: n, partitions: entries}),
    )


def flat_partition_errors(
    results: Mapping[TopicPartition, ErrorCode],
    partition_type: type,
    *,
    name: str = "topic_name",
    index: str = "partition_index",
    error: str = "error_code",
) -> tuple[Any, ...]:
    """An error code per partition, each entry naming its topic (the inter-broker APIs'
    ungrouped form)."""
    return tuple(make(partition_type, **{name: topic, index: i, error: code})
                 for (topic, i), code in results.items())  # fmt: skip
