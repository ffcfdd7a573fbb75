"""Applications' ways in: `AgentHandler` for Python logging (socket and in process), and the line
protocol from a shell one-liner with socat, as the README shows it."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess, require_tool

from weir.agent.agent import Agent
from weir.agent.config import AgentConfig
from weir.agent.logging import AgentHandler
from weir.agent.partitioner import partition_for_key


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger


def test_handler_ships_records_through_the_socket_in_order(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "app-logs", 3)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap)
    agent.start()
    handler = AgentHandler("app-logs", socket=agent.socket, key=lambda r: r.name.encode())
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = _logger("checkout", handler)
    try:
        for i in range(200):
            logger.info("order %d paid", i)
    finally:
        handler.close()
        agent.stop()
    agent.start()
    try:
        records = read_topic(broker.bootstrap, "app-logs", 3, 200)
    finally:
        agent.stop()
    assert [v for _, _, v in records] == [b"INFO order %d paid" % i for i in range(200)]
    assert {(p, k) for p, k, _ in records} == {(partition_for_key(b"checkout", 3), b"checkout")}


def test_handler_in_process_and_trouble_goes_to_handle_error(
    broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create_topic(broker.bootstrap, "inproc-logs", 1)
    agent = Agent(AgentConfig(bootstrap_server=broker.bootstrap, spool=tmp_path / "spool",
                              max_event_bytes=100))  # fmt: skip
    logger = _logger("inproc", AgentHandler("inproc-logs", agent=agent))
    logger.warning("fits")
    logger.warning("x" * 500)  # refused: larger than max_event_bytes
    nowhere = _logger("nowhere", AgentHandler("t", socket=tmp_path / "no-agent.sock"))
    nowhere.warning("no agent listens")
    assert agent.wait_drained(60)
    agent.close()
    errors = capsys.readouterr().err
    assert "exceeds the limit of 100" in errors and "no agent is listening" in errors
    assert [v for _, _, v in read_topic(broker.bootstrap, "inproc-logs", 1, 1)] == [b"fits"]


def test_line_protocol_from_a_shell_one_liner(broker: BrokerProcess, tmp_path: Path) -> None:
    socat = require_tool("socat")
    create_topic(broker.bootstrap, "shell", 1)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap)
    agent.start()
    try:
        lines = "printf 'shell\\tfirst\\nshell\\tuser-7\\tsecond\\n'"
        answer = subprocess.run(
            f"{lines} | {socat} - UNIX-CONNECT:{agent.socket}",
            shell=True, capture_output=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert answer == b"OK\nOK\n"
        records = read_topic(broker.bootstrap, "shell", 1, 2)
    finally:
        agent.stop()
    assert records == [(0, None, b"first"), (0, b"user-7", b"second")]
