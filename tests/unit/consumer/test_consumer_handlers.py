"""Finding a handler by MODULE:FUNCTION: a dotted module from the current directory or a file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from consumer_unit_records import record

from weir.consumer.handlers import HandlerNotFoundError, load_handler

HERE = Path(__file__).parent
MODULE_FILE = HERE / "consumer_unit_handlers.py"


def test_a_file_path_and_a_function() -> None:
    handler = load_handler(f"{MODULE_FILE}:upper")
    assert handler(record(0, 1)) == b"VALUE-1"


def test_a_dotted_module_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "orders.py").write_text("def handle(record):\n    return record.offset * 2\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "shop", raising=False)
    monkeypatch.delitem(sys.modules, "shop.orders", raising=False)
    assert load_handler("shop.orders:handle")(record(0, 21)) == 42


def test_an_attribute_path_inside_the_module() -> None:
    assert load_handler(f"{MODULE_FILE}:Handlers.nested")(record(0, 7)) == 7


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_colon", "expected MODULE:FUNCTION"),
        ("weir_no_such_module_xyz:f", "no module named 'weir_no_such_module_xyz'"),
        (f"{HERE}/missing.py:f", "no such file"),
        (f"{MODULE_FILE}:missing", "has no 'missing'"),
        (f"{MODULE_FILE}:not_callable", "is not callable"),
    ],
)
def test_what_cannot_be_found_is_reported(reference: str, message: str) -> None:
    with pytest.raises(HandlerNotFoundError, match=message):
        load_handler(reference)
