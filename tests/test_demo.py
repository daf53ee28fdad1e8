"""``ragaudit demo`` end to end (both frameworks, offline and with a loopback model), its parts, examples."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragaudit import cli
from ragaudit.demo import kb
from ragaudit.demo.embedding import HashingEmbedder, chroma_embedding_function
from ragaudit.demo.generator import (
    GENERATOR_SYSTEM_PROMPT,
    STANDIN_LABEL,
    STANDIN_MODEL,
    Passage,
    extractive_answer,
    format_context,
    format_user_prompt,
    parse_prompt,
)
from ragaudit.tracing import read_audit_log, read_spans
from tests.support.llm_server import LLMServer, judgement_json
from tests.support.otlp_receiver import OTLPReceiver

ROOT = Path(__file__).resolve().parents[1]
_ROW_RE = re.compile(r"^(q[1-8]) {2,}(.+)$", re.MULTILINE)
_MARKER_RE = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_DECLINE = "The retrieved documents do not say"
_ISOLATED_ENV = ("OPENAI_", "OTEL_EXPORTER_OTLP", "RAGAUDIT_")


@dataclass
class DemoRun:
    stdout: str
    traces: Path
    audit: Path

    def rows(self) -> dict[str, list[str]]:
        """Table rows by question id: [question, faithful, ctx rel, ans rel, recall, gNDCG, gP, grades, cited,
        cite P]."""
        return {m.group(1): re.split(r" {2,}", m.group(2).rstrip()) for m in _ROW_RE.finditer(self.stdout)}

    def audit_by_question(self) -> dict[str, dict[str, Any]]:
        ids = {q.text: q.id for q in kb.QUESTIONS}
        return {ids[line["query"]]: line for line in read_audit_log(self.audit)}

    def section(self, title: str) -> str:
        start = self.stdout.index(title)
        end = self.stdout.find("\n\n", start)
        return self.stdout[start : end if end >= 0 else None]


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """No OPENAI_*/OTLP variables from the outer environment, plus *values*."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(_ISOLATED_ENV):
                mp.delenv(name)
        for name, value in values.items():
            mp.setenv(name, value)
        yield


def _run_demo(tmp: Path, *args: str, **env: str) -> DemoRun:
    traces, audit = tmp / "traces.jsonl", tmp / "audit.jsonl"
    out = io.StringIO()
    with _env(**env), contextlib.redirect_stdout(out):
        code = cli.main(["demo", "--traces", str(traces), "--audit-log", str(audit), *args])
    assert code == 0, out.getvalue()
    return DemoRun(out.getvalue(), traces, audit)


def _subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ISOLATED_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def langchain_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return _run_demo(tmp_path_factory.mktemp("demo-langchain"))


@pytest.fixture(scope="module")
def llamaindex_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return _run_demo(tmp_path_factory.mktemp("demo-llamaindex"), "--framework", "llamaindex")


# -- the knowledge base and its dataset ----------------------------------------------------------


def test_kb_has_five_documents_eight_questions_and_consistent_dataset() -> None:
    assert [d.id for d in kb.DOCUMENTS] == [
        "kb-refund_eligibility", "kb-exchanges", "kb-electronics", "kb-shipping", "kb-gifts"]
    assert {d.source for d in kb.DOCUMENTS} == {"return_policy.pdf"}
    assert [q.id for q in kb.QUESTIONS] == [f"q{i}" for i in range(1, 9)]
    doc_ids = {d.id for d in kb.DOCUMENTS}
    assert all(set(rel) <= doc_ids for rel in kb.QRELS.values())
    assert not kb.QRELS["q6"] and not kb.QRELS["q7"]
    rows = kb.dataset_rows()
    assert [r["question"] for r in rows] == [q.text for q in kb.QUESTIONS]
    assert [sorted(r["relevant_ids"]) for r in rows] == [sorted(kb.QRELS[q.id]) for q in kb.QUESTIONS]
    assert all(r["reference_answer"] for r in rows)


# -- the offline embedding ------------------------------------------------------------------------


def test_embedding_is_deterministic_unit_length_and_retrieves_by_words() -> None:
    embedder = HashingEmbedder()
    a = embedder.embed("Are size exchanges on clothing free?")
    assert a == HashingEmbedder().embed("Are size exchanges on clothing free?")
    assert len(a) == 256 and math.isclose(math.sqrt(sum(x * x for x in a)), 1.0, rel_tol=1e-9)
    assert math.isclose(sum(x * x for x in embedder.embed("the of and")), 1.0, rel_tol=1e-9)

    def similarity(q: str, d: str) -> float:
        return sum(x * y for x, y in zip(embedder.embed(q), embedder.embed(d)))

    exchanges, gifts = (next(d.text for d in kb.DOCUMENTS if d.section == s) for s in ("exchanges", "gifts"))
    assert similarity("size exchange for clothes", exchanges) > similarity("size exchange for clothes", gifts)


def test_embedding_is_the_same_in_another_process() -> None:
    code = "from ragaudit.demo.embedding import HashingEmbedder as E; print(E().embed('refund window')[:8])"
    out = subprocess.run([sys.executable, "-c", code], env=_subprocess_env(), capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert json.loads(out) == pytest.approx(HashingEmbedder().embed("refund window")[:8], abs=1e-12)


def test_chroma_embedding_function_follows_the_protocol_without_warnings() -> None:
    import chromadb

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ef = chroma_embedding_function(64)
        assert not ef.is_legacy()
        collection = chromadb.EphemeralClient().create_collection(f"ragaudit-test-ef-{uuid.uuid4().hex[:8]}",
                                                                  embedding_function=ef)
        collection.add(ids=[d.id for d in kb.DOCUMENTS], documents=[d.text for d in kb.DOCUMENTS])
        found = collection.query(query_texts=["Are size exchanges on clothing free?"], n_results=1)
    assert found["ids"] == [["kb-exchanges"]]
    assert type(ef).build_from_config(ef.get_config()).get_config() == {"dim": 64}
    assert collection.configuration["hnsw"]["space"] == "cosine"


# -- the stand-in generator -----------------------------------------------------------------------


def _doc(section: str) -> kb.KBDocument:
    return next(d for d in kb.DOCUMENTS if d.section == section)


def test_prompt_round_trips_question_and_numbered_passages() -> None:
    docs = [_doc("electronics"), _doc("shipping")]
    prompt = format_user_prompt("Is shipping free?", format_context([(d.text, d.metadata) for d in docs]))
    question, passages = parse_prompt(prompt)
    assert question == "Is shipping free?"
    assert [(p.number, p.text) for p in passages] == [(1, docs[0].text), (2, docs[1].text)]
    assert passages[1].header == "(source: return_policy.pdf, section: shipping)"


def test_standin_quotes_matching_sentences_with_citations() -> None:
    passages = [Passage(1, _doc("gifts").text), Passage(2, _doc("exchanges").text)]
    answer = extractive_answer("Are size exchanges on clothing free?", passages)
    assert answer == f"{STANDIN_LABEL} Size exchanges on clothing are free of charge. [2]"


def test_standin_declines_when_nothing_matches_and_names_the_missing_words() -> None:
    passages = [Passage(1, _doc("refund_eligibility").text), Passage(2, _doc("gifts").text)]
    answer = extractive_answer("Do you ship to Mars by rocket?", passages)
    assert answer.startswith(f"{STANDIN_LABEL} {_DECLINE}")
    assert "Mars" in answer and "rocket" in answer
    assert extractive_answer("What is the refund window?", []).endswith("nothing was retrieved.")


def _answer_sentences(answer: str) -> list[str]:
    assert answer.startswith(STANDIN_LABEL)
    body = _MARKER_RE.sub("", answer[len(STANDIN_LABEL) :]).strip()
    return [s for s in re.split(r"(?<=[.!?])\s+", body) if s and not s.startswith(_DECLINE)]


# -- ragaudit demo (LangChain) ---------------------------------------------------------------------


def test_demo_prints_header_and_a_row_per_question(langchain_run: DemoRun) -> None:
    out = langchain_run.stdout
    assert "LangChain" in out and STANDIN_MODEL in out and "OFFLINE EXTRACTIVE STAND-IN" in out
    assert "judge:     lexical" in out
    rows = langchain_run.rows()
    assert sorted(rows) == [q.id for q in kb.QUESTIONS]
    assert all(len(cells) == 10 for cells in rows.values()), rows
    assert rows["q1"][0] == "What is the refund window for ordinary purch…"
    assert rows["q6"][4] == "—" and rows["q7"][4] == "—"  # no relevant document: recall undefined
    assert rows["q1"][4] == "1.00"
    assert "refund_eligibility" in rows["q1"][8] and "exchanges" in rows["q2"][8]
    # the stand-in cites after the sentence ("... free of charge. [2]"): the citation holds (issue 23)
    lines = langchain_run.audit_by_question()
    assert ". [" in lines["q2"]["answer"] and rows["q2"][9] == "1.00"
    assert all(cells[9] in ("1.00", "—") for cells in rows.values()), rows
    assert "a weak screen, not a verdict" in out and "ChatRagJudge (full audit)" in out


def test_demo_prints_graded_ndcg_and_grades_low_for_uncovered_questions(langchain_run: DemoRun) -> None:
    rows = langchain_run.rows()
    lines = langchain_run.audit_by_question()
    for qid, line in lines.items():
        # the printed graded NDCG@2 is the audit line's (2 documents: ndcg@10 == ndcg@2)
        assert rows[qid][5] == f"{line['graded_metrics']['graded_ndcg@10']:.2f}", qid
        assert rows[qid][7] == " ".join(str(g["grade"]) for g in line["document_grades"])
        assert all(s["method"] == "lexical" for s in line["sentences"])
    for qid in ("q6", "q7"):  # not covered by the knowledge base: no document graded as answering
        assert all(g["grade"] <= 1 for g in lines[qid]["document_grades"]), lines[qid]["document_grades"]
        assert rows[qid][6] == "0.00"  # graded P@2
    for qid in ("q1", "q2", "q5"):
        assert lines[qid]["document_grades"][0]["grade"] == 3
    assert "Unsupported or contradicted sentences: none" in langchain_run.stdout


@pytest.fixture(scope="module")
def careless_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return _run_demo(tmp_path_factory.mktemp("demo-careless"), "--careless")


def test_careless_generator_mistakes_are_each_caught_offline(careless_run: DemoRun) -> None:
    out = careless_run.stdout
    assert "OFFLINE CARELESS GENERATOR with SCRIPTED MISTAKES" in out
    caught = careless_run.section("Planted mistakes")
    assert caught.count("CAUGHT") == 3 and "MISSED" not in caught, caught
    lines = careless_run.audit_by_question()
    assert "60 days" in lines["q1"]["answer"]  # the wrong number (the document says 30)
    verdicts = {q: [s["verdict"] for s in lines[q]["sentences"]] for q in lines}
    assert verdicts["q1"][0] == "unsupported"
    assert "unsupported" in verdicts["q5"] and "cash refund" in lines["q5"]["answer"]
    # q2: the sentence is supported, but by the document it does not cite
    assert verdicts["q2"] == ["supported"]
    assert [c["holds"] for c in lines["q2"]["citation_checks"]] == [False]
    assert lines["q2"]["citation_precision"] == 0.0
    for qid in ("q3", "q4", "q8"):  # untouched answers stay supported
        assert "unsupported" not in verdicts[qid], (qid, verdicts[qid])
    problems = careless_run.section("Unsupported or contradicted sentences")
    assert "60 days" in problems and "does NOT hold" in problems and "cash refund" in problems


def test_report_lists_the_careless_mistakes_first(careless_run: DemoRun) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["report", str(careless_run.audit), "--limit", "8"]) == 0
    text = out.getvalue()
    head = text[: text.index("\n  1. ")]
    assert "3 unsupported or contradicted sentence(s) and wrong citation(s)" in head, head
    assert "60 days" in head and "cash refund" in head and "which does not support it" in head
    first = [line for line in text[text.index("\n  1. "):text.index("\n  4. ")].splitlines()
             if line.startswith("     Q: ")]
    flagged = {q.text for q in kb.QUESTIONS if q.id in ("q1", "q2", "q5")}
    assert {line[len("     Q: "):] for line in first} == flagged


def test_demo_scores_uncovered_questions_lower_and_says_why(langchain_run: DemoRun) -> None:
    lines = langchain_run.audit_by_question()
    rows = langchain_run.rows()
    for score, column in (("context_relevance", 2), ("answer_relevance", 3)):
        covered = min(lines[q][score] for q in ("q1", "q2"))
        uncovered = max(lines[q][score] for q in ("q6", "q7"))
        assert uncovered < covered, (score, {q: lines[q][score] for q in lines})
        for qid in lines:
            assert rows[qid][column] == f"{lines[qid][score]:.2f}"
    context = langchain_run.section("Lowest context relevance")
    answer = langchain_run.section("Lowest answer relevance")
    assert "q6" in context and "'international'" in context and "'orders'" in context
    assert "q7" in context and "'discount'" in context
    assert "q6" in answer and "declines" in answer


def test_demo_traces_have_turn_retrieval_chat_and_judge_spans(langchain_run: DemoRun) -> None:
    spans = read_spans(langchain_run.traces)
    names = [s["name"] for s in spans]
    assert names.count("ragaudit.turn") == 8 and names.count("ragaudit.judge") == 8
    assert sum(n.startswith("retrieval") for n in names) == 8
    assert sum(n.startswith("chat") for n in names) == 8
    turns = {s["trace_id"]: s for s in spans if s["name"] == "ragaudit.turn"}
    assert len(turns) == 8  # one trace per question
    for span in spans:
        if span["name"] != "ragaudit.turn":  # every other span sits in its question's trace, under the turn
            assert span["parent_span_id"] == turns[span["trace_id"]]["span_id"], span["name"]
    assert f"Spans:     {len(spans)} written to {langchain_run.traces}" in langchain_run.stdout


def test_demo_audit_log_has_a_line_per_question_with_ground_truth(langchain_run: DemoRun) -> None:
    lines = read_audit_log(langchain_run.audit)
    assert len(lines) == 8
    by_question = langchain_run.audit_by_question()
    assert set(by_question) == {q.id for q in kb.QUESTIONS}
    assert by_question["q1"]["model"] == STANDIN_MODEL and by_question["q1"]["judge"] == "lexical"
    assert sorted(by_question["q3"]["relevant_ids"]) == ["kb-electronics", "kb-refund_eligibility"]
    assert not by_question["q6"]["relevant_ids"]
    assert by_question["q2"]["documents"][0]["id"] == "kb-exchanges"
    assert "8 lines appended" in langchain_run.stdout


def test_demo_generator_only_uses_retrieved_text(langchain_run: DemoRun) -> None:
    for qid, line in langchain_run.audit_by_question().items():
        documents = [d["content"] for d in line["documents"]]
        assert len(documents) == 2
        sentences = _answer_sentences(line["answer"])
        if qid == "q6":
            assert sentences == [] and _DECLINE in line["answer"]
        for sentence in sentences:
            assert any(sentence in doc for doc in documents), (qid, sentence)


# -- ragaudit demo --framework llamaindex -------------------------------------------------------------


def test_llamaindex_demo_runs_the_same_questions_with_comparable_scores(
    langchain_run: DemoRun, llamaindex_run: DemoRun
) -> None:
    assert "LlamaIndex" in llamaindex_run.stdout
    rows = llamaindex_run.rows()
    assert sorted(rows) == [q.id for q in kb.QUESTIONS]
    lc, li = langchain_run.audit_by_question(), llamaindex_run.audit_by_question()
    assert len(read_audit_log(llamaindex_run.audit)) == 8
    for qid in lc:
        assert [d["id"] for d in li[qid]["documents"]] == [d["id"] for d in lc[qid]["documents"]], qid
        for score in ("faithfulness", "context_relevance", "answer_relevance"):
            assert li[qid][score] == pytest.approx(lc[qid][score], abs=0.1), (qid, score)
        assert li[qid]["framework"] != lc[qid]["framework"]
    names = [s["name"] for s in read_spans(llamaindex_run.traces)]
    assert names.count("ragaudit.turn") == 8 and names.count("ragaudit.judge") == 8
    for qid, line in li.items():
        for sentence in _answer_sentences(line["answer"]):
            assert any(sentence in d["content"] for d in line["documents"]), (qid, sentence)


# -- the real-model path, against the loopback server -----------------------------------------------

_JUDGE_SYSTEM = "You are a strict RAG evaluator"


def _scripted(request: Mapping[str, Any]) -> str:
    messages = request.get("messages") or []
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
    text = "\n".join(str(m.get("content", "")) for m in messages)
    if system.startswith(_JUDGE_SYSTEM):
        if "free replacement" in text:
            return judgement_json(0.2, 0.9, 0.6,
                                  reason="The answer promises a free replacement the context never mentions.")
        return judgement_json(0.95, 0.85, 0.9, reason="Grounded in the retrieved policy.")
    assert system == GENERATOR_SYSTEM_PROMPT
    if "digital download" in text.rpartition("Question: ")[2]:
        return "Yes, you get a full refund within 30 days and a free replacement [1]."
    return "The policy covers this in the retrieved documents [1]."


@pytest.mark.timeout(120)
@pytest.mark.parametrize("framework", ["langchain", "llamaindex"])
def test_demo_uses_a_real_model_and_the_chat_judge_when_configured(framework: str, tmp_path: Path) -> None:
    with LLMServer(rule=_scripted) as server:
        run = _run_demo(tmp_path, "--framework", framework, OPENAI_BASE_URL=server.base_url,
                        OPENAI_API_KEY="test-key", RAGAUDIT_MODEL="loopback-model")
        requests = server.requests
    systems = [next(m["content"] for m in r.messages if m["role"] == "system") for r in requests]
    assert sum(s == GENERATOR_SYSTEM_PROMPT for s in systems) == 8
    assert sum(s.startswith(_JUDGE_SYSTEM) for s in systems) == 8
    assert {r.body["model"] for r in requests if r.messages[0]["content"] == GENERATOR_SYSTEM_PROMPT} == {
        "loopback-model"}
    assert "generator: loopback-model" in run.stdout and "OFFLINE EXTRACTIVE" not in run.stdout
    lines = run.audit_by_question()
    assert lines["q4"]["faithfulness"] == pytest.approx(0.2)
    assert lines["q1"]["faithfulness"] == pytest.approx(0.95)
    assert lines["q4"]["model"] == "loopback-model" and lines["q4"]["judge"] != "lexical"
    unfaithful = run.section("Faithfulness < 0.5")
    assert "q4" in unfaithful and "free replacement the context never mentions" in unfaithful
    assert "q1" not in unfaithful
    assert run.rows()["q4"][1] == "0.20"
    # the scripted judge gives three scores only: no sentence is claimed supported
    assert "Unsupported or contradicted sentences: none found;" in run.stdout and "got no verdict" in run.stdout


@pytest.mark.timeout(120)
def test_offline_flag_ignores_a_configured_endpoint(tmp_path: Path) -> None:
    with LLMServer(rule=_scripted) as server:
        run = _run_demo(tmp_path, "--offline", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="test-key")
        assert server.requests == []
    assert "OFFLINE EXTRACTIVE STAND-IN" in run.stdout and len(run.rows()) == 8


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_demo_sends_spans_over_otlp_when_asked(how: str, tmp_path: Path) -> None:
    with OTLPReceiver() as receiver:
        if how == "flag":
            run = _run_demo(tmp_path, "--otlp-endpoint", receiver.endpoint)
        else:
            run = _run_demo(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
        spans = receiver.wait_for_spans(32, timeout=30)
    names = [s["name"] for s in spans]
    assert names.count("ragaudit.turn") == 8 and names.count("ragaudit.judge") == 8
    assert {s["resource"].get("service.name") for s in spans} == {"ragaudit-demo"}
    assert f"OTLP/HTTP to {receiver.traces_url}" in run.stdout
    assert len(read_spans(run.traces)) == len(spans)  # the file gets the same spans


# -- the command line and the examples, as a user runs them ----------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_demo_command_in_a_fresh_process(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ragaudit.cli", "demo"], cwd=tmp_path, env=_subprocess_env(),
                          capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr
    assert len(_ROW_RE.findall(proc.stdout)) == 8
    assert len(read_audit_log(tmp_path / "ragaudit-audit.jsonl")) == 8
    assert (tmp_path / "ragaudit-traces.jsonl").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("script", ["langchain_app.py", "llamaindex_app.py"])
def test_example_runs_offline(script: str, tmp_path: Path) -> None:
    path = ROOT / "examples" / script
    assert len(path.read_text(encoding="utf-8").splitlines()) < 40
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=_subprocess_env(),
                          capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr
    assert STANDIN_LABEL in proc.stdout and "faithfulness=" in proc.stdout
    assert len(read_audit_log(tmp_path / "ragaudit-audit.jsonl")) == 2
    assert read_spans(tmp_path / "ragaudit-traces.jsonl")
