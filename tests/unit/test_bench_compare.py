"""The pure parts of bench/compare: percentiles, physical limits, ratios and the result table."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from compare import report
from compare.stats import latency_summary, percentile, throughput

PHYSICAL = {
    "loopback_tcp": {"mb_per_s": 2000.0},
    "loopback_round_trip": {
        "round_trips_per_s": 20_000,
        "p50_ms": 0.05,
        "p99_ms": 0.1,
        "p999_ms": 0.2,
    },
    "page_cache_write": {"mb_per_s": 1000.0},
    "fsync_write": {
        "200": {"writes_per_s": 1000, "p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0},
        "10000": {"writes_per_s": 400, "p50_ms": 2.0},
        "51200": {"writes_per_s": 200, "p50_ms": 4.0},
    },
}


def test_percentile_is_nearest_rank_on_unsorted_samples() -> None:
    samples = [float(n) for n in range(1, 1001)]
    random.Random(7).shuffle(samples)
    assert percentile(samples, 0.5) == 500.0
    assert percentile(samples, 0.99) == 990.0
    assert percentile(samples, 0.999) == 999.0
    assert percentile(samples, 1.0) == 1000.0
    assert percentile([3.0], 0.999) == 3.0


def test_percentile_rejects_no_samples_and_bad_fractions() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_latency_summary_and_throughput_records() -> None:
    summary = latency_summary([1.0] * 998 + [50.0, 100.0])
    assert (summary["p50_ms"], summary["p99_ms"], summary["p999_ms"]) == (1.0, 1.0, 50.0)
    assert summary["max_ms"] == 100.0 and summary["samples"] == 1000
    assert latency_summary([])["p50_ms"] is None
    record = throughput(messages=500, message_bytes=200, seconds=0.5, expected=1000)
    assert record["msgs_per_s"] == 1000 and record["mb_per_s"] == 0.2
    assert record["complete"] is False


def workloads() -> list[report.Workload]:
    return report.plan(
        messages=1000, batch1_messages=100, large_messages=100, rate=100, latency_seconds=1
    )


def test_limits_add_round_trip_transfer_and_disk_per_window() -> None:
    produce_b50 = next(w for w in workloads() if w.key == "produce-200B-b50")
    limits = report.limits(produce_b50, PHYSICAL)
    window_s = 0.05e-3 + 10_000 / 2e9
    assert limits[report.ACK_FIRST]["msgs_per_s"] == round(50 / (window_s + 10_000 / 1e9))
    assert limits[report.FSYNC_FIRST]["msgs_per_s"] == round(50 / (window_s + 2.0e-3))
    consume = next(w for w in workloads() if w.kind == "consume")
    assert report.limits(consume, PHYSICAL)[report.ACK_FIRST]["msgs_per_s"] == 10_000_000
    latency = next(w for w in workloads() if w.kind == "latency")
    assert report.limits(latency, PHYSICAL)[report.FSYNC_FIRST]["p99_ms"] == 2.1
    assert report.fsync_sizes(workloads()) == [200, 10_000, 51_200]


def sample_report() -> dict:
    systems = {
        "weir": ("weir", report.ACK_FIRST),
        "weir-fsync": ("weir flush.messages=1", report.FSYNC_FIRST),
        "rabbitmq-classic": ("RabbitMQ classic queue", report.FSYNC_FIRST),
        "rabbitmq-stream": ("RabbitMQ stream queue", report.ACK_FIRST),
    }
    rates = {
        "weir": 40_000,
        "weir-fsync": 9_000,
        "rabbitmq-classic": 3_000,
        "rabbitmq-stream": 20_000,
    }
    plan = workloads()
    results: dict = {}
    for w in plan:
        for key, rate in rates.items():
            if w.kind == "latency":
                got = {**latency_summary([rate / 10_000] * 10), "achieved_msgs_per_s": 100}
            else:
                got = throughput(rate, w.message_bytes, 1.0, w.count)
            results.setdefault(w.key, {})[key] = got
    return {
        "started_at": "2024-01-01T00:00:00+00:00",
        "machine": {"cpus": 2, "platform": "Linux"},
        "workloads": report.workload_dicts(plan),
        "systems": {
            k: {
                "label": label,
                "durability": f"{klass} test",
                "durability_class": klass,
                "server": {},
                "client": {},
            }
            for k, (label, klass) in systems.items()
        },
        "results": results,
        "limits": {w.key: report.limits(w, PHYSICAL) for w in plan},
        "errors": {},
    }


def test_ratios_compare_weir_at_the_same_durability_class() -> None:
    result = sample_report()
    produce = result["workloads"][1]
    assert report.weir_ratio(result, produce, "rabbitmq-classic") == pytest.approx(3.0)
    assert report.weir_ratio(result, produce, "rabbitmq-stream") == pytest.approx(2.0)
    latency = result["workloads"][-1]
    assert report.weir_ratio(result, latency, "rabbitmq-classic") == pytest.approx(3.0)


def test_markdown_states_ratios_limits_and_goals() -> None:
    text = report.render_markdown(sample_report())
    assert "weir ÷ RabbitMQ classic queue = 3.00x (goal ≥ 2x: met)" in text
    assert "weir ÷ RabbitMQ stream queue = 2.00x (goal ≥ 4x: not met)" in text
    row = next(
        line
        for line in text.splitlines()
        if line.startswith("| RabbitMQ classic queue | fsync before ack test | 3,000 |")
    )
    assert "| 3.00x |" in row
    assert text.count("| physical limit |") == 2 * len(workloads())


def test_result_is_plain_json() -> None:
    result = sample_report()
    assert json.loads(json.dumps(result)) == result
    for workload in result["workloads"]:
        assert set(result["limits"][workload["key"]]) == {report.ACK_FIRST, report.FSYNC_FIRST}
