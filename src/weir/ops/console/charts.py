"""Charts as inline SVG, drawn on the server: a line chart with a time axis (throughput, lag) and
a sparkline for tables. Pure: points in, markup out.

A chart's y axis starts at 0 and ends at a round number above the highest point (1, 2 or 5
times a power of ten); its x axis spans the first to the last sample, labelled in UTC. Fewer
than two points draw an empty frame that says the samples are still being collected.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass

from weir.ops.console.html import Html, join, tag

#: the series' colours, in order
PALETTE = ("#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#db2777", "#65a30d")
GRID_LINES = 4
#: plot area margins: left (y labels), right, top, bottom (x labels, legend)
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 10, 24
LEGEND_ROW = 18


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[int, float]]
    dashed: bool = False


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least `value` (1 for 0)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return float(step * power)
    raise AssertionError("unreachable")


def short_number(value: float) -> str:
    """An axis label: 0, 2.5, 40, 1.2k, 3M."""
    for divisor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= divisor:
            return f"{value / divisor:.3g}{suffix}"
    return f"{value:.3g}"


def clock_label(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%H:%M:%S")


def line_chart(
    series: Sequence[Series], *, title: str, unit: str, width: int = 720, height: int = 220
) -> Html:
    """Each series a line over time, with a legend when there are several."""
    drawn = [s for s in series if len(s.points) >= 2]
    legend_height = LEGEND_ROW * math.ceil(len(drawn) / 4) if len(drawn) > 1 else 0
    plot = _Plot(width - LEFT - RIGHT, height - TOP - BOTTOM - legend_height)
    label = f"{title} ({unit})"
    if not drawn:
        parts = [_frame(plot), _middle_text(plot, "collecting samples…")]
    else:
        plot.fit([p for s in drawn for p in s.points])
        parts = [_frame(plot), _y_axis(plot), _x_axis(plot)]
        parts += [_line(plot, s, PALETTE[i % len(PALETTE)]) for i, s in enumerate(drawn)]
        if len(drawn) > 1:
            parts.append(_legend(drawn, height - legend_height + 4))
    return tag("svg", join([tag("title", label), *parts]), class_="chart", role="img",
               viewBox=f"0 0 {width} {height}", width=width, height=height,
               aria_label=label, xmlns="http://www.w3.org/2000/svg")  # fmt: skip


def sparkline(points: Sequence[tuple[int, float]], *, width: int = 120, height: int = 24) -> Html:
    """A small line of the points, no axes; an empty box with fewer than two."""
    if len(points) < 2:
        return tag("svg", "", class_="spark", width=width, height=height,
                   xmlns="http://www.w3.org/2000/svg")  # fmt: skip
    plot = _Plot(width - 2, height - 2, left=1, top=1)
    plot.fit(points)
    line = tag("polyline", "", points=plot.polyline(points), fill="none", stroke=PALETTE[0],
               stroke_width="1.5")  # fmt: skip
    return tag("svg", line, class_="spark", role="img", aria_label="trend", width=width,
               height=height, viewBox=f"0 0 {width} {height}",
               xmlns="http://www.w3.org/2000/svg")  # fmt: skip


class _Plot:
    """The plot area and the mapping of (time, value) into it."""

    def __init__(self, width: int, height: int, *, left: int = LEFT, top: int = TOP) -> None:
        self.width, self.height, self.left, self.top = width, height, left, top
        self.t0, self.t1, self.ymax = 0, 1, 1.0

    def fit(self, points: Sequence[tuple[int, float]]) -> None:
        times = [t for t, _ in points]
        self.t0, self.t1 = min(times), max(max(times), min(times) + 1)
        self.ymax = nice_ceiling(max(v for _, v in points))

    def x(self, t: int) -> float:
        return self.left + (t - self.t0) / (self.t1 - self.t0) * self.width

    def y(self, v: float) -> float:
        return self.top + self.height - min(max(v, 0.0), self.ymax) / self.ymax * self.height

    def polyline(self, points: Sequence[tuple[int, float]]) -> str:
        return " ".join(f"{self.x(t):.1f},{self.y(v):.1f}" for t, v in points)


def _frame(plot: _Plot) -> Html:
    return tag("rect", "", x=plot.left, y=plot.top, width=plot.width, height=plot.height,
               class_="frame")  # fmt: skip


def _middle_text(plot: _Plot, text: str) -> Html:
    return tag("text", text, x=plot.left + plot.width / 2, y=plot.top + plot.height / 2,
               text_anchor="middle", class_="note")  # fmt: skip


def _y_axis(plot: _Plot) -> Html:
    parts = []
    for i in range(GRID_LINES + 1):
        value = plot.ymax * i / GRID_LINES
        y = f"{plot.y(value):.1f}"
        parts.append(tag("line", "", x1=plot.left, x2=plot.left + plot.width, y1=y, y2=y,
                         class_="grid"))  # fmt: skip
        parts.append(tag("text", short_number(value), x=plot.left - 6, y=y, text_anchor="end",
                         dominant_baseline="middle", class_="axis"))  # fmt: skip
    return join(parts)


def _x_axis(plot: _Plot) -> Html:
    y = plot.top + plot.height + 16
    ends = ((plot.t0, plot.left, "start"), (plot.t1, plot.left + plot.width, "end"))
    return join(tag("text", clock_label(t), x=x, y=y, text_anchor=anchor, class_="axis")
                for t, x, anchor in ends)  # fmt: skip


def _line(plot: _Plot, series: Series, colour: str) -> Html:
    last_t, last_v = series.points[-1]
    return join([
        tag("polyline", tag("title", f"{series.name}: {short_number(last_v)} now"),
            points=plot.polyline(series.points), fill="none", stroke=colour,
            stroke_width="2", stroke_dasharray="6 4" if series.dashed else None,
            class_="series"),
        tag("circle", "", cx=f"{plot.x(last_t):.1f}", cy=f"{plot.y(last_v):.1f}", r="3",
            fill=colour),
    ])  # fmt: skip


def _legend(series: Sequence[Series], top: int) -> Html:
    items = []
    for i, s in enumerate(series):
        x, y = LEFT + (i % 4) * 160, top + (i // 4) * LEGEND_ROW
        items.append(tag("rect", "", x=x, y=y, width=10, height=10, fill=PALETTE[i % len(PALETTE)]))
        items.append(tag("text", s.name, x=x + 14, y=y + 9, class_="legend"))
    return join(items)
