"""The agent refuses to start when a tailed input's key names no registered log format: from the
config file and through `weir agent start`, with a user's own format accepted once listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.agent.config import load_config
from weir.agent.input_formats import UnknownFormatKey, check_input_keys
from weir.agent.tail import TailInput
from weir.cli.main import main

ORDERS_FORMAT = """\
name = "orders"
pattern = '%{TIMESTAMP_ISO8601:timestamp} \\[%{WORD:level}\\] %{GREEDYDATA:message}'

[timestamp]
format = "ISO8601"

[[samples]]
line = '2024-07-01 09:30:00 [info] paid'
level = "INFO"
message = "paid"
"""


def config_file(tmp_path: Path, key: str, formats: str = "") -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        f'spool = "{tmp_path / "spool"}"\nsocket = "{tmp_path / "agent.sock"}"\n{formats}\n'
        f'[[inputs]]\npaths = ["{tmp_path}/*.log"]\ntopic = "orders-logs"\nkey = "{key}"\n'
    )
    return path


def test_shipped_formats_and_their_aliases_pass_in_any_case() -> None:
    check_input_keys([TailInput(paths=("a",), topic="t", key=b"Apache")])
    check_input_keys([TailInput(paths=("a",), topic="t", key=b"ssh")])
    check_input_keys([TailInput(paths=("a",), topic="t")])  # no key: detected per line


def test_an_unknown_key_names_itself_and_the_known_formats() -> None:
    with pytest.raises(UnknownFormatKey) as refused:
        check_input_keys([TailInput(paths=("a",), topic="orders-logs", key=b"orders")])
    message = str(refused.value)
    assert "'orders'" in message and "'orders-logs'" in message
    assert "apache" in message and "zookeeper" in message and "formats" in message


def test_a_users_format_from_the_config_files_formats_setting(tmp_path: Path) -> None:
    (tmp_path / "formats").mkdir()
    (tmp_path / "formats" / "orders.toml").write_text(ORDERS_FORMAT)
    config = load_config(config_file(tmp_path, "orders", f'formats = ["{tmp_path / "formats"}"]'))
    assert config.formats == (tmp_path / "formats",)
    check_input_keys(config.inputs, config.formats)
    with pytest.raises(UnknownFormatKey, match="'invoices'"):
        check_input_keys(load_config(config_file(tmp_path, "invoices")).inputs, config.formats)


def test_a_broken_format_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "orders.toml"
    broken.write_text(ORDERS_FORMAT.replace("GREEDYDATA", "NO_SUCH_PATTERN"))
    with pytest.raises(UnknownFormatKey, match=r"orders\.toml"):
        check_input_keys([TailInput(paths=("a",), topic="t", key=b"orders")], [broken])


def test_agent_start_refuses_an_unknown_key_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_file(tmp_path, "orders")
    assert main(["agent", "start", "--config", str(config)]) == 2
    error = capsys.readouterr().err
    assert "key 'orders' names no registered log format" in error and "apache" in error
    assert not (tmp_path / "agent.sock").exists()


def test_agent_start_checks_the_format_files_of_its_formats_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "orders.toml"
    broken.write_text(ORDERS_FORMAT.replace("GREEDYDATA", "NO_SUCH_PATTERN"))
    config = config_file(tmp_path, "orders")
    assert main(["agent", "start", "--config", str(config), "--formats", str(broken)]) == 2
    error = capsys.readouterr().err
    assert "orders.toml" in error and "NO_SUCH_PATTERN" in error
