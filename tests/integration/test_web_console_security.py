"""`weir console` over a SASL_SSL listener with SCRAM-SHA-512, its settings given as every weir
command takes them (`-X`, `--command-config`): the cluster page shows the broker's log
directories (DescribeLogDirs over the console's own TLS and SASL connection), the topic page the
topic's size, and the message browser reads what was produced over PLAINTEXT. With a wrong
password every page is a 502 naming the refusal, and the console keeps serving."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Producer
from security_setup import Certificates, sasl_ssl_settings, secure_fixtures

from console_browser import ConsoleProcess

TOPIC = "guarded"
TIMEOUT = 60
WRONG = "n0t-the-passw0rd"

certs, broker = secure_fixtures("console-secure")


def settings_flags(certs: Certificates, password: str | None = None) -> list[str]:
    settings = sasl_ssl_settings(certs) if password is None else sasl_ssl_settings(certs, password)
    return [part for key, value in settings.items() for part in ("-X", f"{key}={value}")]


@pytest.fixture(scope="module")
def produced(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.listeners['PLAINTEXT']}",
                         "log_level": 0})  # fmt: skip
    for i in range(3):
        producer.produce(TOPIC, b"secret-%d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0


def console(broker: BrokerProcess, flags: list[str], log: Path) -> ConsoleProcess:
    return ConsoleProcess(f"127.0.0.1:{broker.listeners['SASL_SSL']}", *flags, log=log)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_console_reads_the_cluster_over_sasl_ssl(
    broker: BrokerProcess, certs: Certificates, produced: None, tmp_path: Path
) -> None:
    process = console(broker, settings_flags(certs), tmp_path / "console.log")
    try:
        status, cluster = get(process.url + "/")
        assert status == 200, cluster
        assert f"{broker.data_dir}: " in cluster and "not reachable" not in cluster
        status, topic = get(process.url + f"/topics/{TOPIC}")
        assert status == 200 and "<td>browse</td>" not in topic
        assert '<td class="num">3</td>' in topic  # log end offset
        status, found = get(process.url + f"/messages?topic={TOPIC}&partition=0&offset=1")
        assert status == 200 and "secret-1" in found and "secret-2" in found
        assert "secret-0" not in found
    finally:
        process.stop()
    assert "Traceback" not in process.logs(), process.logs()


def test_a_wrong_password_is_a_502_page_naming_the_refusal(
    broker: BrokerProcess, certs: Certificates, tmp_path: Path
) -> None:
    process = console(broker, settings_flags(certs, WRONG), tmp_path / "console.log")
    try:
        for path in ("/", "/topics"):
            status, text = get(process.url + path)
            assert status == 502 and "refused the console" in text, text
            assert "AUTHENTICATION" in text and WRONG not in text, text
        assert process.process.poll() is None
    finally:
        process.stop()
    assert "Traceback" not in process.logs(), process.logs()
