"""Throttling by disk health (weir.broker.disk_health) on /proc texts written as the kernel
writes them: a busy device's cold reader throttled and held to its rate, a partition reading
near its log end never held, the throttle kept while it still bites and lifted once the device
is healthy and the reads fit, and settings out of range named."""

from __future__ import annotations

from pathlib import Path

from weir.broker.disk_health import DiskHealth, DiskThrottleSettings, mem_available, read_diskstats

MEMINFO = "MemTotal: 24000000 kB\nMemFree: 1000 kB\nMemAvailable: 1000000 kB\n"  # ~1 GB
SETTINGS = DiskThrottleSettings(True, util_threshold=0.5, await_ms_threshold=100.0,
                                partition_bytes_per_second=100_000)  # fmt: skip


def diskstats(io_ms: int, sectors_read: int, reads: int = 100, read_ms: int = 100) -> str:
    """One device, 254:0 vda, with the fields that count (the rest 0)."""
    return (f" 254       0 vda {reads} 0 {sectors_read} {read_ms} 0 0 0 0 0 {io_ms} "
            f"{read_ms} 0 0 0 0 0 0\n"
            " 254       1 vda1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")  # fmt: skip


class World:
    def __init__(self) -> None:
        self.now = 0
        self.stats = diskstats(0, 0)
        self.health = DiskHealth(SETTINGS, [Path("/data")], now_ms=lambda: self.now,
                                 diskstats=lambda: self.stats, meminfo=lambda: MEMINFO,
                                 device=lambda _path: (254, 0))  # fmt: skip

    def look(self, after_ms: int, stats: str, ends: dict[tuple[str, int], int]) -> None:
        self.now += after_ms
        self.stats = stats
        self.health.sample(("/data", tp, end) for tp, end in ends.items())


COLD, WARM = ("t", 0), ("t", 1)


def test_the_kernels_texts_are_read() -> None:
    name, counters = read_diskstats(diskstats(700, 2048))[(254, 0)]
    assert name == "vda" and counters.io_ms == 700 and counters.sectors_read == 2048
    assert mem_available(MEMINFO) == 1_000_000 * 1024


def test_a_busy_devices_cold_reader_is_throttled_and_the_warm_one_never_held() -> None:
    world = World()
    world.look(0, diskstats(0, 0), {COLD: 1000, WARM: 0})
    world.look(1000, diskstats(100, 0), {COLD: 1000, WARM: 1000})  # WARM: 1000 records/s
    assert world.health.throttled == {}
    world.health.note_read(COLD, 0, 1000, 5_000_000)  # offset 0 of an idle partition: cold
    world.health.note_read(WARM, 990, 2000, 10_000)  # near its end: in the page cache
    world.look(1000, diskstats(900, 20_000), {COLD: 1000, WARM: 2000})  # 80% busy
    [device] = world.health.devices().values()
    assert device.unhealthy and device.util == 0.8
    assert set(world.health.throttled) == {COLD}
    assert world.health.admit(WARM, 1990, 3000) == (0, None)

    assert world.health.admit(COLD, 0, 1000) == (1, None)  # nothing saved up yet: ...
    world.now += 500  # ... half a second later, 50 kB
    assert world.health.admit(COLD, 0, 1000) == (0, 50_000)
    world.health.note_read(COLD, 0, 1000, 400_000)  # one batch larger than the cap
    hold, cap = world.health.admit(COLD, 0, 1000)
    assert cap is None and 3400 <= hold <= 3600  # 350 kB owed at 100 kB/s
    assert world.health.admit(COLD, 999, 1000)[0] > 0
    assert world.health.admit(COLD, 1000, 1000) == (0, None)  # at the end: nothing to read

    world.look(1000, diskstats(950, 20_100), {COLD: 1000, WARM: 3000})  # healthy, but held
    assert set(world.health.throttled) == {COLD}
    world.look(1000, diskstats(1000, 20_200), {COLD: 1000, WARM: 4000})  # healthy, not held
    assert world.health.throttled == {}


def test_settings_out_of_range_are_named() -> None:
    bad = DiskThrottleSettings(True, util_threshold=0, await_ms_threshold=-1,
                               partition_bytes_per_second=0, sample_interval_ms=5)  # fmt: skip
    problems = " ".join(bad.problems())
    for name in ("disk.throttle.util.threshold", "disk.throttle.await.ms.threshold",
                 "disk.throttle.partition.bytes.per.second", "disk.health.sample.interval.ms"):
        assert name in problems
    assert SETTINGS.problems() == []
