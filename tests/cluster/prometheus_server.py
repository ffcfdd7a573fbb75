"""A real Prometheus server (Debian's `prometheus`) for cluster tests: started on a free loopback
port with a generated scrape config naming the brokers' metrics endpoints, a short scrape
interval and its data in the test's directory; `query(expr)` asks its HTTP API
(`/api/v1/query`) and returns the instant vector's samples."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

from cluster_brokers import UNSETTLED, poll, require_tool
from cluster_processes import free_port

import waiting

SCRAPE_INTERVAL = "1s"
READY_TIMEOUT = 60


class PrometheusServer:
    def __init__(self, directory: Path, targets: dict[str, int]) -> None:
        """`targets`: instance name -> a metrics port on 127.0.0.1."""
        self.binary = require_tool("prometheus")
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config = directory / "prometheus.yml"
        self.config.write_text(scrape_config(targets))
        self.log_path = directory / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.config}",
                 f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        poll(self._ready, READY_TIMEOUT, f"prometheus ready on {self.url}")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()}")
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as response:
            return bool(response.status == 200)

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """The samples `expr` evaluates to now: (labels, value) each."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def value(self, expr: str) -> float | None:
        """The one value `expr` evaluates to (a sum, say); None while it has none."""
        samples = self.query(expr)
        assert len(samples) <= 1, samples
        return samples[0][1] if samples else None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def scrape_config(targets: dict[str, int]) -> str:
    """A scrape config for the brokers (JSON is YAML), each target labelled with its name."""
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [{
            "job_name": "weir-brokers",
            "scrape_timeout": SCRAPE_INTERVAL,
            "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"broker": name}}
                for name, port in targets.items()
            ],
        }],
    }  # fmt: skip
    return json.dumps(config, indent=2)


def wait_for(server: PrometheusServer, expr: str, wanted: float, timeout: float = 90) -> float:
    """Poll `expr` until it evaluates to `wanted`; how long that took, in seconds."""
    seen: list[float | None] = [None]

    def reached() -> bool:
        seen[0] = server.value(expr)
        return seen[0] == wanted

    _, took = waiting.timed_poll(reached, timeout, f"{expr} == {wanted}", interval=0.5,
                                 ignoring=UNSETTLED,
                                 detail=lambda: f"it evaluates to {seen[0]}")  # fmt: skip
    return took
