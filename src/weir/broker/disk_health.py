"""Throttling the partitions that hurt a disk, not the clients (SEEDS.md §5, "Partition-level
throttling").

Every `disk.health.sample.interval.ms` the broker reads, for the device under each log
directory, `/proc/diskstats` (how busy the device was: its utilisation, the share of the interval
it had I/O in flight, and its mean wait per I/O) and `/proc/meminfo` (MemAvailable). From them it
estimates how long data stays in the page cache: T = available memory / (the device's read +
write bytes a second). A partition's records a second are measured from its log end offset. A
consumer's fetch at an offset below LEO - (records a second * T) is a cold read: it probably
reads the disk.

When a device's utilisation passes `disk.throttle.util.threshold` or its mean wait passes
`disk.throttle.await.ms.threshold`, the partitions on it that read cold in the last interval are
ranked by their cold bytes, and those making up most of them (at least the first) are throttled:
each one's cold reads are held to `disk.throttle.partition.bytes.per.second`. A throttle is
lifted once the device is healthy again and the partition's reads fit within the rate (none was
held since the last look): a device that looks healthy only because the throttle works keeps it.
A fetch of a throttled partition at a cold offset while it is over its rate gets no records for
that partition and the response a throttle time (the wait until the partition may read again),
so the client backs off; the other partitions of the same fetch, and everything on healthy
devices, keep their speed. Writes are not held: what is produced must be stored.

Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
SECTOR_BYTES = 512
#: the throttled partitions of a device are those making up this share of its cold bytes
THROTTLED_SHARE = 0.8
DISKSTATS = Path("/proc/diskstats")
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True, slots=True)
class DiskThrottleSettings:
    enabled: bool = False
    util_threshold: float = 0.9
    await_ms_threshold: float = 50.0
    partition_bytes_per_second: int = 1_048_576
    sample_interval_ms: int = 1000

    def problems(self) -> list[str]:
        """What is out of range, in the settings' names."""
        out = []
        if not 0 < self.util_threshold <= 1:
            out.append(f"disk.throttle.util.threshold must be above 0 and at most 1, not "
                       f"{self.util_threshold:g}")  # fmt: skip
        if self.await_ms_threshold <= 0:
            out.append(f"disk.throttle.await.ms.threshold must be above 0, not "
                       f"{self.await_ms_threshold:g}")  # fmt: skip
        if self.partition_bytes_per_second < 1:
            out.append(f"disk.throttle.partition.bytes.per.second must be at least 1, not "
                       f"{self.partition_bytes_per_second}")  # fmt: skip
        if self.sample_interval_ms < 10:
            out.append(f"disk.health.sample.interval.ms must be at least 10, not "
                       f"{self.sample_interval_ms}")  # fmt: skip
        return out


@dataclass(frozen=True, slots=True)
class DeviceCounters:
    """One line of /proc/diskstats, the fields used."""

    reads: int
    sectors_read: int
    read_ms: int
    writes: int
    sectors_written: int
    write_ms: int
    io_ms: int


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """A device over the last interval."""

    name: str
    util: float
    await_ms: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    #: how long data is estimated to stay in the page cache (inf: no disk traffic)
    page_cache_s: float
    unhealthy: bool


def read_diskstats(text: str) -> dict[tuple[int, int], tuple[str, DeviceCounters]]:
    """(major, minor) -> (device name, its counters), from /proc/diskstats' text."""
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14:
            continue
        numbers = [int(f) for f in fields[3:14]]
        counters = DeviceCounters(numbers[0], numbers[2], numbers[3], numbers[4], numbers[6],
                                  numbers[7], numbers[9])  # fmt: skip
        out[(int(fields[0]), int(fields[1]))] = (fields[2], counters)
    return out


def mem_available(text: str) -> int:
    """MemAvailable from /proc/meminfo's text, in bytes (0 if absent)."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def device_of(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return os.major(st.st_dev), os.minor(st.st_dev)


@dataclass
class _Bucket:
    """A throttled partition's cold-read allowance, in bytes (negative: owed)."""

    tokens: float
    at_ms: int
    #: a read was held since the last look: the partition still wants more than its rate
    held: bool = False


@dataclass
class _Device:
    name: str
    previous: DeviceCounters | None = None
    health: DeviceHealth | None = None
    partitions: set[TopicPartition] = field(default_factory=set)


class DiskHealth:
    """The health of the devices under `log_dirs` and the partitions throttled on them."""

    def __init__(
        self,
        settings: DiskThrottleSettings,
        log_dirs: Iterable[Path],
        *,
        now_ms: Callable[[], int],
        diskstats: Callable[[], str] = DISKSTATS.read_text,
        meminfo: Callable[[], str] = MEMINFO.read_text,
        device: Callable[[Path], tuple[int, int]] = device_of,
    ) -> None:
        self.settings = settings
        self._now_ms = now_ms
        self._diskstats = diskstats
        self._meminfo = meminfo
        self._dir_device: dict[str, tuple[int, int]] = {}
        for path in log_dirs:
            try:
                self._dir_device[str(path)] = device(path)
            except OSError as exc:
                log.warning("no device known for log directory %s: %s", path, exc)
        self._devices: dict[tuple[int, int], _Device] = {}
        self._sampled_ms: int | None = None
        self._log_ends: dict[TopicPartition, int] = {}
        self._rates: dict[TopicPartition, float] = {}
        self._device_of: dict[TopicPartition, tuple[int, int]] = {}
        self._cold_bytes: dict[TopicPartition, int] = {}
        self.throttled: dict[TopicPartition, _Bucket] = {}

    # ---- sampling ------------------------------------------------------------------------------

    def sample(self, partitions: Iterable[tuple[str, TopicPartition, int]]) -> None:
        """One look: `partitions` are (log directory, partition, log end offset) of every log
        here. Unknown devices (tmpfs, a directory whose device /proc/diskstats does not list)
        are never unhealthy."""
        now = self._now_ms()
        seconds = (now - self._sampled_ms) / 1000 if self._sampled_ms is not None else 0.0
        self._sampled_ms = now
        try:
            stats = read_diskstats(self._diskstats())
            available = mem_available(self._meminfo())
        except OSError as exc:
            log.warning("disk statistics not readable: %s", exc)
            return
        for device in self._devices.values():
            device.partitions.clear()
        for directory, tp, log_end in partitions:
            key = self._dir_device.get(directory)
            if key is None:
                continue
            self._device_of[tp] = key
            holder = self._devices.get(key)
            if holder is None:
                known = stats.get(key)
                holder = _Device(known[0] if known else f"{key[0]}:{key[1]}")
                self._devices[key] = holder
            holder.partitions.add(tp)
            previous = self._log_ends.get(tp)
            self._log_ends[tp] = log_end
            if previous is not None and seconds > 0:
                self._rates[tp] = max(0, log_end - previous) / seconds
        for key, device in self._devices.items():
            found = stats.get(key)
            if found is None:
                continue
            counters = found[1]
            if device.previous is not None and seconds > 0:
                device.health = self._health(device.name, device.previous, counters, seconds,
                                             available)  # fmt: skip
            device.previous = counters
        self._choose_throttled()
        self._cold_bytes.clear()

    def _health(
        self, name: str, early: DeviceCounters, late: DeviceCounters, seconds: float,
        available: int,
    ) -> DeviceHealth:  # fmt: skip
        ios = (late.reads - early.reads) + (late.writes - early.writes)
        waited = (late.read_ms - early.read_ms) + (late.write_ms - early.write_ms)
        util = min(1.0, max(0, late.io_ms - early.io_ms) / (seconds * 1000))
        await_ms = waited / ios if ios > 0 else 0.0
        read_rate = max(0, late.sectors_read - early.sectors_read) * SECTOR_BYTES / seconds
        write_rate = max(0, late.sectors_written - early.sectors_written) * SECTOR_BYTES / seconds
        traffic = read_rate + write_rate
        cache_s = available / traffic if traffic > 0 else float("inf")
        unhealthy = (util >= self.settings.util_threshold
                     or await_ms >= self.settings.await_ms_threshold)  # fmt: skip
        return DeviceHealth(name, util, await_ms, read_rate, write_rate, cache_s, unhealthy)

    def _choose_throttled(self) -> None:
        now = self._now_ms()
        chosen: set[TopicPartition] = set()
        for device in self._devices.values():
            if device.health is None or not device.health.unhealthy:
                continue
            cold = sorted(((self._cold_bytes.get(tp, 0), tp) for tp in device.partitions
                           if self._cold_bytes.get(tp, 0) > 0), reverse=True)  # fmt: skip
            total = sum(b for b, _ in cold)
            taken = 0
            for cold_bytes, tp in cold:
                if taken >= THROTTLED_SHARE * total:
                    break
                chosen.add(tp)
                taken += cold_bytes
        for tp in chosen - self.throttled.keys():
            log.info("disk %s unhealthy: throttling cold reads of %s-%d",
                     self._devices[self._device_of[tp]].name, *tp)  # fmt: skip
            self.throttled[tp] = _Bucket(0.0, now)
        for tp in self.throttled.keys() - chosen:
            if not self.throttled[tp].held and not self._still_unhealthy(tp):
                del self.throttled[tp]
                log.info("cold reads of %s-%d no longer throttled", *tp)
        for bucket in self.throttled.values():
            bucket.held = False

    def _still_unhealthy(self, tp: TopicPartition) -> bool:
        device = self._devices.get(self._device_of.get(tp, (-1, -1)))
        return device is not None and device.health is not None and device.health.unhealthy

    def devices(self) -> Mapping[str, DeviceHealth]:
        return {d.name: d.health for d in self._devices.values() if d.health is not None}

    # ---- fetches -------------------------------------------------------------------------------

    def cold(self, tp: TopicPartition, offset: int, log_end: int) -> bool:
        """Whether a read of `tp` at `offset` probably reads the disk."""
        device = self._devices.get(self._device_of.get(tp, (-1, -1)))
        if device is None or device.health is None:
            return False
        rate = self._rates.get(tp, 0.0)
        if rate <= 0:
            return offset < log_end  # written before any recent look: long out of the cache
        return offset < log_end - rate * device.health.page_cache_s

    def admit(self, tp: TopicPartition, offset: int, log_end: int) -> tuple[int, int | None]:
        """Whether a consumer may read `tp` at `offset` now: (0, None) for a read that is not
        held; (0, bytes) for a throttled cold read, which may read that much (what its rate
        has saved up); (ms, None) for one held that long."""
        bucket = self.throttled.get(tp)
        if bucket is None or not self.cold(tp, offset, log_end):
            return 0, None
        self._refill(bucket)
        if bucket.tokens > 0:
            return 0, int(bucket.tokens)
        bucket.held = True
        rate = self.settings.partition_bytes_per_second
        return max(1, int(-bucket.tokens / rate * 1000) + 1), None

    def note_read(self, tp: TopicPartition, offset: int, log_end: int, size: int) -> None:
        """A consumer read `size` bytes of `tp` from `offset`."""
        if size <= 0 or not self.cold(tp, offset, log_end):
            return
        self._cold_bytes[tp] = self._cold_bytes.get(tp, 0) + size
        bucket = self.throttled.get(tp)
        if bucket is not None:
            self._refill(bucket)
            bucket.tokens -= size

    def _refill(self, bucket: _Bucket) -> None:
        now = self._now_ms()
        rate = self.settings.partition_bytes_per_second
        bucket.tokens = min(float(rate), bucket.tokens + (now - bucket.at_ms) / 1000 * rate)
        bucket.at_ms = now
