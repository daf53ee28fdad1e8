"""The HTML report's score trend: the mean of each judge score per time bucket, as an inline SVG (private).

Rows carry the time their turn was judged (the audit log's ``ts``). The bucket width is the smallest of
minute, 5 and 15 minutes, hour, 3 and 6 hours, day, week and 30 days that gives at most `MAX_BUCKETS`
buckets over the rows' span; a bucket's point is the mean of the scores the judge gave in it (missing
scores are not zeros) and says its count. A timestamp that is not ISO 8601 is counted, never guessed.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..records import SCORE_NAMES
from ._svg import SCORE_COLORS, SCORE_LABELS, e, grid, label, line, svg_open

if TYPE_CHECKING:
    from .report import RowResult

__all__ = ["MAX_BUCKETS", "ScoreTrend", "score_trend", "trend_html"]

MAX_BUCKETS = 24
_WIDTHS_S = (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)


@dataclass(frozen=True, slots=True)
class ScoreTrend:
    """``buckets``: ``(bucket start, {score: (mean or None, n)})`` in time order, empty buckets left out;
    ``width_s`` the bucket width; ``unreadable`` how many rows had a timestamp that is not ISO 8601."""

    buckets: tuple[tuple[_dt.datetime, Mapping[str, tuple[float | None, int]]], ...]
    width_s: int
    unreadable: int


def _parse(text: str) -> _dt.datetime | None:
    try:
        when = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=_dt.timezone.utc) if when.tzinfo is None else when.astimezone(_dt.timezone.utc)


def score_trend(rows: Iterable[RowResult]) -> ScoreTrend | None:
    """The trend of *rows* by their ``timestamp``; None when no row has a readable one."""
    timed: list[tuple[float, RowResult]] = []
    unreadable = 0
    for row in rows:
        if row.timestamp is None:
            continue
        when = _parse(row.timestamp)
        if when is None:
            unreadable += 1
        else:
            timed.append((when.timestamp(), row))
    if not timed:
        return None
    start, end = min(t for t, _ in timed), max(t for t, _ in timed)
    width = next((w for w in _WIDTHS_S if (end // w) - (start // w) < MAX_BUCKETS), _WIDTHS_S[-1])
    sums: dict[int, dict[str, list[float]]] = {}
    for t, row in timed:
        values = sums.setdefault(int(t // width), {name: [] for name in SCORE_NAMES})
        for name in SCORE_NAMES:
            value = getattr(row, name)
            if value is not None:
                values[name].append(value)
    buckets = tuple(
        (_dt.datetime.fromtimestamp(key * width, _dt.timezone.utc),
         {name: (sum(v) / len(v) if v else None, len(v)) for name, v in values.items()})
        for key, values in sorted(sums.items()))
    return ScoreTrend(buckets=buckets, width_s=width, unreadable=unreadable)


def _when(moment: _dt.datetime, width_s: int) -> str:
    return moment.strftime("%Y-%m-%d" if width_s >= 86400 else "%Y-%m-%d %H:%M")


def _width_words(width_s: int) -> str:
    if width_s >= 86400:
        return f"{width_s // 86400} day" + ("s" if width_s >= 2 * 86400 else "")
    if width_s >= 3600:
        return f"{width_s // 3600} hour" + ("s" if width_s >= 7200 else "")
    return f"{width_s // 60} minute" + ("s" if width_s >= 120 else "")


def _trend_svg(trend: ScoreTrend) -> str:
    width, height, left, right, top, bottom = 640, 220, 36, 150, 12, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    first, last = trend.buckets[0][0], trend.buckets[-1][0]
    span = (last - first).total_seconds() or 1.0

    def x(moment: _dt.datetime) -> float:
        return left + (plot_w / 2 if len(trend.buckets) == 1 else (moment - first).total_seconds() / span * plot_w)

    def y(value: float) -> float:
        return top + (1 - value) * plot_h

    parts = [svg_open("trend", width, height, "score trend", f"mean judge scores per {_width_words(trend.width_s)}"),
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#ffffff" stroke="#59636e"/>',
             *grid(left, plot_w, (0.0, 0.25, 0.5, 0.75, 1.0), y)]
    for moment, anchor in ((first, "start"), (last, "end")):
        parts.append(label(x(moment), height - 14, e(_when(moment, trend.width_s)), anchor=anchor))
    for i, name in enumerate(SCORE_NAMES):
        points = [(x(moment), y(mean), moment, (mean, n)) for moment, means in trend.buckets
                  for mean, n in (means[name],) if mean is not None]
        color = SCORE_COLORS[name]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for px, py, moment, (mean, n) in points:
            parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"><title>'
                         f"{e(_when(moment, trend.width_s))}: {e(SCORE_LABELS[name])} {mean:.3f} (n={n})"
                         "</title></circle>")
        ly = top + 14 + i * 18
        parts.append(line(left + plot_w + 12, ly - 4, left + plot_w + 28, ly - 4, color, ' stroke-width="2"')
                     + label(left + plot_w + 32, ly, e(SCORE_LABELS[name]), size=11, anchor="start", fill="#1f2328"))
    parts.append("</svg>")
    return "".join(parts)


def trend_html(rows: Iterable[RowResult]) -> str:
    """The report's "Score trend" section; empty when no row has a time (a dataset run, not an audit log)."""
    trend = score_trend(rows)
    if trend is None:
        return ""
    unreadable = f" · {trend.unreadable} rows with an unreadable time left out" if trend.unreadable else ""
    return (f'<h2>Score trend</h2><figure id="trend">{_trend_svg(trend)}<figcaption>mean of each judge score per '
            f"{e(_width_words(trend.width_s))}, {len(trend.buckets)} buckets with turns (times in UTC; hover a "
            f"point for its count){unreadable}</figcaption></figure>")
