"""A self-contained HTML page for an [`EvaluationReport`][ragaudit.EvaluationReport].

One file to open from a CI artifact: inline CSS, inline SVG charts (a histogram per score and
metric, a recall-vs-faithfulness scatter, an audit log's score trend over time, a fitted judge's before
and after), no scripts and no external assets. A Content-Security-Policy forbids both, so even a
question or answer that slipped past escaping could not run or fetch anything. Every piece of text
from the dataset, the pipeline or the judge is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._fit_html import fit_html
from ._session_html import SESSION_CSS, sessions_html
from ._svg import CSP, SCORE_LABELS
from ._svg import e as _e
from ._svg import label as _label
from ._svg import line as _line
from ._trend_html import trend_html

if TYPE_CHECKING:
    # Types only: report.py imports this module to render, so a runtime import back would be a cycle.
    from ..judges.fitted import JudgeConfig
    from .report import EvaluationReport, RowResult

__all__ = ["render_html"]

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
article.answer { border: 1px solid var(--line); border-radius: 8px; margin: 0 0 16px; padding: 10px 14px;
  overflow-wrap: anywhere; }
article.answer > header { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: baseline; }
article.answer h3 { font-size: 15px; margin: 0; flex: 1 1 480px; }
.scores { color: var(--muted); font-size: 12px; font-variant-numeric: tabular-nums; }
.scores b { color: var(--fg); font-weight: 600; }
.agrid { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 16px; margin-top: 8px; }
.agrid h4 { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
  margin: 0 0 4px; }
.sent { padding: 1px 2px; border-radius: 3px; }
.v-supported { background: #dafbe1; } .v-partially_supported { background: #fff8c5; }
.v-unsupported { background: #ffebe9; text-decoration: underline wavy #cf222e; }
.v-contradicted { background: #ffcecb; text-decoration: underline wavy #a40e26; font-weight: 600; }
.v-no_claim { color: var(--muted); } .v-missing { border-bottom: 1px dashed var(--muted); }
sup.sn { color: var(--muted); font-size: 10px; margin: 0 2px; }
sup.sn a, .docs a { color: var(--bar); text-decoration: none; }
ul.flags { margin: 6px 0; padding-left: 18px; }
ul.flags li { margin: 2px 0; }
ol.docs { margin: 0; padding-left: 0; list-style: none; }
ol.docs li { border: 1px solid var(--line); border-radius: 6px; padding: 4px 8px; margin: 0 0 6px;
  background: var(--panel); }
.grade { display: inline-block; min-width: 18px; text-align: center; border-radius: 9px; color: #fff;
  font-size: 12px; padding: 0 6px; }
.g-3 { background: var(--ok); } .g-2 { background: #4ac26b; } .g-1 { background: var(--unknown); }
.g-0 { background: var(--retrieval); } .g-none { background: var(--error); }
.holds { color: var(--ok); } .fails { color: var(--retrieval); font-weight: 600; }
.rid { color: var(--muted); font-size: 11px; }
.legend { color: var(--muted); font-size: 12px; }
"""

_DIAG_CLASS = {"ok": "d-ok", "retrieval": "d-retrieval", "generation": "d-generation",
               "prompt/question": "d-prompt", "error": "d-error", "unknown": "d-unknown"}
_DIAG_COLOR = {"ok": "#1a7f37", "retrieval": "#cf222e", "generation": "#bc4c00",
               "prompt/question": "#8250df", "error": "#6e7781", "unknown": "#9a6700"}


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _score_cell(value: float | None, threshold: float) -> str:
    if value is None:
        return '<td class="none" title="no value">–</td>'
    css = "low" if value < threshold else ("mid" if value < min(1.0, threshold + 0.25) else "high")
    return f'<td class="num {css}">{value:.3f}</td>'


def _histogram_svg(name: str, counts: Sequence[int], mean: float | None, n: int, missing: int) -> str:
    width, height, left, bottom, top = 260, 150, 30, 24, 10
    plot_w, plot_h = width - left - 8, height - bottom - top
    peak = max(counts) if counts and max(counts) > 0 else 1
    bins = max(len(counts), 1)  # the report's HISTOGRAM_BINS, read from the data it rendered
    bar_w = plot_w / bins
    label = SCORE_LABELS.get(name, name)
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


def _anchor(row: RowResult, rank: object) -> str:
    return f"d-{_e(row.id)}-{_e(rank)}"


def _score_text(name: str, value: float | None, threshold: float | None) -> str:
    """*name* and *value*; marked low below *threshold* (None: never, e.g. P@5 of 2 documents is 0.4 at best)."""
    if value is None:
        return f"{_e(name)} –"
    cls = "low" if threshold is not None and value < threshold else ""
    return f'{_e(name)} <b class="{cls}">{value:.2f}</b>'


def _sentences_html(row: RowResult) -> str:
    """The answer with each judged sentence marked by its verdict and linked to its supporting documents."""
    answer = row.answer or ""
    if not row.sentences:
        return f"<pre>{_e(answer) if row.answer is not None else '(none)'}</pre>"
    parts: list[str] = []
    pos = 0
    for sentence in row.sentences:
        start, end = sentence.get("start"), sentence.get("end")
        text = str(sentence.get("text") or "")
        if isinstance(start, int) and isinstance(end, int) and pos <= start <= end <= len(answer):
            parts.append(_e(answer[pos:start]))
            text, pos = answer[start:end], end
        else:
            parts.append(" ")
        verdict = sentence.get("verdict")
        cls = f"v-{verdict}" if isinstance(verdict, str) else "v-missing"
        label = str(verdict).replace("_", " ") if verdict else "no verdict"
        links = "".join(f'<a href="#{_anchor(row, r)}">{_e(r)}</a>' for r in sentence.get("supporting_ranks") or ())
        parts.append(f'<span class="sent {cls}" title="S{_e(sentence.get("index"))}: {_e(label)}">{_e(text)}</span>'
                     f'<sup class="sn">S{_e(sentence.get("index"))}{" → " + links if links else ""}</sup>')
    parts.append(_e(answer[pos:]))
    return f'<p class="sentences">{"".join(parts)}</p>'


def _flags_html(row: RowResult) -> str:
    items = []
    for sentence in row.problem_sentences:
        index = sentence.get("index")
        cites = [c for c in row.citation_checks if c.get("sentence") == index]
        how = "; ".join(f"cites [{_e(c.get('rank'))}] " + ('<span class="holds">holds</span>' if c.get("holds")
                        else '<span class="fails">does not hold</span>') for c in cites) or "cites nothing"
        items.append(f'<li><span class="fails">S{_e(index)} {_e(sentence.get("verdict"))}</span> — {how}</li>')
    problems = {s.get("index") for s in row.problem_sentences}
    for check in row.failing_citations:
        if check.get("sentence") not in problems:
            items.append(f'<li><span class="fails">S{_e(check.get("sentence"))} cites [{_e(check.get("rank"))}]'
                         "</span>, which does not support it</li>")
    return f'<ul class="flags">{"".join(items)}</ul>' if items else ""


def _documents_html(row: RowResult) -> str:
    if not row.doc_ids:
        return '<p class="legend">nothing retrieved</p>'
    grades = {str(g.get("doc_id")): g.get("grade") for g in row.document_grades}
    cited = {str(c.get("doc_id")) for c in row.citations}
    checks: dict[str, list[str]] = {}
    for check in row.citation_checks:
        mark = '<span class="holds">✓</span>' if check.get("holds") else (
            '<span class="fails">✗</span>' if check.get("holds") is False else "?")
        checks.setdefault(str(check.get("doc_id")), []).append(f"S{_e(check.get('sentence'))} {mark}")
    supports: dict[str, list[str]] = {}
    for sentence in row.sentences:
        for doc_id in sentence.get("supporting_doc_ids") or ():
            supports.setdefault(str(doc_id), []).append(f"S{_e(sentence.get('index'))}")
    items = []
    sources = row.doc_sources or (None,) * len(row.doc_ids)
    for rank, (doc_id, source) in enumerate(zip(row.doc_ids, sources), start=1):
        grade = grades.get(doc_id)
        badge = (f'<span class="grade g-{_e(grade)}" title="grade {_e(grade)}">{_e(grade)}</span>'
                 if isinstance(grade, int) else ('<span class="grade g-none" title="no grade">–</span>'
                                                 if row.document_grades else ""))
        bits = [f"{badge} [{rank}] <code>{_e(doc_id)}</code>" + (f" <span class=legend>{_e(source)}</span>"
                                                                  if source else "")]
        if doc_id in checks:
            bits.append("cited by " + ", ".join(checks[doc_id]))
        elif doc_id in cited:
            bits.append("cited")
        if doc_id in supports:
            bits.append("supports " + ", ".join(supports[doc_id]))
        items.append(f'<li id="{_anchor(row, rank)}">{" · ".join(bits)}</li>')
    return f'<ol class="docs">{"".join(items)}</ol>'


def _answer_html(row: RowResult, metrics: Sequence[str], threshold: float) -> str:
    """One audited answer on one screen width: question and scores, the answer with its sentences
    marked, and beside it the retrieved documents with grades and citation checks."""
    scores = [_score_text(SCORE_LABELS[n], v, threshold) for n, v in row.scores().items()]
    scores += [_score_text(m, row.retrieval_metrics.get(m), None) for m in metrics
               if row.retrieval_metrics.get(m) is not None]
    scores += [_score_text(m, v, None) for m, v in row.graded_metrics.items()]
    if row.citation_checks:
        scores += [_score_text("citation precision", row.citation_precision, threshold),
                   _score_text("citation recall", row.citation_recall, threshold)]
    detail = []
    if row.error:
        detail.append(f'<p class="err"><b>Pipeline error:</b> {_e(row.error)}</p>')
    if row.judge_error:
        detail.append(f'<p class="err"><b>Judge error:</b> {_e(row.judge_error)}</p>')
    if row.reason:
        detail.append(f"<p><b>Reason:</b> {_e(row.reason)}</p>")
    trace = f" · trace {_e(row.trace_id)}" if row.trace_id else ""
    flagged = len(row.problem_sentences) + len({c.get("sentence") for c in row.failing_citations}
                                               - {s.get("index") for s in row.problem_sentences})
    flag = f'<span class="tag d-retrieval">{flagged} flagged</span>' if flagged else ""
    return (f'<article class="answer" id="row-{_e(row.id)}"><header><span class="tag {_DIAG_CLASS[row.diagnosis]}">'
            f'{_e(row.diagnosis)}</span>{flag}<h3>{_e(row.question or "(no question)")}</h3></header>'
            f'<div class="scores">{" · ".join(scores)}</div>'
            f'<div class="agrid"><div><h4>Answer</h4>{_sentences_html(row)}{_flags_html(row)}{"".join(detail)}</div>'
            f"<div><h4>Retrieved documents</h4>{_documents_html(row)}</div></div>"
            f'<div class="rid">{_e(row.id)}{trace}</div></article>')


def render_html(report: EvaluationReport, judge_config: JudgeConfig | None = None) -> str:
    """The report as one self-contained HTML document (no scripts, no external assets); with *judge_config*,
    a "Fitted judge" section draws its before/after (`ragaudit report --judge-config`)."""
    threshold = report.threshold
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(report.title)}</title><style>{_CSS}{SESSION_CSS if report.sessions else ''}</style>"
           "</head><body>",
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
        out.append(f"<tr><td>{_e(SCORE_LABELS.get(s.name, s.name))}</td>{_score_cell(s.mean, threshold)}"
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
                   f"<figcaption>{_e(SCORE_LABELS.get(name, name))}: mean {_fmt(s.mean)} · n={s.n} · "
                   f"missing={s.missing}</figcaption></figure>")
    recall_name = next((m for m in report.metrics if m.startswith("recall")), None)
    has_recall = recall_name is not None and any(
        r.retrieval_metrics.get(recall_name) is not None and r.faithfulness is not None for r in report.rows)
    x_name = recall_name if has_recall and recall_name else "context_relevance"
    out.append(f"<figure>{_scatter_svg(report.rows, x_name)}<figcaption>{_e(x_name)} vs faithfulness "
               "(colour: diagnosis)</figcaption></figure></div>")
    out.append(trend_html(report.rows))  # audit logs: the scores over time (rows with a timestamp)
    if judge_config is not None:
        out.append(fit_html(judge_config, report.judge))

    out.append('<h2>Answers</h2><p class="legend">Each answer sentence is marked by its verdict: '
               '<span class="sent v-supported">supported</span> <span class="sent v-partially_supported">'
               'partially supported</span> <span class="sent v-unsupported">unsupported</span> '
               '<span class="sent v-contradicted">contradicted</span> <span class="sent v-no_claim">no claim'
               '</span> <span class="sent v-missing">no verdict</span>; the numbers after it link to the '
               "documents that support it. Documents show the judge's grade (0 unrelated, 1 related, 2 partly "
               "answers, 3 answers) and whether each citation holds.</p>")
    out.append('<section id="answers">')
    out.extend(_answer_html(row, report.metrics, threshold) for row in report.rows)
    out.append("</section>")
    if report.sessions:
        out.append(sessions_html(report.sessions))
    out.append('<p class="meta">Generated by ragaudit. Scores the judge did not give are shown as – and are '
               "not counted in means.</p></body></html>")
    return "\n".join(out)
