"""The console's HTTP server on loopback with a reader that fails as a cluster can: an error
page with the failure's status and words and no traceback, the server still serving after it;
the static files; the security headers every response carries."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from weir.ops.console.errors import ClusterError
from weir.ops.console.history import History
from weir.ops.console.routes import Console
from weir.ops.console.server import Options, make_server


class FailingReader:
    """A reader whose cluster is down and whose cluster page has a defect."""

    settings = None

    def cluster(self) -> Any:
        raise RuntimeError("a defect in the page")

    def topics(self) -> Any:
        raise ClusterError("cannot reach the cluster at b:9092: connection refused")


@pytest.fixture
def url() -> Iterator[str]:
    console = Console(FailingReader(), History())  # type: ignore[arg-type]
    server = make_server(console, "b:9092", Options(port=0, refresh_s=5))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def fetch(url: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_a_cluster_failure_is_a_502_page_that_reloads(url: str):
    status, headers, body = fetch(url + "/topics")
    assert status == 502 and "cannot reach the cluster at b:9092" in body
    assert "<title>Cluster not answering" in body and 'data-refresh="5"' in body
    assert headers["Cache-Control"] == "no-store"
    assert "script-src 'self'" in headers["Content-Security-Policy"]


def test_a_defect_is_a_500_page_without_a_traceback(url: str, caplog: pytest.LogCaptureFixture):
    status, _, body = fetch(url + "/")
    assert status == 500 and "the page failed" in body and "a defect in the page" in body
    assert "Traceback" not in body and 'File "' not in body
    assert "page / failed" in caplog.text  # the traceback goes to the console's log
    assert fetch(url + "/topics")[0] == 502  # and it still serves


def test_unknown_pages_are_404(url: str):
    status, _, body = fetch(url + "/brokers/1")
    assert status == 404 and "no page at /brokers/1" in body


def test_the_static_files_and_head(url: str):
    status, headers, css = fetch(url + "/static/console.css")
    assert status == 200 and headers["Content-Type"] == "text/css" and "svg.chart" in css
    status, headers, js = fetch(url + "/static/console.js")
    assert status == 200 and "refresh-toggle" in js
    status, headers, body = fetch(url + "/static/console.css", method="HEAD")
    assert status == 200 and body == "" and int(headers["Content-Length"]) == len(css)
    assert fetch(url + "/static/other.js")[0] == 404
