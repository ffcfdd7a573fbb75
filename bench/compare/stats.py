"""Figures from raw timings: percentiles, latency summaries and throughput records.

Pure functions over numbers; nothing here measures anything.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

MB = 1e6


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least `fraction` of the samples
    at or below it. `samples` need not be sorted; raises ValueError when empty."""
    if not samples:
        raise ValueError("no samples")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError("fraction must be within [0, 1]")
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def latency_summary(samples_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99, p99.9, mean and max of latencies in milliseconds (None when there are none)."""
    if not samples_ms:
        return {
            "samples": 0,
            "p50_ms": None,
            "p99_ms": None,
            "p999_ms": None,
            "mean_ms": None,
            "max_ms": None,
        }
    return {
        "samples": len(samples_ms),
        "p50_ms": round(percentile(samples_ms, 0.50), 3),
        "p99_ms": round(percentile(samples_ms, 0.99), 3),
        "p999_ms": round(percentile(samples_ms, 0.999), 3),
        "mean_ms": round(statistics.fmean(samples_ms), 3),
        "max_ms": round(max(samples_ms), 3),
    }


def throughput(messages: int, message_bytes: int, seconds: float, expected: int) -> dict[str, Any]:
    """A throughput record; `complete` says whether all `expected` messages made it in time."""
    seconds = max(seconds, 1e-9)
    return {
        "messages": messages,
        "expected": expected,
        "complete": messages >= expected,
        "message_bytes": message_bytes,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(messages / seconds),
        "mb_per_s": round(messages * message_bytes / seconds / MB, 2),
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, or None when either is missing or theirs is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs
