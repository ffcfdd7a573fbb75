"""What the fault benches (faults.py, txn_faults.py, reassign_faults.py) share around their
runs: the process set-up (logging, kill -USR1 for stacks, SIGTERM that still cleans up, the
network-namespace check), the machine's description, the scratch directory kept when the
checker found an anomaly, and the JSON report written to bench/results/<name>-<time>.json.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
import faultkit as fk


def prepare(bench: str) -> str | None:
    """Set the process up for a fault run; why it cannot run here (no root, no namespaces), if
    so, as the line to print."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where is it stuck?
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that clean-up runs
    reason = fk.netns_unavailable()
    return None if reason is None else f"{bench}: {reason}"


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def results_path(out: Path | None, name: str) -> Path:
    """`out`, or bench/results/<name>-<time>.json."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return out or Path(__file__).parent / "results" / f"{name}-{stamp}.json"


def run_in_scratch(
    report: dict[str, Any], prefix: str, keep: bool, run: Callable[[Path], bool]
) -> bool:
    """`run` in a new scratch directory; whether it found the cluster safe. The run's seconds go
    to `report`; the directory is removed unless the run was unsafe or failed, or `keep`."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    started = time.monotonic()
    safe = False
    try:
        safe = run(scratch)
    finally:
        report["seconds"] = round(time.monotonic() - started, 1)
        if safe and not keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            report["kept_files"] = str(scratch)
            print(f"cluster files kept in {scratch}", file=sys.stderr)
    return safe


def write_report(
    report: dict[str, Any], out: Path, print_report: Callable[[dict[str, Any]], None]
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)
    print(f"written to {out}")
