"""A self-contained HTML page for an :class:`~ragaudit.evaluation.EvaluationReport`.

One file to open from a CI artifact: inline CSS, inline SVG charts (a histogram per score and
metric, a recall-vs-faithfulness scatter), no scripts and no external assets. A Content-Security-
Policy forbids both, so even a question or answer that slipped past escaping could not run or
fetch anything. Every piece of text from the dataset, the pipeline or the judge is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from ..records import SCORE_NAMES

if TYPE_CHECKING:
    # Types only: report.py imports this module to render, so a runtime import back would be a cycle.
    from .report import EvaluationReport, RowResult

__all__ = ["render_html"]

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --panel:#f6f8fa;
  --ok:#1a7f37; --retrieval:#cf222e; --generation:#bc4c00; --prompt:#8250df; --error:#6e7781;
  --unknown:#9a6700; --bar:#0969da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  background: var(--bg); margin: 0 auto; padding: 24px; max-width: 1280px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 10px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.meta { color: var(--muted); margin: 0 0 12px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.none { color: var(--muted); text-align: center; }
.low { background: #ffebe9; } .mid { background: #fff8c5; } .high { background: #dafbe1; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
#summary, #diagnosis { width: auto; min-width: 560px; }
td.more { min-width: 300px; max-width: 440px; }
figure { margin: 0; padding: 8px; border: 1px solid var(--line); border-radius: 6px;
  background: var(--panel); }
figcaption { font-size: 12px; color: var(--muted); margin-top: 2px; }
.tag { display: inline-block; padding: 0 6px; border-radius: 10px; color: #fff; font-size: 12px;
  white-space: nowrap; }
.d-ok { background: var(--ok); } .d-retrieval { background: var(--retrieval); }
.d-generation { background: var(--generation); } .d-prompt { background: var(--prompt); }
.d-error { background: var(--error); } .d-unknown { background: var(--unknown); }
.share { display: inline-block; height: 10px; background: var(--bar); vertical-align: middle; }
details summary { cursor: pointer; color: var(--muted); }
.cell-text { min-width: 180px; max-width: 360px; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0; font-size: 12px; }
ul.cites { margin: 2px 0; padding-left: 16px; }
.err { color: var(--retrieval); }
"""

_DIAG_CLASS = {"ok": "d-ok", "retrieval": "d-retrieval", "generation": "d-generation",
               "prompt/question": "d-prompt", "error": "d-error", "unknown": "d-unknown"}
_DIAG_COLOR = {"ok": "#1a7f37", "retrieval": "#cf222e", "generation": "#bc4c00",
               "prompt/question": "#8250df", "error": "#6e7781", "unknown": "#9a6700"}
_LABELS = {"faithfulness": "faithfulness", "context_relevance": "context relevance",
           "answer_relevance": "answer relevance"}


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _score_cell(value: float | None, threshold: float) -> str:
    if value is None:
        return '<td class="none" title="no value">–</td>'
    css = "low" if value < threshold else ("mid" if value < min(1.0, threshold + 0.25) else "high")
    return f'<td class="num {css}">{value:.3f}</td>'


def _label(x: float, y: float, text: str, *, size: int = 10, anchor: str = "middle", fill: str = "#59636e",
           extra: str = "") -> str:
    """An SVG text element; *text* must already be escaped."""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{extra}>'
            f"{text}</text>")


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, extra: str = "") -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}/>'


def _histogram_svg(name: str, counts: Sequence[int], mean: float | None, n: int, missing: int) -> str:
    width, height, left, bottom, top = 260, 150, 30, 24, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    peak = max(counts) if counts and max(counts) > 0 else 1
    bins = max(len(counts), 1)  # the report's HISTOGRAM_BINS, read from the data it rendered
    bar_w = plot_w / bins
    label = _LABELS.get(name, name)
    parts = [f'<svg class="histogram" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)} histogram">',
             f"<title>{_e(label)}: mean {_fmt(mean)}, n={n}, missing={missing}</title>",
             _line(left, top + plot_h, left + plot_w, top + plot_h, "#59636e"),
             _line(left, top, left, top + plot_h, "#59636e")]
    for i, count in enumerate(counts):
        h = plot_h * count / peak
        x = left + i * bar_w
        lo, hi = i / bins, (i + 1) / bins
        parts.append(f'<rect x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 2:.1f}" '
                     f'height="{h:.1f}" fill="#0969da"><title>{lo:.1f}–{hi:.1f}: {count}</title></rect>')
    for tick in (0.0, 0.5, 1.0):
        x = left + tick * plot_w
        parts.append(_label(x, height - 8, f"{tick:g}"))
    parts.append(_label(left - 4, top + 8, str(peak), anchor="end"))
    parts.append(_label(left - 4, top + plot_h, "0", anchor="end"))
    if mean is not None:
        x = left + mean * plot_w
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#cf222e" '
                     f'stroke-dasharray="4 3"><title>mean {mean:.3f}</title></line>')
    parts.append("</svg>")
    return "".join(parts)


def _scatter_svg(rows: Sequence[RowResult], x_name: str) -> str:
    size, pad = 320, 36
    plot = size - 2 * pad
    points = []
    for row in rows:
        x = row.context_relevance if x_name == "context_relevance" else row.retrieval_metrics.get(x_name)
        y = row.faithfulness
        if x is None or y is None:
            continue
        points.append((row, x, y))
    parts = [f'<svg class="scatter" xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" '
             f'viewBox="0 0 {size} {size}" role="img" aria-label="{_e(x_name)} versus faithfulness">',
             f"<title>{_e(x_name)} vs faithfulness, {len(points)} rows</title>",
             f'<rect x="{pad}" y="{pad}" width="{plot}" height="{plot}" fill="#ffffff" stroke="#59636e"/>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        gx = pad + tick * plot
        gy = pad + (1 - tick) * plot
        parts.append(_line(gx, pad, gx, pad + plot, "#eaeef2"))
        parts.append(_line(pad, gy, pad + plot, gy, "#eaeef2"))
        parts.append(_label(gx, pad + plot + 14, f"{tick:g}"))
        parts.append(_label(pad - 4, gy + 3, f"{tick:g}", anchor="end"))
    parts.append(_label(pad + plot / 2, size - 4, _e(x_name), size=11, fill="#1f2328"))
    parts.append(_label(12, pad + plot / 2, "faithfulness", size=11, fill="#1f2328",
                        extra=f' transform="rotate(-90 12 {pad + plot / 2:.1f})"'))
    groups: dict[tuple[float, float], list[tuple[RowResult, float, float]]] = {}
    for point in points:  # rows at the same spot share one marker that says how many
        groups.setdefault((round(point[1], 2), round(point[2], 2)), []).append(point)
    for (x, y), members in groups.items():
        cx, cy = pad + x * plot, pad + (1 - y) * plot
        diagnoses = {row.diagnosis for row, _, _ in members}
        color = _DIAG_COLOR[members[0][0].diagnosis] if len(diagnoses) == 1 else "#59636e"
        radius = 5 if len(members) == 1 else min(5 + 2 * len(members), 14)
        ids = ", ".join(f"{row.id} ({row.diagnosis})" for row, _, _ in members)
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{color}" fill-opacity="0.75" '
                     f'stroke="#1f2328" stroke-width="0.5"><title>{_e(x_name)} {x:.2f}, faithfulness '
                     f"{y:.2f}: {_e(ids)}</title></circle>")
        if len(members) > 1:
            parts.append(_label(cx, cy + 4, str(len(members)), fill="#ffffff"))
    if not points:
        parts.append(_label(size / 2, size / 2, "no row has both values", size=12))
    parts.append("</svg>")
    return "".join(parts)


def _citations_html(row: RowResult) -> str:
    if not row.citations:
        return '<span class="none">none</span>'
    items = []
    for c in row.citations:
        source = f" ({_e(c.get('source'))})" if c.get("source") else ""
        items.append(f"<li>[{_e(c.get('rank', '?'))}] <code>{_e(c.get('doc_id'))}</code>{source} "
                     f"– {_e(c.get('method', ''))}</li>")
    return f'<ul class="cites">{"".join(items)}</ul>'


def _row_html(row: RowResult, metrics: Sequence[str], threshold: float) -> str:
    cells = [f'<td><code>{_e(row.id)}</code></td>',
             f'<td class="cell-text">{_e(row.question or "")}</td>']
    cells += [_score_cell(v, threshold) for v in row.scores().values()]
    cells += [_score_cell(row.retrieval_metrics.get(m), threshold) for m in metrics]
    cells.append(f"<td>{_citations_html(row)}</td>")
    cells.append(f'<td><span class="tag {_DIAG_CLASS[row.diagnosis]}">{_e(row.diagnosis)}</span></td>')
    detail = []
    if row.error:
        detail.append(f'<p class="err"><b>Pipeline error:</b> {_e(row.error)}</p>')
    if row.judge_error:
        detail.append(f'<p class="err"><b>Judge error:</b> {_e(row.judge_error)}</p>')
    if row.reason:
        detail.append(f"<p><b>Reason:</b> {_e(row.reason)}</p>")
    detail.append(f"<p><b>Answer:</b></p><pre>{_e(row.answer if row.answer is not None else '(none)')}</pre>")
    docs = ", ".join(f"{_e(d)}" + (f" ({_e(s)})" if s else "")
                     for d, s in zip(row.doc_ids, row.doc_sources or (None,) * len(row.doc_ids)))
    detail.append(f"<p><b>Retrieved:</b> {docs or 'none'}</p>")
    if row.trace_id:
        detail.append(f"<p><b>Trace:</b> <code>{_e(row.trace_id)}</code></p>")
    opened = " open" if row.diagnosis != "ok" else ""  # what needs a look is shown without a click
    cells.append(f'<td class="cell-text more"><details{opened}><summary>details</summary>{"".join(detail)}'
                 "</details></td>")
    return f'<tr class="row" id="row-{_e(row.id)}">{"".join(cells)}</tr>'


def render_html(report: EvaluationReport) -> str:
    """The report as one self-contained HTML document (no scripts, no external assets)."""
    threshold = report.threshold
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{_e(report.title)}</h1>"]
    usage = ", ".join(f"{_e(k)} {v}" for k, v in sorted(report.usage.items()))
    out.append(f'<p class="meta">judge <code>{_e(report.judge)}</code> · {len(report.rows)} rows · '
               f"{report.errors} pipeline errors · {report.rows_without_ground_truth} rows without ground "
               f"truth · diagnosis threshold {threshold:g}" + (f" · judge usage: {usage}" if usage else "")
               + "</p>")

    out.append('<h2>Summary</h2><table id="summary"><thead><tr><th>metric</th><th class="num">mean</th>'
               '<th class="num">n</th><th class="num">missing</th><th class="num">min</th>'
               '<th class="num">max</th></tr></thead><tbody>')
    for s in report.aggregate.values():
        out.append(f"<tr><td>{_e(_LABELS.get(s.name, s.name))}</td>{_score_cell(s.mean, threshold)}"
                   f'<td class="num">{s.n}</td><td class="num">{s.missing}</td>'
                   f'<td class="num">{_fmt(s.min)}</td><td class="num">{_fmt(s.max)}</td></tr>')
    out.append("</tbody></table>")

    shares = report.diagnosis_shares
    out.append('<h2>Diagnosis</h2><table id="diagnosis"><thead><tr><th>diagnosis</th>'
               '<th class="num">rows</th><th class="num">share</th><th></th></tr></thead><tbody>')
    for d, count in report.diagnosis_counts.items():
        out.append(f'<tr><td><span class="tag {_DIAG_CLASS[d]}">{_e(d)}</span></td>'
                   f'<td class="num">{count}</td><td class="num">{shares[d]:.0%}</td><td><span class="share" '
                   f'style="width:{shares[d] * 240:.0f}px"></span></td></tr>')
    out.append("</tbody></table>")

    out.append('<h2>Distributions</h2><div class="charts">')
    for name, counts in report.distributions.items():
        s = report.aggregate[name]
        out.append(f"<figure>{_histogram_svg(name, counts, s.mean, s.n, s.missing)}"
                   f"<figcaption>{_e(_LABELS.get(name, name))}: mean {_fmt(s.mean)} · n={s.n} · "
                   f"missing={s.missing}</figcaption></figure>")
    recall_name = next((m for m in report.metrics if m.startswith("recall")), None)
    has_recall = recall_name is not None and any(
        r.retrieval_metrics.get(recall_name) is not None and r.faithfulness is not None for r in report.rows)
    x_name = recall_name if has_recall and recall_name else "context_relevance"
    out.append(f"<figure>{_scatter_svg(report.rows, x_name)}<figcaption>{_e(x_name)} vs faithfulness "
               "(colour: diagnosis)</figcaption></figure></div>")

    headers = ["id", "question", *(_LABELS[n] for n in SCORE_NAMES), *report.metrics, "citations",
               "diagnosis", ""]
    out.append('<h2>Rows</h2><table id="rows"><thead><tr>'
               + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr></thead><tbody>")
    out.extend(_row_html(row, report.metrics, threshold) for row in report.rows)
    out.append("</tbody></table>")
    out.append('<p class="meta">Generated by ragaudit. Scores the judge did not give are shown as – and are '
               "not counted in means.</p></body></html>")
    return "\n".join(out)
