"""The Prometheus endpoint: what a scrape shows, and throughput over a sliding window."""

from __future__ import annotations

import urllib.request

from weir.consumer.metrics import (
    FetcherStats,
    MetricsEndpoint,
    PartitionOffsets,
    Snapshot,
    Throughput,
    WorkerStats,
)


def snapshot() -> Snapshot:
    fetcher = FetcherStats(fetched=120, buffered_peak=50, paused_partitions=3, pauses=2)
    fetcher.rebalances, fetcher.member_id = 1, "m-1"
    fetcher.partitions = {
        ("orders", 0): PartitionOffsets(committed=90, high_watermark=130),
        ("orders", 1): PartitionOffsets(committed=None, high_watermark=None),
    }
    return Snapshot(
        group="billing",
        fetchers=[fetcher],
        workers=[WorkerStats(handled=60, retries=3), WorkerStats(handled=40, dead_lettered=1)],
        queued=15,
        buffered=20,
        max_buffered=50,
        throughput=12.5,
    )


def test_a_scrape_shows_lag_throughput_and_queue_depth() -> None:
    endpoint = MetricsEndpoint(snapshot, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://{endpoint.address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        endpoint.close()
    lines = set(text.splitlines())
    for expected in [
        'weir_consumer_lag{partition="0",topic="orders"} 40.0',
        'weir_consumer_committed_offset{partition="0",topic="orders"} 90.0',
        "weir_consumer_throughput 12.5",
        "weir_consumer_queue_depth 15.0",
        "weir_consumer_buffered_records 20.0",
        "weir_consumer_buffered_records_limit 50.0",
        "weir_consumer_records_handled_total 100.0",
        "weir_consumer_records_fetched_total 120.0",
        "weir_consumer_records_dead_lettered_total 1.0",
        "weir_consumer_retries_total 3.0",
        "weir_consumer_paused_partitions 3.0",
        "weir_consumer_rebalances_total 1.0",
        'weir_consumer_member{group="billing",member_id="m-1"} 1.0',
    ]:
        assert expected in lines, expected
    assert not any('partition="1"' in line for line in lines), "unknown lag is not reported"


def test_throughput_is_measured_over_the_last_ten_seconds() -> None:
    throughput = Throughput()
    throughput.sample(0.0, 0)
    throughput.sample(1.0, 1000)
    assert throughput.rate == 1000
    for second in range(2, 30):
        throughput.sample(float(second), 1000 + (second - 1) * 10)
    assert 10 <= throughput.rate < 12  # the early burst has left the window
