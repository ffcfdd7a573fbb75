"""Starting and stopping the brokers under test, each as a child process of this one.

Every server runs on 127.0.0.1 in its own temporary data directory, in a new session (process
group) so that stopping it also stops whatever it forked (RabbitMQ's Erlang VM and epmd).
`Children` remembers each process it starts and ends them all on exit, including after an
exception or Ctrl-C. Nothing is started through systemd or init scripts. The peers come from
Debian's packages; `ensure_installed` installs missing ones with apt-get when running as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGES = {
    "rabbitmq-server": "/usr/lib/rabbitmq/bin/rabbitmq-server",
    "nats-server": "/usr/sbin/nats-server",
    "redis-server": "/usr/bin/redis-server",
}
STOP_GRACE_S = 20.0
START_TIMEOUT_S = 90.0


class SetupError(RuntimeError):
    """A server could not be installed or started."""


def ensure_installed(packages: list[str]) -> None:
    """Install the Debian packages whose server binary is missing (apt-get, root only).

    Debian's maintainer scripts would normally start each service; on hosts where they do, the
    service is stopped again at once so that only the benchmark's own processes run."""
    missing = [p for p in packages if not Path(PACKAGES[p]).exists()]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SetupError(f"missing {' '.join(missing)}: run as root or apt-get install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing {' '.join(missing)} with apt-get", flush=True)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    for package in missing:
        subprocess.run(
            ["service", package, "stop"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if process.poll() is not None:
            raise SetupError(f"{what} exited with {process.returncode} while starting")
        if time.monotonic() > deadline:
            raise SetupError(f"{what} did not become ready in {START_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@dataclass
class Children:
    """The processes this benchmark started; `stop_all` ends each by its process group."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(
        self,
        command: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the group, SIGKILL to whatever is left after the grace period."""
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE_S)
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
        if process in self.processes:
            self.processes.remove(process)

    def stop_all(self) -> None:
        for process in reversed(list(self.processes)):
            self.stop(process)

    def __enter__(self) -> Children:
        signal.signal(signal.SIGTERM, _raise_interrupt)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_all()


def _raise_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass(frozen=True, slots=True, kw_only=True)
class Server:
    """A running server: where to connect and the settings it was started with."""

    name: str
    port: int
    settings: dict[str, Any]
    processes: tuple[subprocess.Popen[bytes], ...]


def start_weir(children: Children, scratch: Path) -> Server:
    """`weir broker start`, single node, default broker settings (no fsync unless a topic asks)."""
    ready = scratch / "weir-ready"
    command = [
        sys.executable,
        "-m",
        "weir.cli.main",
        "broker",
        "start",
        "--data-dir",
        str(scratch / "weir-data"),
        "--listen",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
    ]
    process = children.start(command, scratch / "weir.log")
    wait_until(lambda: ready.exists() and bool(ready.read_text().strip()), process, "weir")
    port = int(ready.read_text().strip().rsplit(":", 1)[1])
    settings = {
        "command": "weir broker start --listen 127.0.0.1:0 --data-dir TMP",
        "partitions": 1,
        "replication": 1,
    }
    return Server(name="weir", port=port, settings=settings, processes=(process,))


RABBITMQ_CONF = """\
loopback_users = none
listeners.tcp.default = 127.0.0.1:{port}
disk_free_limit.absolute = 50MB
"""


def start_rabbitmq(children: Children, scratch: Path) -> Server:
    """RabbitMQ's own start script with every path under `scratch`, a private epmd on a free
    port, and no plugins; run as the current user with HOME in `scratch` (Erlang cookie)."""
    base = scratch / "rabbitmq"
    base.mkdir()
    port, dist_port, epmd_port = free_port(), free_port(), free_port()
    (base / "rabbitmq.conf").write_text(RABBITMQ_CONF.format(port=port))
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq-env.conf").write_text("")
    env = {
        **os.environ,
        "HOME": str(base),
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_NODENAME": f"bench{os.getpid()}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
    }
    epmd = children.start(
        [shutil.which("epmd") or "epmd", "-address", "127.0.0.1", "-port", str(epmd_port)],
        base / "epmd.log",
        env=env,
    )
    wait_until(lambda: port_open(epmd_port), epmd, "epmd")
    server = children.start([PACKAGES["rabbitmq-server"]], base / "server.log", env=env, cwd=base)
    wait_until(lambda: _amqp_ready(port), server, "rabbitmq-server")
    settings = {
        "version": "Debian rabbitmq-server",
        "config": RABBITMQ_CONF.strip(),
        "plugins": "none",
        "node": "single, no mirroring/quorum",
    }
    return Server(name="rabbitmq", port=port, settings=settings, processes=(server, epmd))


def _amqp_ready(port: int) -> bool:
    if not port_open(port):
        return False
    import pika

    try:
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).close()
    except pika.exceptions.AMQPError:
        return False
    return True


def start_nats(children: Children, scratch: Path) -> Server:
    """nats-server with JetStream, file storage under `scratch`."""
    port = free_port()
    store = scratch / "nats"
    command = [
        PACKAGES["nats-server"],
        "-a",
        "127.0.0.1",
        "-p",
        str(port),
        "-js",
        "-sd",
        str(store),
    ]
    process = children.start(command, scratch / "nats.log")
    wait_until(lambda: port_open(port), process, "nats-server")
    settings = {
        "command": " ".join([*command[:5], "-js", "-sd", "TMP"]),
        "jetstream": "file storage, defaults",
    }
    return Server(name="nats", port=port, settings=settings, processes=(process,))


def start_redis(children: Children, scratch: Path, appendfsync: str) -> Server:
    """redis-server with the append-only file on and RDB snapshots and AOF rewrites off, so the
    only disk work is the AOF append (and its fsync policy)."""
    port = free_port()
    directory = scratch / f"redis-{appendfsync}"
    directory.mkdir()
    options = [
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(directory),
        "--appendonly",
        "yes",
        "--appendfsync",
        appendfsync,
        "--save",
        "",
        "--auto-aof-rewrite-percentage",
        "0",
        "--daemonize",
        "no",
    ]
    process = children.start([PACKAGES["redis-server"], *options], directory / "redis.log")
    wait_until(lambda: port_open(port), process, "redis-server")
    shown = " ".join(o if o != str(directory) else "TMP" for o in options)
    return Server(name="redis", port=port, settings={"options": shown}, processes=(process,))
