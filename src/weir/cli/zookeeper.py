"""`weir zookeeper start`: a standalone Apache ZooKeeper for development and tests.

Runs Debian's `zookeeper` package (its jars under /usr/share/java) in the foreground with a
configuration generated into the data directory, and prints one line
`weir zookeeper ready on HOST:PORT` once the server answers `ruok` with `imok`.

`ZooKeeperServer` is the reusable part (`weir cluster up` and tests start ZooKeeper through it);
its child is a `weir.cli.supervise.LoggedProcess`. This module never talks
ZooKeeper's protocol beyond the `ruok` four-letter word: metadata lives in `weir.cluster`.
"""

from __future__ import annotations

import argparse
import errno
import shlex
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from weir.cli.supervise import Interrupted, LoggedProcess, StartError, StopRequest

# Debian's zkEnv.sh is a symlink to this file; zkServer.sh sources it for CLASSPATH and ZOOCFGDIR.
DEBIAN_ENVIRONMENT = Path("/etc/zookeeper/conf/environment")
# zookeeper.jar names its dependencies in its manifest but no SLF4J binding, so Debian's own
# classpath logs nothing. These two (dependencies of libzookeeper-java) route SLF4J to log4j 1.2.
LOGGING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
MISSING_PACKAGE = "ZooKeeper is not installed: install Debian's `zookeeper` package"
MISSING_JAVA = "java is not on PATH: install a Java runtime (Debian: openjdk-17-jre-headless)"
LOG_FILE = "zookeeper.log"
STOP_TIMEOUT = 10.0
POLL_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class JvmOption:
    flag: str
    why: str


JVM_OPTIONS = (
    JvmOption("-Xmx256m", "a development server holds little; the JVM's default heap (a quarter "
                          "of RAM) would compete with the brokers beside it"),
    JvmOption("-XX:+UseSerialGC", "one collector thread: test machines have two cores"),
    JvmOption("-XX:+ExitOnOutOfMemoryError", "die visibly (the supervisor reports it) rather "
                                             "than limp on"),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Installation:
    java: str
    classpath: tuple[str, ...]


def debian_classpath(environment: str) -> list[str]:
    """The jars of Debian's CLASSPATH (from its zkEnv.sh environment file), without the
    configuration directory: weir writes its own configuration and log4j settings."""
    settings: dict[str, str] = {}
    for line in environment.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 1 and "=" in words[0]:
            key, value = words[0].split("=", 1)
            settings[key] = value
    config_dir = settings.get("ZOOCFGDIR", "").rstrip("/")
    entries = settings.get("CLASSPATH", "").split(":")
    return [entry for entry in entries if entry and entry.rstrip("/") != config_dir]


def find_installation(environment: Path | None = None) -> Installation:
    """Java and the classpath of Debian's ZooKeeper (its environment file by default);
    StartError says what to install."""
    environment = environment or DEBIAN_ENVIRONMENT
    if not environment.is_file():
        raise StartError(f"{MISSING_PACKAGE} ({environment} is missing)")
    classpath = debian_classpath(environment.read_text())
    missing = [entry for entry in classpath if not Path(entry).exists()]
    if not classpath:
        raise StartError(f"{MISSING_PACKAGE} (no CLASSPATH in {environment})")
    if missing:
        raise StartError(f"{MISSING_PACKAGE} (missing: {', '.join(missing)})")
    java = shutil.which("java")
    if java is None:
        raise StartError(MISSING_JAVA)
    logging_jars = [str(jar) for jar in LOGGING_JARS if jar.exists()]
    return Installation(java, (*classpath, *logging_jars))


def zoo_cfg(data_dir: Path, host: str, port: int, *, tick_time_ms: int = 2000) -> str:
    """A standalone server's zoo.cfg. minSessionTimeout is below ZooKeeper's default (two ticks)
    so tests can expire sessions quickly; maxClientCnxns=0 lifts the per-address connection cap
    (every broker and test connects from 127.0.0.1)."""
    settings = {
        "dataDir": str(data_dir.resolve()),
        "clientPort": port,
        "clientPortAddress": host,
        "tickTime": tick_time_ms,
        "initLimit": 10,
        "syncLimit": 5,
        "maxClientCnxns": 0,
        "minSessionTimeout": 1000,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr,stat",
        "autopurge.snapRetainCount": 3,
        "autopurge.purgeInterval": 1,
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    return "# written by `weir zookeeper start` at every start\n" + "\n".join(lines) + "\n"


def log4j_properties(log_file: Path) -> str:
    """log4j 1.2 settings: ZooKeeper's INFO log, appended to `log_file`."""
    return (
        "log4j.rootLogger=INFO, FILE\n"
        "log4j.appender.FILE=org.apache.log4j.FileAppender\n"
        f"log4j.appender.FILE.File={log_file.resolve()}\n"
        "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n"
    )


def ruok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a ZooKeeper server at host:port answers the `ruok` four-letter word."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            answer = b""
            while len(answer) < 4 and (chunk := sock.recv(16)):
                answer += chunk
            return answer == b"imok"
    except OSError:
        return False


def ensure_port_free(host: str, port: int) -> None:
    """StartError unless host:port can be listened on (SO_REUSEADDR, as servers bind)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StartError(f"port {port} on {host} is already in use") from None
            raise StartError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


class ZooKeeperServer:
    """A standalone ZooKeeper (Debian's jars) in `data_dir`: zoo.cfg, log4j.properties, the
    snapshots and transaction logs (version-2/) and zookeeper.log all live there. `start()`
    keeps the data, so a stop and a start is a restart. Usable as a context manager (start,
    wait until ready, stop)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 2181,
        tick_time_ms: int = 2000,
        installation: Installation | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.installation = installation
        self.child = LoggedProcess("ZooKeeper", data_dir / LOG_FILE)

    @property
    def connect(self) -> str:
        """The connect string clients and brokers use: HOST:PORT."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    @property
    def pid(self) -> int:
        return self.child.pid

    def start(self) -> None:
        """Write the configuration and start the server; `wait_ready()` waits for it."""
        installation = self.installation or find_installation()
        ensure_port_free(self.host, self.port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(zoo_cfg(self.data_dir, self.host, self.port,
                                  tick_time_ms=self.tick_time_ms))  # fmt: skip
        log4j = self.data_dir / "log4j.properties"
        log4j.write_text(log4j_properties(self.log_path))
        flags = [option.flag for option in JVM_OPTIONS]
        logging = f"-Dlog4j.configuration={log4j.resolve().as_uri()}"
        classpath = ":".join(installation.classpath)
        self.child.spawn([installation.java, *flags, logging, "-cp", classpath, MAIN_CLASS,
                          str(config)])  # fmt: skip

    def wait_ready(self, timeout: float = 30.0, stop: StopRequest | None = None) -> None:
        """Return once the server answers `ruok`; StartError if it exits or is not ready in
        `timeout` seconds (with the end of its log), Interrupted if `stop` is requested."""
        deadline = time.monotonic() + timeout
        while not ruok(self.host, self.port):
            self._check_running()
            if time.monotonic() > deadline:
                raise StartError(f"ZooKeeper did not answer on {self.connect} within "
                                 f"{timeout:g}s; {self.child.describe_log()}")  # fmt: skip
            if stop is not None:
                stop.sleep(POLL_SECONDS)
            else:
                time.sleep(POLL_SECONDS)
        self._check_running()

    def _check_running(self) -> None:
        if self.child.poll() is None:
            return
        if "Address already in use" in self.child.log_since_start():
            raise StartError(f"port {self.port} on {self.host} is already in use")
        raise self.child.exit_error()

    def poll(self) -> int | None:
        return self.child.poll()

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """SIGTERM, then SIGKILL after `timeout` seconds; whether it had to be killed."""
        return self.child.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, for fault tests."""
        self.child.kill()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def register(commands: Any) -> None:
    parser = commands.add_parser("zookeeper", help="run a development ZooKeeper")
    sub = parser.add_subparsers(dest="zookeeper_command", required=True, metavar="ACTION")
    start = sub.add_parser("start", help="start a standalone ZooKeeper in the foreground")
    start.add_argument("--data-dir", type=Path, default=Path("weir-zookeeper"),
                       help="config, data and log (default ./weir-zookeeper)")  # fmt: skip
    start.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    start.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    start.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                       help="how long to wait for the server to be ready (default 30)")  # fmt: skip
    start.set_defaults(run=run_start)


def run_start(args: argparse.Namespace) -> int:
    server = ZooKeeperServer(args.data_dir, host=args.host, port=args.port)
    with StopRequest() as stop:
        try:
            server.start()
            server.wait_ready(args.timeout, stop)
            print(f"weir zookeeper ready on {server.connect}", flush=True)
            while server.poll() is None:
                stop.sleep(POLL_SECONDS)
            raise server.child.exit_error()
        except Interrupted:
            return 0
        except StartError as exc:
            print(f"weir: {exc}", file=sys.stderr)
            return 1
        finally:
            if server.stop():
                print(f"weir: ZooKeeper did not stop within {STOP_TIMEOUT:g}s of SIGTERM; "
                      "killed it", file=sys.stderr)  # fmt: skip
