"""The quota rate and throttle arithmetic, as Kafka's Rate / SampledStat / QuotaUtils compute
them, on fake time."""

from __future__ import annotations

import pytest

from weir.broker.quota_rate import QuotaWindow, SampledRate, throttle_time_ms
from weir.clock import FakeClock

WINDOW = QuotaWindow(samples=11, size_ms=1000)


def test_a_first_burst_is_measured_over_all_but_one_window() -> None:
    rate = SampledRate(WINDOW)
    rate.record(5000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(500.0)


def test_the_window_grows_past_the_minimum_with_elapsed_time() -> None:
    rate = SampledRate(WINDOW)
    for second in range(13):
        rate.record(1000, second * 1000 + 500)
    now = 12_700
    # the oldest live sample began at 2500 (those before were reused)
    assert rate.window_size_ms(now) == now - 2500
    assert rate.measure(now) == pytest.approx(11 * 1000 / ((now - 2500) / 1000))


def test_samples_older_than_every_window_are_forgotten() -> None:
    rate = SampledRate(WINDOW)
    rate.record(50_000, 0)
    assert rate.measure(10_999) > 0
    assert rate.measure(11_000) == 0


def test_throttle_time_is_kafkas_quota_utils() -> None:
    # (value - bound) / bound * window
    assert throttle_time_ms(1500.0, 1000.0, 10_000, 2**31 - 1) == 5000
    assert throttle_time_ms(1000.0, 1000.0, 10_000, 2**31 - 1) == 0
    assert throttle_time_ms(1000.04, 1000.0, 10_000, 2**31 - 1) == 0  # rounds to nearest ms
    assert throttle_time_ms(999.0, 1000.0, 10_000, 2**31 - 1) == 0


def test_throttle_time_is_capped_and_a_zero_bound_gets_the_cap() -> None:
    assert throttle_time_ms(1e9, 1.0, 10_000, 1000) == 1000
    assert throttle_time_ms(1.0, 0.0, 10_000, 1000) == 1000


def test_a_client_that_waits_out_its_throttles_gets_its_bound() -> None:
    """A producer that sends 4 KiB at a time and, as KIP-219 clients do, waits out each
    throttle, moves `bound` bytes a second over a minute of fake time."""
    clock, rate, bound = FakeClock(), SampledRate(WINDOW), 10_000.0
    sent = 0
    while clock.monotonic_ms() < 60_000:
        now = clock.monotonic_ms()
        rate.record(4096, now)
        sent += 4096
        measured = rate.measure(now)
        throttle = throttle_time_ms(measured, bound, rate.window_size_ms(now), 2**31 - 1)
        clock.advance(max(throttle, 5))  # 5 ms: the round trip
    achieved = sent / (clock.monotonic_ms() / 1000)
    assert achieved == pytest.approx(bound, rel=0.1)
