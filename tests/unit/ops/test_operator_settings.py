"""`weir operator`'s settings out of range are refused with a clear error before anything is
asked of a cluster."""

from __future__ import annotations

import pytest

from weir.cli.main import main
from weir.ops.operator.service import ServiceSettings


@pytest.mark.parametrize(("settings", "message"), [
    (ServiceSettings(balance_threshold=0.5), "balance threshold is a ratio of 1 or more"),
    (ServiceSettings(windows=0), "windows must be 1 or more"),
    (ServiceSettings(interval_s=0), "longer than 0 s"),
    (ServiceSettings(heal_after_s=-1), "heal-after must be 0 s or more"),
    (ServiceSettings(max_concurrent=0), "must be 1 or more"),
    (ServiceSettings(throttle=0), "a throttle must be a positive rate"),
])  # fmt: skip
def test_settings_out_of_range_are_refused(settings: ServiceSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings.check()


@pytest.mark.parametrize(("argv", "message"), [
    (["operator", "balance", "--max-concurrent-moves", "0"], "--max-concurrent-moves must be"),
    (["operator", "balance", "--throttle", "-5"], "--throttle must be a positive"),
    (["operator", "start", "--zookeeper", "127.0.0.1:1", "--balance-threshold", "0.9"],
     "balance threshold is a ratio of 1 or more"),
])  # fmt: skip
def test_the_command_line_refuses_them_before_touching_a_cluster(
    argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--bootstrap-server", "127.0.0.1:1"])
    assert message in str(refused.value)
