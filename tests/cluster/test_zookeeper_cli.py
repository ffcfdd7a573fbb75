"""`weir zookeeper start` as a user runs it: one ready line, a server kazoo can use, a clean exit
on Ctrl-C or SIGTERM with the java child gone, and plain errors for a taken port, a missing
package or java, and a server that dies. Also the classpath and the configuration it generates,
and the `zookeeper` fixture the other cluster tests start ZooKeeper with."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from cluster_processes import free_port, processes_mentioning, wait_until_gone
from kazoo.client import KazooClient

from weir.cli import zookeeper as zk
from weir.cli.main import main
from weir.cli.zookeeper import StartError, ZooKeeperServer, debian_classpath, find_installation

READY_TIMEOUT = 30
DEBIAN_ENVIRONMENT_TEXT = """\
ZOOMAIN=org.apache.zookeeper.server.quorum.QuorumPeerMain
ZOOCFGDIR=/etc/zookeeper/conf
ZOO_LOG_DIR=/var/log/zookeeper
JAVA_OPTS=""

# If ZooKeeper is started through systemd, this will only be used for command
JAVA=/usr/bin/java

CLASSPATH="/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
"""


def kazoo_round_trip(connect: str, path: str, value: bytes) -> bytes:
    client = KazooClient(hosts=connect, timeout=5)
    client.start(timeout=15)
    try:
        client.create(path, value, makepath=True)
        data, _stat = client.get(path)
        return bytes(data)
    finally:
        client.stop()
        client.close()


def kazoo_get(connect: str, path: str) -> bytes:
    client = KazooClient(hosts=connect, timeout=5)
    client.start(timeout=15)
    try:
        data, _stat = client.get(path)
        return bytes(data)
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_start_serves_clients_and_stops_cleanly(tmp_path, zookeeper_installation, weir_command,
                                                stop_signal):  # fmt: skip
    port = free_port()
    data_dir = tmp_path / "zk"
    command = weir_command("zookeeper", "start", "--data-dir", str(data_dir), "--port", str(port))
    ready = command.wait_for_line("weir zookeeper ready on ", READY_TIMEOUT)
    assert ready == f"weir zookeeper ready on 127.0.0.1:{port}"
    assert kazoo_round_trip(f"127.0.0.1:{port}", "/weir/test", b"hello") == b"hello"
    assert processes_mentioning(f"{data_dir}/zoo.cfg"), "no java child serving the data dir"

    command.process.send_signal(stop_signal)
    assert command.wait(timeout=30) == 0
    assert command.stdout().splitlines() == [ready]
    assert command.stderr() == ""
    assert wait_until_gone(f"{data_dir}/zoo.cfg") == []
    assert (data_dir / "zookeeper.log").read_text().count("binding to port") >= 1


def test_port_in_use_is_a_clear_error(tmp_path, zookeeper_installation, weir_command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = weir_command("zookeeper", "start", "--data-dir", str(tmp_path / "zk"),
                               "--port", str(port))  # fmt: skip
        assert command.wait(timeout=30) == 1
    assert command.stdout() == ""
    assert command.stderr() == f"weir: port {port} on 127.0.0.1 is already in use\n"


def test_a_server_that_dies_is_reported_with_its_log(tmp_path, zookeeper_installation,
                                                     weir_command):  # fmt: skip
    data_dir = tmp_path / "zk"
    command = weir_command("zookeeper", "start", "--data-dir", str(data_dir),
                           "--port", str(free_port()))  # fmt: skip
    command.wait_for_line("weir zookeeper ready on ", READY_TIMEOUT)
    [java] = processes_mentioning(f"{data_dir}/zoo.cfg")
    os.kill(java, signal.SIGKILL)
    assert command.wait(timeout=30) == 1
    error = command.stderr()
    assert error.startswith(f"weir: ZooKeeper was killed by SIGKILL; the end of {data_dir}/")
    log_tail = (data_dir / "zookeeper.log").read_text().splitlines()[-20:]
    assert error.splitlines()[1:] == log_tail


def test_missing_package_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(zk, "DEBIAN_ENVIRONMENT", tmp_path / "no-such-environment")
    assert main(["zookeeper", "start", "--data-dir", str(tmp_path / "zk")]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("weir: ZooKeeper is not installed: install Debian's `zookeeper` package")
    assert not (tmp_path / "zk").exists()


def test_missing_jar_says_what_to_install(tmp_path):
    environment = tmp_path / "environment"
    environment.write_text(f'CLASSPATH="{tmp_path}/zookeeper.jar"\n')
    with pytest.raises(StartError, match="install Debian's `zookeeper` package") as caught:
        find_installation(environment)
    assert f"{tmp_path}/zookeeper.jar" in str(caught.value)


def test_missing_java_says_so(tmp_path, monkeypatch):
    jar = tmp_path / "zookeeper.jar"
    jar.write_bytes(b"")
    environment = tmp_path / "environment"
    environment.write_text(f'CLASSPATH="{jar}"\n')
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(StartError, match=r"^java is not on PATH"):
        find_installation(environment)


def test_classpath_is_debians_without_its_config_dir():
    assert debian_classpath(DEBIAN_ENVIRONMENT_TEXT) == ["/usr/share/java/zookeeper.jar"]


def test_installed_classpath_logs_through_log4j(zookeeper_installation):
    classpath = zookeeper_installation.classpath
    assert classpath[0] == "/usr/share/java/zookeeper.jar"
    assert "/etc/zookeeper/conf" not in classpath
    assert {"/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"} <= set(classpath)
    assert all(Path(entry).exists() for entry in classpath)


def test_generated_config(tmp_path):
    lines = zk.zoo_cfg(tmp_path / "data", "127.0.0.1", 2999).splitlines()
    settings = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
    assert settings == {
        "dataDir": str((tmp_path / "data").resolve()),
        "clientPort": "2999",
        "clientPortAddress": "127.0.0.1",
        "tickTime": "2000",
        "initLimit": "10",
        "syncLimit": "5",
        "maxClientCnxns": "0",
        "minSessionTimeout": "1000",
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr,stat",
        "autopurge.snapRetainCount": "3",
        "autopurge.purgeInterval": "1",
    }
    log4j = zk.log4j_properties(tmp_path / "zookeeper.log")
    assert f"log4j.appender.FILE.File={tmp_path.resolve()}/zookeeper.log\n" in log4j


def test_fixture_server_keeps_its_data_through_a_crash(zookeeper: ZooKeeperServer):
    assert kazoo_round_trip(zookeeper.connect, "/brokers/ids", b"kept") == b"kept"
    zookeeper.kill()
    assert not zk.ruok("127.0.0.1", zookeeper.port)
    zookeeper.start()
    zookeeper.wait_ready()
    assert kazoo_get(zookeeper.connect, "/brokers/ids") == b"kept"
    assert (zookeeper.data_dir / "zoo.cfg").exists()
