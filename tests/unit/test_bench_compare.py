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
        "200000": {"writes_per_s": 100, "p50_ms": 5.0},
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
    assert report.fsync_sizes(workloads()) == [200, 10_000, 51_200, 200_000]


def test_pipelined_workload_follows_the_read_with_the_batch_50_count() -> None:
    keys = [w.key for w in workloads()]
    assert keys.index("consume-200B") < keys.index("produce-200B-pipelined")
    pipelined = next(w for w in workloads() if w.key == "produce-200B-pipelined")
    assert (pipelined.count, pipelined.in_flight, pipelined.batch) == (1000, report.IN_FLIGHT, 0)
    assert pipelined.message_bytes == 200 and pipelined.kind == "produce"
    own = report.plan(
        messages=1000,
        batch1_messages=100,
        large_messages=100,
        rate=100,
        latency_seconds=1,
        pipelined_messages=70,
        in_flight=30,
    )
    pipelined = next(w for w in own if w.key == "produce-200B-pipelined")
    assert (pipelined.count, pipelined.in_flight) == (70, 30)
    assert report.fsync_sizes(own) == [200, 6_000, 10_000, 51_200]


def test_pipelined_limits_pay_no_round_trip_per_message_unless_fsync_first() -> None:
    pipelined = next(w for w in workloads() if w.key == "produce-200B-pipelined")
    limits = report.limits(pipelined, PHYSICAL)
    # the page cache (1,000 MB/s) is slower than loopback (2,000 MB/s)
    assert limits[report.ACK_FIRST]["msgs_per_s"] == 5_000_000
    group_s = 0.05e-3 + 200_000 / 2e9 + 5.0e-3
    assert limits[report.FSYNC_FIRST]["msgs_per_s"] == round(1000 / group_s)
    assert "1,000 in flight" in limits[report.FSYNC_FIRST]["basis"]


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
    pipelined_rates = {
        "weir": 90_000,
        "weir-fsync": 12_000,
        "rabbitmq-classic": 4_000,
        "rabbitmq-stream": 50_000,
    }
    plan = workloads()
    results: dict = {}
    for w in plan:
        for key, rate in (pipelined_rates if w.in_flight else rates).items():
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


def section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((n for n in range(start, len(lines)) if lines[n].startswith("## ")), len(lines))
    return lines[start:end]


def test_markdown_gives_the_pipelined_producer_its_rows_and_goal() -> None:
    text = report.render_markdown(sample_report())
    goals = [line for line in text.splitlines() if line.startswith("- produce 200 B, pipelined:")]
    assert goals == [
        "- produce 200 B, pipelined: weir ÷ RabbitMQ classic queue = 3.00x (goal ≥ 2x: met)",
        "- produce 200 B, pipelined: weir ÷ RabbitMQ stream queue = 1.80x (goal ≥ 2x: not met)",
    ]
    assert text.index("- produce 200 B, batch 50:") < text.index(goals[0])
    rows = section(text, "produce 200 B, pipelined")
    assert rows[1].startswith("1,000 messages of 200 B, pipelined: about 1,000 kept")
    stream = next(r for r in rows if r.startswith("| RabbitMQ stream queue |"))
    assert "| 50,000 | 10.0 | 1.80x | 1.0 % |" in stream
    classic = next(r for r in rows if r.startswith("| RabbitMQ classic queue |"))
    assert "| 4,000 | 0.8 | 3.00x |" in classic
    weir = next(r for r in rows if r.startswith("| weir |"))
    assert "| 90,000 | 18.0 | — |" in weir
    assert sum(r.startswith("| physical limit |") for r in rows) == 2


def test_markdown_marks_refused_messages() -> None:
    result = sample_report()
    got = result["results"]["produce-200B-pipelined"]["rabbitmq-stream"]
    got.update(messages=49_990, complete=False, failed=10)
    rows = section(report.render_markdown(result), "produce 200 B, pipelined")
    assert any(
        r.startswith("| RabbitMQ stream queue (49,990 in time) (10 refused) |") for r in rows
    )


def test_settled_delivery_tags_honour_multiple_confirms() -> None:
    from compare.clients.rabbitmq import _Settled

    settled = _Settled()
    assert settled.settle(3, multiple=False) == 1
    assert settled.settle(3, multiple=False) == 0
    assert settled.settle(5, multiple=True) == 4  # 1, 2, 4 and 5; 3 was already settled
    assert settled.settle(4, multiple=True) == 0
    assert settled.settle(7, multiple=False) == 1
    assert settled.settle(6, multiple=False) == 1
    assert (settled.low, settled.above, settled.count) == (8, set(), 7)
    assert settled.settle(9, multiple=True) == 2


def test_result_is_plain_json() -> None:
    result = sample_report()
    assert json.loads(json.dumps(result)) == result
    for workload in result["workloads"]:
        assert set(result["limits"][workload["key"]]) == {report.ACK_FIRST, report.FSYNC_FIRST}
