"""The load of each partition, measured where it is served.

Each broker serves its metrics in Prometheus' text format (`metrics.port`, found through
DescribeConfigs of the broker); one request per broker per look gets every partition's traffic
counters — bytes and records produced, bytes fetched by consumers and by followers — and the
size of each replica's log. Two looks give rates. A partition's counters are kept by whichever
broker leads it, and start again at 0 on a new leader, so a partition's rate over a window is
the sum, over brokers, of what each broker's counter grew by (a counter that went down was
started again: its value is its growth).

`LoadHistory` keeps the rates of the last few windows and answers each partition's median, so
one burst moves no partition.
"""

from __future__ import annotations

import statistics
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

TopicPartition = tuple[str, int]

PARTITION_TRAFFIC = "kafka_server_brokerpartitionmetrics_"
#: counter (without the `_total` the parser strips) -> the PartitionCounters field it adds to
COUNTERS = {
    PARTITION_TRAFFIC + "bytesin": "bytes_in",
    PARTITION_TRAFFIC + "messagesin": "messages_in",
    PARTITION_TRAFFIC + "bytesout": "bytes_out",
    PARTITION_TRAFFIC + "replicationbytesout": "replication_bytes_out",
}
LOG_SIZE = "kafka_log_log_size"
#: the share of the last second the broker's event loop was idle (Kafka's handler idle ratio)
IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"
SCRAPE_TIMEOUT_S = 10.0


class LoadError(Exception):
    """A broker's load could not be had."""


@dataclass(frozen=True, slots=True)
class PartitionCounters:
    """A partition's traffic counters on one broker (counted while it led there)."""

    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    replication_bytes_out: int = 0


@dataclass(frozen=True, slots=True)
class BrokerScrape:
    """What one look at a broker's metrics found, at `at` (seconds, any monotonic clock)."""

    node_id: int
    at: float
    counters: Mapping[TopicPartition, PartitionCounters]
    #: bytes of each replica's log on this broker
    sizes: Mapping[TopicPartition, int]
    #: the share of the last second its request handling was idle (None: not reported)
    idle: float | None = None


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """A partition's traffic in bytes (records) a second, and its log's size in bytes."""

    bytes_in: float = 0.0
    messages_in: float = 0.0
    bytes_out: float = 0.0
    size: float = 0.0


def parse_scrape(node_id: int, at: float, text: str) -> BrokerScrape:
    """A broker's metrics page -> its partitions' counters and log sizes."""
    counters: dict[TopicPartition, dict[str, int]] = {}
    sizes: dict[TopicPartition, int] = {}
    idle = None
    try:
        for family in text_string_to_metric_families(text):
            if family.name == IDLE and family.samples:
                idle = float(family.samples[0].value)
                continue
            field = COUNTERS.get(family.name)
            if field is None and family.name != LOG_SIZE:
                continue
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                tp = (sample.labels["topic"], int(sample.labels["partition"]))
                if field is None:
                    sizes[tp] = int(sample.value)
                else:
                    counters.setdefault(tp, {})[field] = int(sample.value)
    except (ValueError, KeyError) as exc:
        raise LoadError(f"broker {node_id}: its metrics cannot be read: {exc}") from None
    return BrokerScrape(node_id, at, {tp: PartitionCounters(**values)
                                      for tp, values in counters.items()}, sizes, idle)  # fmt: skip


def scrape(node_id: int, url: str, at: float) -> BrokerScrape:
    """One look at the metrics served at `url`."""
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode()
    except (OSError, urllib.error.URLError) as exc:
        raise LoadError(f"broker {node_id}: metrics at {url}: {exc}") from None
    return parse_scrape(node_id, at, text)


def rates(
    before: Mapping[int, BrokerScrape], after: Mapping[int, BrokerScrape]
) -> dict[TopicPartition, PartitionLoad]:
    """Each partition's load between two looks at the same brokers: the growth of its counters
    summed over brokers, a second; its size is its largest replica's in the later look."""
    totals: dict[TopicPartition, list[float]] = {}
    for node_id, late in after.items():
        early = before.get(node_id)
        if early is None or late.at <= early.at:
            continue
        seconds = late.at - early.at
        for tp, counters in late.counters.items():
            previous = early.counters.get(tp, PartitionCounters())
            total = totals.setdefault(tp, [0.0, 0.0, 0.0])
            total[0] += _growth(previous.bytes_in, counters.bytes_in) / seconds
            total[1] += _growth(previous.messages_in, counters.messages_in) / seconds
            total[2] += _growth(previous.bytes_out, counters.bytes_out) / seconds
    sizes: dict[TopicPartition, int] = {}
    for late in after.values():
        for tp, size in late.sizes.items():
            sizes[tp] = max(size, sizes.get(tp, 0))
    out = {}
    for tp in totals.keys() | sizes.keys():
        bytes_in, messages_in, bytes_out = totals.get(tp, (0.0, 0.0, 0.0))
        out[tp] = PartitionLoad(bytes_in, messages_in, bytes_out, float(sizes.get(tp, 0)))
    return out


def _growth(early: int, late: int) -> int:
    return late - early if late >= early else late


class LoadHistory:
    """The loads of the last `windows` windows; each partition's median over them."""

    def __init__(self, windows: int) -> None:
        self._windows: deque[dict[TopicPartition, PartitionLoad]] = deque(maxlen=windows)

    def __len__(self) -> int:
        return len(self._windows)

    def add(self, loads: dict[TopicPartition, PartitionLoad]) -> None:
        self._windows.append(loads)

    def median(self, partitions: Iterable[TopicPartition] | None = None) -> dict[
            TopicPartition, PartitionLoad]:  # fmt: skip
        """Each partition's median traffic over the windows (a window without it counts as
        idle) and its latest size."""
        windows = list(self._windows)
        names = set(partitions) if partitions is not None else {
            tp for window in windows for tp in window}  # fmt: skip
        idle = PartitionLoad()
        out = {}
        for tp in names:
            seen = [window.get(tp, idle) for window in windows]
            latest = next((w[tp] for w in reversed(windows) if tp in w), idle)
            out[tp] = PartitionLoad(
                statistics.median(s.bytes_in for s in seen) if seen else 0.0,
                statistics.median(s.messages_in for s in seen) if seen else 0.0,
                statistics.median(s.bytes_out for s in seen) if seen else 0.0,
                latest.size,
            )  # fmt: skip
        return out
