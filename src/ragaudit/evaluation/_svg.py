"""What the HTML pages' inline SVG drawings share (private): the score labels and colours, escaping, text and
line elements, the opening tag and the horizontal grid. Numbers are formatted here; every text is escaped by
the caller (`e`) before it reaches `label`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from html import escape

__all__ = ["CSP", "SCORE_COLORS", "SCORE_LABELS", "e", "grid", "label", "line", "svg_open"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
"""The pages' Content-Security-Policy: no script and nothing fetched, whatever slipped past escaping."""

SCORE_LABELS = {"faithfulness": "faithfulness", "context_relevance": "context relevance",
                "answer_relevance": "answer relevance"}
SCORE_COLORS = {"faithfulness": "#0969da", "context_relevance": "#1a7f37", "answer_relevance": "#bc4c00"}


def e(text: object) -> str:
    """*text* escaped for HTML and SVG text and attributes."""
    return escape(str(text), quote=True)


def label(x: float, y: float, text: str, *, size: int = 10, anchor: str = "middle", fill: str = "#59636e",
          extra: str = "") -> str:
    """An SVG text element; *text* must already be escaped."""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{extra}>'
            f"{text}</text>")


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, extra: str = "") -> str:
    """An SVG line element."""
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}/>'


def svg_open(css_class: str, width: float, height: float, aria: str, title: str) -> str:
    """The opening ``<svg>`` tag and its ``<title>``; *aria* and *title* are escaped here."""
    return (f'<svg class="{css_class}" xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
            f'viewBox="0 0 {width:g} {height:g}" role="img" aria-label="{e(aria)}"><title>{e(title)}</title>')


def grid(left: float, width: float, ticks: Iterable[float], y: Callable[[float], float]) -> list[str]:
    """Horizontal grid lines at *ticks* across [left, left + width], each labelled at its left."""
    return [line(left, y(tick), left + width, y(tick), "#eaeef2") + label(left - 4, y(tick) + 3, f"{tick:g}",
                                                                         anchor="end")
            for tick in ticks]
