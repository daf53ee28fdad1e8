"""The before/after of a fitted judge as an inline SVG (private): the report's "Fitted judge" section
(``ragaudit report --judge-config``) and the page ``ragaudit calibrate --fit --html`` writes.

Per fitted dimension of a `ragaudit.judges.fitted.JudgeConfig`, the held-out balanced accuracy and
Cohen's kappa at the default threshold (before) and at the fitted one (after), as bars, with both thresholds and
the held-out and fit counts written beside them. Every figure is read from the configuration's ``agreement``
and ``label_counts`` (what ``ragaudit calibrate --fit`` measured), never recomputed; a value that is not a
number there is a ConfigurationError naming where it is. No script, no external asset; every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ._svg import CSP, SCORE_LABELS, e, grid, label, line, svg_open

if TYPE_CHECKING:
    from ..judges.fitted import JudgeConfig

__all__ = ["FitDimension", "FitSide", "fit_dimensions", "fit_html", "fit_page", "fit_svg"]

_BEFORE, _AFTER = "#8c959f", "#0969da"
_METRICS = (("balanced_accuracy", "balanced accuracy"), ("kappa", "Cohen's kappa"))


@dataclass(frozen=True, slots=True)
class FitSide:
    """The held-out agreement at one threshold: ``kappa`` and ``balanced_accuracy`` (None: undefined, e.g.
    one class only) over ``n`` held-out labels."""

    threshold: float
    kappa: float | None
    balanced_accuracy: float | None
    n: int


@dataclass(frozen=True, slots=True)
class FitDimension:
    """One fitted dimension: its fitted ``threshold``, the agreement ``before`` (default threshold) and ``after``
    (None when the configuration recorded none) and its label counts (pass, fail, fit, held_out)."""

    name: str
    threshold: float
    before: FitSide | None
    after: FitSide | None
    counts: Mapping[str, int]


def _number(value: object, where: str, low: float, *, none: bool = True) -> float | None:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= 1.0:
        raise ConfigurationError(f"{where} must be a number in [{low:g}, 1]{' or null' if none else ''}, "
                                 f"got {value!r}")
    return float(value)


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{where} must be a whole number >= 0, got {value!r}")
    return value


def _side(value: object, where: str) -> FitSide:
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be an object, got {type(value).__name__}")
    threshold = _number(value.get("threshold"), f"{where}.threshold", 0.0, none=False)
    assert threshold is not None  # none=False
    return FitSide(threshold=threshold, kappa=_number(value.get("kappa"), f"{where}.kappa", -1.0),
                   balanced_accuracy=_number(value.get("balanced_accuracy"), f"{where}.balanced_accuracy", 0.0),
                   n=_count(value.get("n"), f"{where}.n"))


def fit_dimensions(config: JudgeConfig) -> tuple[FitDimension, ...]:
    """The figures to draw, read from *config*; ConfigurationError naming the key that is not what
    ``ragaudit calibrate --fit`` writes (a hand-edited ``agreement`` or ``label_counts``)."""
    unknown = sorted(set(config.agreement) - set(config.thresholds))
    if unknown:
        raise ConfigurationError(f"agreement: {', '.join(map(repr, unknown))} has no threshold")
    out = []
    for name, threshold in config.thresholds.items():
        sides: dict[str, FitSide | None] = {"before": None, "after": None}
        if name in config.agreement:
            agreement = config.agreement[name]
            if not isinstance(agreement, Mapping) or not {"before", "after"} <= set(agreement):
                raise ConfigurationError(f"agreement.{name} must be an object with \"before\" and \"after\"")
            sides = {key: _side(agreement[key], f"agreement.{name}.{key}") for key in sides}
        counts = config.label_counts.get(name, {})
        if not isinstance(counts, Mapping):
            raise ConfigurationError(f"label_counts.{name} must be an object, got {type(counts).__name__}")
        out.append(FitDimension(name=name, threshold=threshold, before=sides["before"], after=sides["after"],
                                counts={str(k): _count(v, f"label_counts.{name}.{k}") for k, v in counts.items()}))
    return tuple(out)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _held_out_words(dim: FitDimension) -> str:
    n = dim.after.n if dim.after is not None else dim.counts.get("held_out")
    words = [f"held out n={n}" if n is not None else "held out n=?"]
    if "fit" in dim.counts:
        words.append(f"fitted on {dim.counts['fit']}")
    if "pass" in dim.counts and "fail" in dim.counts:
        words.append(f"{dim.counts['pass']} pass / {dim.counts['fail']} fail")
    return " · ".join(words)


def _panel(dim: FitDimension, x0: float, top: float, plot_h: float, y: Callable[[float], float]) -> list[str]:
    """One dimension: its name and thresholds, the four bars, the group names and the counts."""
    name = SCORE_LABELS.get(dim.name, dim.name)
    before = f"{dim.before.threshold:.3f}" if dim.before is not None else "?"
    parts = [label(x0 + 130, top - 34, e(name), size=12, fill="#1f2328"),
             label(x0 + 130, top - 18, e(f"threshold {before} → {dim.threshold:.3f}"), size=11, fill="#1f2328")]
    if dim.before is None or dim.after is None:
        parts.append(label(x0 + 130, top + plot_h / 2, "no held-out agreement recorded", size=11))
    else:
        for g, (key, words) in enumerate(_METRICS):
            gx = x0 + 20 + g * 120
            for b, (side, when, color) in enumerate(((dim.before, "before", _BEFORE), (dim.after, "after", _AFTER))):
                value: float | None = getattr(side, key)
                bx = gx + 12 + b * 42
                tip = e(f"{name} {words} {when} (threshold {side.threshold:.3f}): {_fmt(value)} (n={side.n})")
                if value is None:
                    parts.append(label(bx + 18, y(0.0) - 4, "–", size=11) + f"<title>{tip}</title>")
                    continue
                y0, y1 = sorted((y(0.0), y(value)))
                parts.append(f'<rect class="{when}" x="{bx:.1f}" y="{y0:.1f}" width="36" height="{y1 - y0:.1f}" '
                             f'fill="{color}"><title>{tip}</title></rect>')
                ty = y(value) - 4 if value >= 0 else y(value) + 12
                parts.append(label(bx + 18, ty, f"{value:.3f}", size=10, fill="#1f2328"))
            parts.append(label(gx + 51, top + plot_h + 14, e(words), size=11, fill="#1f2328"))
    parts.append(label(x0 + 130, top + plot_h + 32, e(_held_out_words(dim)), size=10))
    return parts


def fit_svg(dimensions: Sequence[FitDimension]) -> str:
    """The before/after bars of *dimensions*, side by side, on one shared scale from min(0, lowest) to 1."""
    values = [v for d in dimensions for s in (d.before, d.after) if s is not None
              for v in (s.kappa, s.balanced_accuracy) if v is not None]
    low = min(0.0, math.floor(min(values, default=0.0) * 4) / 4)
    panel_w, left, top, plot_h = 260, 30, 54, 150
    width, height = left + max(len(dimensions), 1) * panel_w, top + plot_h + 76

    def y(value: float) -> float:
        return top + (1.0 - value) / (1.0 - low) * plot_h

    step = 0.25 if low >= -0.5 else 0.5
    ticks = [low + i * step for i in range(round((1.0 - low) / step) + 1)]
    parts = [svg_open("fit", width, height, "fitted judge before and after",
                      "held-out balanced accuracy and kappa at the default and the fitted threshold"),
             f'<rect x="{left}" y="{top}" width="{width - left - 6}" height="{plot_h}" fill="#ffffff" '
             'stroke="#59636e"/>', *grid(left, width - left - 6, ticks, y)]
    if low < 0:
        parts.append(line(left, y(0.0), width - 6, y(0.0), "#59636e"))
    for i, dim in enumerate(dimensions):
        parts += _panel(dim, left + i * panel_w, top, plot_h, y)
        if i:
            parts.append(line(left + i * panel_w, top, left + i * panel_w, top + plot_h, "#d1d9e0"))
    for j, (color, words) in enumerate(((_BEFORE, "before: default threshold"), (_AFTER, "after: fitted threshold"))):
        ly = height - 24 + j * 16
        parts.append(f'<rect x="{left}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                     + label(left + 14, ly, e(words), size=11, anchor="start", fill="#1f2328"))
    parts.append("</svg>")
    return "".join(parts)


def _meta(config: JudgeConfig, judged_by: str | None) -> str:
    settings = config.settings
    how = ", ".join(f"{key} {settings[key]}" for key in ("holdout", "seed", "objective") if key in settings)
    text = (f"fitted for judge <code>{e(config.judge or '(unknown)')}</code> · config {e(config.digest())} · "
            f"{len(config.examples)} few-shot examples" + (f" · {e(how)}" if how else ""))
    if judged_by is not None and config.judge is not None and judged_by != config.judge:
        text += f" · <b>this log was judged by <code>{e(judged_by)}</code>, not the judge it was fitted for</b>"
    return f'<p class="meta">{text}</p>'


_CAPTION = ("held-out balanced accuracy and Cohen's kappa of the judge against the labels, at the default "
            "threshold (before) and the fitted one (after): measured only on labels the fit never saw, with the "
            "judgements it was fitted on (the few-shot examples' effect shows once the fitted judge judges again; "
            "hover a bar for its value)")


def fit_html(config: JudgeConfig, judged_by: str | None = None) -> str:
    """The report's "Fitted judge" section for *config*; *judged_by* the report's judge (named when it is not
    the judge the configuration was fitted for)."""
    dimensions = fit_dimensions(config)
    return (f'<h2>Fitted judge</h2>{_meta(config, judged_by)}<figure id="fit">{fit_svg(dimensions)}'
            f"<figcaption>{e(_CAPTION)}</figcaption></figure>")


_PAGE_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
  margin: 0 auto; padding: 24px; max-width: 1280px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 20px 0 10px; }
.meta { color: #59636e; margin: 0 0 12px; }
figure { margin: 0; padding: 8px; border: 1px solid #d1d9e0; border-radius: 6px; background: #f6f8fa;
  display: inline-block; }
figcaption { font-size: 12px; color: #59636e; margin-top: 2px; max-width: 720px; }
"""


def fit_page(config: JudgeConfig, title: str = "ragaudit calibrate --fit") -> str:
    """A standalone HTML page with the before/after of *config* (what ``calibrate --fit --html`` writes)."""
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>{e(title)}</title><style>{_PAGE_CSS}</style></head><body><h1>{e(title)}</h1>"
            f"{fit_html(config)}</body></html>\n")
