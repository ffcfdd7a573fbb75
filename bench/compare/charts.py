"""PNG bar charts of the comparison: one for throughput, one for latency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .report import ACK_FIRST

COLOURS = {ACK_FIRST: "#4c72b0"}
FSYNC_COLOUR = "#dd8452"


def _colour(report: dict[str, Any], key: str) -> str:
    return COLOURS.get(report["systems"][key]["durability_class"], FSYNC_COLOUR)


def throughput_chart(report: dict[str, Any], path: Path) -> None:
    workloads = [w for w in report["workloads"] if w["kind"] != "latency"]
    fig, axes = plt.subplots(len(workloads), 1, figsize=(10, 2.6 * len(workloads)))
    for ax, workload in zip(axes, workloads, strict=True):
        results = report["results"].get(workload["key"], {})
        keys = list(results)
        values = [results[k]["msgs_per_s"] for k in keys]
        labels = [
            f"{report['systems'][k]['label']}\n{report['systems'][k]['durability_class']}"
            for k in keys
        ]
        ax.barh(labels, values, color=[_colour(report, k) for k in keys])
        ax.set_title(workload["title"], fontsize=10)
        ax.set_xlabel("messages/s")
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_chart(report: dict[str, Any], path: Path) -> None:
    workload = next(w for w in report["workloads"] if w["kind"] == "latency")
    results = report["results"].get(workload["key"], {})
    keys = [k for k in results if results[k]["p50_ms"] is not None]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.27
    for n, (field, name) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))):
        xs = [i + (n - 1) * width for i in range(len(keys))]
        ax.bar(xs, [results[k][field] for k in keys], width, label=name)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(
        [f"{report['systems'][k]['label']}\n{report['systems'][k]['durability']}" for k in keys],
        fontsize=6,
        rotation=20,
        ha="right",
    )
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(workload["title"], fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
