"""The console's HTTP server (the standard library's, a thread per request) and `run`, which puts
the reader, the history, the sampler and the pages together and serves until stopped.

Only GET (and HEAD) of the pages and of the two static files. A page that cannot be shown is an
error page with its status (404 unknown topic or group, 502 a cluster not answering) and the
server goes on serving; a defect in a page is logged with its traceback and shown as a 500 page
that names no more than the error. Every response forbids caching, and a Content-Security-Policy
keeps scripts and styles to the console's own two files.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qsl, urlsplit

from weir.ops.console.errors import ConsoleError
from weir.ops.console.history import DEFAULT_LIMIT, History
from weir.ops.console.html import page, tag
from weir.ops.console.reader import ClientSettings, ClusterReader
from weir.ops.console.routes import Console, Rendered, error_page
from weir.ops.console.sampler import DEFAULT_INTERVAL_S, Sampler

log = logging.getLogger(__name__)

STATIC = {"/static/console.css": "text/css", "/static/console.js": "text/javascript"}
SECURITY_POLICY = ("default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
                   "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Options:
    """How the console serves: where it listens, how often it samples the cluster, how many
    samples it keeps, and how often live pages reload (0: never)."""

    host: str = "127.0.0.1"
    port: int = 9021
    sample_interval_s: float = DEFAULT_INTERVAL_S
    history_limit: int = DEFAULT_LIMIT
    refresh_s: float = 10.0


def run(settings: ClientSettings, options: Options, ready: Callable[[str], None]) -> None:
    """Serve the console until interrupted; `ready` is told its URL once it accepts requests."""
    reader = ClusterReader(settings)
    history = History(options.history_limit)
    sampler = Sampler(reader, history, interval_s=options.sample_interval_s)
    server = make_server(Console(reader, history), settings.bootstrap, options)
    sampler.start()
    try:
        ready(f"http://{options.host}:{server.server_port}")
        server.serve_forever()
    finally:
        server.server_close()
        sampler.stop()


def make_server(console: Console, cluster: str, options: Options) -> ThreadingHTTPServer:
    handler = type("ConsoleHandler", (_Handler,), {
        "console": console, "cluster": cluster, "refresh_s": options.refresh_s,
    })  # fmt: skip
    server = ThreadingHTTPServer((options.host, options.port), handler)
    server.daemon_threads = True
    return server


class _Handler(BaseHTTPRequestHandler):
    console: Console
    cluster: str
    refresh_s: float
    server_version = "weir-console"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path in STATIC:
            self._send(HTTPStatus.OK, STATIC[url.path], _static(url.path))
            return
        rendered = self._rendered(url.path, dict(parse_qsl(url.query)))
        refresh = self.refresh_s if rendered.live else 0
        document = page(rendered.title, rendered.body, active=rendered.active,
                        cluster=self.cluster, refresh_s=refresh)  # fmt: skip
        self._send(rendered.status, "text/html; charset=utf-8", document.encode())

    def do_HEAD(self) -> None:
        self.do_GET()

    def _rendered(self, path: str, query: dict[str, str]) -> Rendered:
        try:
            return self.console.render(path, query)
        except ConsoleError as exc:
            return error_page(exc)
        except Exception as exc:
            log.exception("page %s failed", self.path)
            return Rendered("Console error", "", tag("p", f"the page failed: {exc!r}",
                                                     class_="error", role="alert", id="error"),
                            HTTPStatus.INTERNAL_SERVER_ERROR, live=False)  # fmt: skip

    def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", SECURITY_POLICY)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            # the browser may have gone (a reload): nothing to answer then
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _static(path: str) -> bytes:
    name = path.rsplit("/", 1)[1]
    return resources.files("weir.ops.console").joinpath("static", name).read_bytes()
