"""The coordinator tests' fixtures (../conftest.py), building TxnWorlds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from txn_harness import TEST_TXN_CONFIG, TxnWorld


@pytest.fixture
def world_kind() -> tuple[Callable[..., Any], Any]:
    return TxnWorld, TEST_TXN_CONFIG
