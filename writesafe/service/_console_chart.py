"""The console's picture of the ledger over time: operations by status per hour, as SVG geometry.

Pure arithmetic from `Ledger.count_by_hour` rows to rectangles, so the template only draws and the
scaling can be checked without a browser.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from writesafe.ledger import Status

HOURS = 24
WIDTH = 720
HEIGHT = 160
_PLOT_TOP = 12  # room for the peak's label
_PLOT_BOTTOM = HEIGHT - 20  # room for the hour labels
_GAP = 4
_LABEL_EVERY = 3  # hours

# Bottom to top: what settled first, what needs a person on top where the eye lands.
STACKING = (
    Status.SUCCEEDED,
    Status.FAILED,
    Status.IN_FLIGHT,
    Status.OUTCOME_UNKNOWN,
    Status.NEEDS_ATTENTION,
)


@dataclass(frozen=True, slots=True)
class Segment:
    """One status's part of one hour's bar."""

    status: Status
    count: int
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True, slots=True)
class HourBar:
    start: datetime
    total: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class HourLabel:
    x: float
    text: str


@dataclass(frozen=True, slots=True)
class HourlyChart:
    """`HOURS` stacked bars ending with the current hour; `peak` is the tallest bar's total."""

    bars: tuple[HourBar, ...]
    labels: tuple[HourLabel, ...]
    peak: int
    width: int = WIDTH
    height: int = HEIGHT
    baseline: int = _PLOT_BOTTOM

    @property
    def total(self) -> int:
        return sum(bar.total for bar in self.bars)


def first_hour(now: datetime, hours: int = HOURS) -> datetime:
    """The start of the oldest hour shown when it is `now`."""
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours - 1)


def hourly_chart(
    counts: Iterable[tuple[datetime, Status, int]], now: datetime, hours: int = HOURS
) -> HourlyChart:
    """Stacked bars of `(hour start, status, count)` rows for the `hours` hours up to `now`."""
    start = first_hour(now, hours)
    table: dict[tuple[int, Status], int] = {}
    for hour, status, count in counts:
        index = int((hour - start) / timedelta(hours=1))
        if 0 <= index < hours:
            table[index, status] = table.get((index, status), 0) + count
    totals = [sum(table.get((i, s), 0) for s in STACKING) for i in range(hours)]
    peak = max(totals, default=0)
    slot = WIDTH / hours
    scale = (_PLOT_BOTTOM - _PLOT_TOP) / peak if peak else 0.0
    bars = []
    for index in range(hours):
        x = index * slot + _GAP / 2
        top = float(_PLOT_BOTTOM)
        segments = []
        for status in STACKING:
            count = table.get((index, status), 0)
            if count:
                height = count * scale
                top -= height
                segments.append(Segment(status, count, x, top, slot - _GAP, height))
        bars.append(HourBar(start + timedelta(hours=index), totals[index], tuple(segments)))
    labels = tuple(
        HourLabel(i * slot + slot / 2, f"{bar.start:%H}:00")
        for i, bar in enumerate(bars)
        if (hours - 1 - i) % _LABEL_EVERY == 0
    )
    return HourlyChart(tuple(bars), labels, peak)
