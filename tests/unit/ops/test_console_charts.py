"""The console's SVG charts: round axis ceilings, labels, lines that follow the points, and an
empty frame until there are two samples."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from weir.ops.console.charts import (
    Series,
    clock_label,
    line_chart,
    nice_ceiling,
    short_number,
    sparkline,
)

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_764_316_800_000  # 2025-11-28 08:00:00 UTC


@pytest.mark.parametrize(
    ("value", "ceiling"),
    [(0, 1), (0.3, 0.5), (1, 1), (1.01, 2), (3, 5), (7, 10), (10, 10), (11, 20), (4200, 5000)],
)
def test_the_y_axis_ends_at_one_two_or_five_times_a_power_of_ten(value: float, ceiling: float):
    assert nice_ceiling(value) == pytest.approx(ceiling)


def test_axis_labels_are_short():
    assert [short_number(v) for v in (0, 2.5, 40, 1200, 3_000_000)] == ["0", "2.5", "40", "1.2k",
                                                                         "3M"]  # fmt: skip
    assert clock_label(T0 + 61_000) == "08:01:01"


def test_a_line_chart_is_well_formed_svg_with_a_polyline_per_series():
    chart = line_chart(
        [Series("total", [(T0, 0), (T0 + 1000, 5), (T0 + 2000, 10)]),
         Series("orders-0", [(T0, 0), (T0 + 2000, 4)])],
        title="Lag", unit="messages",
    )  # fmt: skip
    root = ET.fromstring(chart)
    assert root.tag == f"{SVG}svg" and root.get("aria-label") == "Lag (messages)"
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "legend"] == [
        "total", "orders-0"]  # fmt: skip
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "axis"]
    assert "10" in labels and "08:00:00" in labels and "08:00:02" in labels


def test_the_line_rises_where_the_values_do():
    chart = line_chart([Series("rate", [(T0, 0), (T0 + 1000, 10)])], title="t", unit="u")
    [line] = ET.fromstring(chart).findall(f"{SVG}polyline")
    (x0, y0), (x1, y1) = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
    assert x1 > x0 and y1 < y0  # SVG's y grows downwards


def test_before_two_samples_the_chart_says_it_is_collecting():
    for points in ([], [(T0, 3.0)]):
        chart = line_chart([Series("rate", points)], title="Messages", unit="per s")
        root = ET.fromstring(chart)
        assert root.findall(f"{SVG}polyline") == []
        assert "collecting samples" in "".join(root.itertext())


def test_a_series_name_is_escaped_in_the_markup():
    points = [(T0, 1.0), (T0 + 1, 2.0)]
    chart = line_chart([Series("<b>&", points), Series("x", points)], title="t", unit="u")
    assert "<b>" not in chart and "&lt;b&gt;&amp;" in chart
    ET.fromstring(chart)


def test_a_sparkline_draws_the_points_or_an_empty_box():
    assert "polyline" not in sparkline([])
    drawn = sparkline([(T0, 1), (T0 + 1000, 3), (T0 + 2000, 2)])
    [points] = re.findall(r'points="([^"]+)"', drawn)
    assert len(points.split()) == 3


def test_a_dashed_series_is_drawn_dashed():
    points = [(T0, 1.0), (T0 + 1, 2.0)]
    chart = line_chart([Series("p", points), Series("total", points, dashed=True)], title="t",
                       unit="u")  # fmt: skip
    first, second = ET.fromstring(chart).findall(f"{SVG}polyline")
    assert first.get("stroke-dasharray") is None and second.get("stroke-dasharray") == "6 4"
