"""The agent given credentials the cluster refuses: `weir agent status` names the
authentication failure within seconds, the agent's log says it once (not once per retry), the
events stay queued, and once the operator creates the user on the broker (`weir user create`)
they are delivered, with no restart of the agent or the broker."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess

TIMEOUT = 60
USER, PASSWORD = "dave", "dave-secret"
EVENTS = [f"event {i}" for i in range(5)]
#: how soon `weir agent status` must name the refusal
REPORTED_WITHIN_S = 10


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("agent-credentials") / "broker", config={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "num.partitions": 1,
    })  # fmt: skip
    process.start()
    yield process
    process.stop()


def weir(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args], input=stdin,
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip


def test_refused_credentials_are_reported_and_the_events_delivered_once_fixed(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    plaintext = f"127.0.0.1:{broker.listeners['PLAINTEXT']}"
    create_topic(plaintext, "credentials", 1)
    producer = (f'"security.protocol" = "SASL_PLAINTEXT"\n"sasl.mechanism" = "SCRAM-SHA-512"\n'
                f'"sasl.username" = "{USER}"\n"sasl.password" = "{PASSWORD}"\n')  # fmt: skip
    agent = AgentProcess(tmp_path / "agent", f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}",
                         config=f"[producer]\n{producer}")  # fmt: skip
    agent.start()
    try:
        sent = weir("agent", "send", "credentials", "--socket", str(agent.socket),
                    stdin="".join(f"{e}\n" for e in EVENTS))  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        status = wait_for(agent, lambda s: s["last_error"] is not None, REPORTED_WITHIN_S)
        assert status["last_error"].startswith("_AUTHENTICATION: "), status
        assert "SASL authentication error" in status["last_error"]
        assert status["cluster_reachable"] is False
        time.sleep(3)  # librdkafka retries meanwhile: the log must still say it once
        made = weir("user", "create", USER, "--mechanism", "SCRAM-SHA-512", "--password",
                    PASSWORD, "--bootstrap-server", plaintext)  # fmt: skip
        assert made.returncode == 0, made.stderr
        records = read_topic(plaintext, "credentials", 1, len(EVENTS))
        assert [value.decode() for _, _, value in records] == EVENTS
        status = wait_for(agent, lambda s: s["last_error"] is None, TIMEOUT)
        assert status["cluster_reachable"] is True
    finally:
        agent.stop()
    log = (agent.directory / "agent.log").read_text()
    assert log.count("the cluster refuses the agent: _AUTHENTICATION") == 1, log
    assert log.count("the cluster accepts the agent again") == 1, log
    assert PASSWORD not in log


def wait_for(agent: AgentProcess, done: object, within_s: float) -> dict[str, object]:
    deadline = time.monotonic() + within_s
    while True:
        status = agent.status()
        if done(status) or time.monotonic() > deadline:  # type: ignore[operator]
            return status
        time.sleep(0.2)
