"""`/metrics` on `metrics.host`:`metrics.port`, served by prometheus-client's HTTP server in
its own thread: a scrape costs the event loop one snapshot (`snapshot.take_snapshot`); the
text is formatted and sent off the loop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from weir.broker.metrics.families import BrokerCollector
from weir.broker.metrics.snapshot import Snapshot, on_loop

log = logging.getLogger(__name__)


class MetricsEndpoint:
    """The running HTTP server; `port` as bound, `close()` stops it (blocking, briefly)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(
    loop: asyncio.AbstractEventLoop, take: Callable[[], Snapshot], host: str, port: int
) -> MetricsEndpoint:
    """Start serving; each scrape runs `take` on `loop`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(on_loop(loop, take)))
    server, thread = start_http_server(port, host, registry=registry)
    endpoint = MetricsEndpoint(server, thread)
    log.info("serving Prometheus metrics on http://%s:%d/metrics", host, endpoint.port)
    return endpoint
