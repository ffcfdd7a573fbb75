"""The operator's throttle governor (weir.ops.operator.governor): a busy cluster halves the move
rate down to an eighth of the throttle asked for, an idle one raises it by half up to four
times, and a broker's idle ratio is read from its metrics page."""

from __future__ import annotations

import pytest

from weir.ops.operator.governor import ThrottleGovernor
from weir.ops.operator.load import parse_scrape


def test_the_busiest_broker_sets_the_pace_within_bounds() -> None:
    governor = ThrottleGovernor(1_000_000)
    assert governor.next_rate([0.9, 0.2]) == 500_000  # one broker busy: slower
    assert [governor.next_rate([0.1]) for _ in range(4)] == [250_000, 125_000, 125_000, 125_000]
    assert governor.next_rate([0.45, 0.5]) == 125_000  # between the marks: unchanged
    rates = [governor.next_rate([0.9, 0.8]) for _ in range(10)]
    assert rates[0] == 187_500 and rates[-1] == 4_000_000 and max(rates) == 4_000_000
    assert governor.next_rate([]) == 4_000_000  # nothing known: unchanged


def test_a_throttle_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        ThrottleGovernor(0)


def test_the_idle_ratio_is_read_from_the_metrics_page() -> None:
    text = ("# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent gauge\n"
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent 0.42\n")  # fmt: skip
    assert parse_scrape(1, 0.0, text).idle == 0.42
    assert parse_scrape(1, 0.0, "").idle is None
