"""``ragaudit calibrate --fit``: thresholds and few-shot examples fitted to labels, held out honestly, and the
fitted judge config applied by a FittedJudge inside a real Auditor and by ``ragaudit worker --judge-config``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ragaudit import Auditor
from ragaudit.cli import build_parser, main
from ragaudit.errors import ConfigurationError, RagAuditError
from ragaudit.evaluation.fit import MIN_PER_CLASS, choose_threshold, fit_judge, split_ids
from ragaudit.judges import FakeJudge, LexicalJudge, RagJudge
from ragaudit.judges.chat import ChatRagJudge
from ragaudit.judges.fitted import FewShotExample, FewShotProtocol, FittedJudge, JudgeConfig
from ragaudit.judges.protocols import JudgeProtocol, ThreeScoreProtocol
from ragaudit.records import Judgement, JudgeRequest, RagTurn, RetrievedDoc
from tests.support.llm_server import LLMServer, judgement_json

# -- the threshold, on hand-made labels ------------------------------------------------------------


def test_threshold_for_balanced_accuracy_is_exact() -> None:
    # Human passes score 0.3, 0.35, 0.6, 0.8; human fails 0.1, 0.2, 0.4. Candidates are the lowest score
    # and the midpoints: at 0.25 the judge passes all 4 passes and fails 2 of 3 fails (bal. acc. 5/6);
    # at 0.5 (the default) it passes 2 of 4 and fails all 3 (0.75). Nothing else beats 5/6.
    human = [True, True, True, True, False, False, False]
    scores = [0.3, 0.35, 0.6, 0.8, 0.1, 0.2, 0.4]
    assert choose_threshold(human, scores) == pytest.approx(0.25)


def test_ties_go_to_the_candidate_nearest_the_default() -> None:
    # Perfectly separated: every candidate between 0.2 and 0.7 is as good; 0.45 is the only midpoint there.
    assert choose_threshold([False, False, True, True], [0.1, 0.2, 0.7, 0.9]) == pytest.approx(0.45)
    # Two equally good midpoints (0.3 and 0.65 give bal. acc. 0.75; 0.5 gives 0.5): the one nearer 0.5 wins.
    assert choose_threshold([False, True, False, True], [0.2, 0.4, 0.6, 0.7]) == pytest.approx(0.65)


def test_target_precision_takes_the_lowest_threshold_that_reaches_it() -> None:
    human = [False, True, False, True, True, True]
    scores = [0.2, 0.3, 0.5, 0.6, 0.7, 0.9]
    # precision 1.0 first holds at 0.55 (0.6, 0.7, 0.9 all human passes); 0.8 already at 0.25 (4 of 5)
    assert choose_threshold(human, scores, target_precision=1.0) == pytest.approx(0.55)
    assert choose_threshold(human, scores, target_precision=0.8) == pytest.approx(0.25)
    assert choose_threshold(human, scores, target_precision=0.9) == pytest.approx(0.55)
    assert choose_threshold([False, False], [0.1, 0.9], target_precision=0.5) is None


def labelled(n_pass: int, n_fail: int) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float | None]]]:
    """A lenient judge: human passes score 0.8-0.9, human fails 0.55-0.65 (all pass at 0.5)."""
    labels: dict[str, dict[str, float]] = {}
    judged: dict[str, dict[str, float | None]] = {}
    for i in range(n_pass):
        labels[f"p{i}"] = {"faithfulness": 1.0}
        judged[f"p{i}"] = {"faithfulness": 0.8 + 0.1 * (i % 2), "context_relevance": 0.5, "answer_relevance": None}
    for i in range(n_fail):
        labels[f"f{i}"] = {"faithfulness": 0.0}
        judged[f"f{i}"] = {"faithfulness": 0.55 + 0.1 * (i % 2), "context_relevance": 0.5, "answer_relevance": None}
    return labels, judged


def test_fit_fixes_a_lenient_judge_on_the_held_out_part() -> None:
    labels, judged = labelled(20, 20)
    result = fit_judge(labels, judged)
    config = result.config
    assert config.thresholds == {"faithfulness": pytest.approx(0.725)}  # midway between 0.65 and 0.8
    before, after = config.agreement["faithfulness"]["before"], config.agreement["faithfulness"]["after"]
    assert before["balanced_accuracy"] == 0.5 and before["kappa"] == 0.0
    assert after["balanced_accuracy"] == 1.0 and after["kappa"] == 1.0
    assert after["n"] == len(result.held_out_ids) == 12  # 30% of each class of 20, stratified
    assert config.label_counts["faithfulness"] == {"pass": 20, "fail": 20, "fit": 28, "held_out": 12}


def test_held_out_labels_never_decide_the_threshold() -> None:
    labels, judged = labelled(20, 20)
    first = fit_judge(labels, judged, seed=3)
    # Change every held-out judgement to scores that would pull any threshold fitted on them elsewhere
    poisoned = dict(judged)
    for key in first.held_out_ids:
        poisoned[key] = {"faithfulness": 0.05 if key.startswith("p") else 0.99}
    again = fit_judge(labels, poisoned, seed=3)
    assert again.held_out_ids == first.held_out_ids
    assert again.config.thresholds == first.config.thresholds
    assert again.config.agreement["faithfulness"]["after"]["balanced_accuracy"] == 0.0  # measured on them only
    assert set(first.fit_ids).isdisjoint(first.held_out_ids)
    assert set(first.fit_ids) | set(first.held_out_ids) == set(labels)


def test_split_is_seeded_and_stratified() -> None:
    labels = {f"p{i}": {"faithfulness": 1.0} for i in range(10)} | {f"f{i}": {"faithfulness": 0.0} for i in range(30)}
    fit, held = split_ids(labels, holdout=0.3, seed=7)
    assert (fit, held) == split_ids(labels, holdout=0.3, seed=7)
    assert sum(k.startswith("p") for k in held) == 3 and sum(k.startswith("f") for k in held) == 9
    assert split_ids(labels, holdout=0.3, seed=8)[1] != held
    with pytest.raises(ConfigurationError, match="holdout"):
        split_ids(labels, holdout=1.0)


def test_few_shot_examples_are_fit_disagreements_only() -> None:
    labels, judged = labelled(20, 20)
    texts = {key: {"query": f"q {key}", "answer": f"a {key}", "context": f"c {key}"} for key in labels}
    result = fit_judge(labels, judged, texts=texts, max_examples=3)
    ids = [e.id for e in result.config.examples]
    assert len(ids) == 3
    assert set(ids) <= set(result.fit_ids) and set(ids).isdisjoint(result.held_out_ids)
    # only the fails disagree (the lenient judge passes them at 0.5)
    assert all(i.startswith("f") for i in ids)
    assert result.config.examples[0].labels == {"faithfulness": 0.0}


# -- no labels, too few ------------------------------------------------------------------------------


def test_no_labels_and_too_few_say_what_to_do() -> None:
    with pytest.raises(RagAuditError, match="no labels"):
        fit_judge({}, {"t": {"faithfulness": 0.5}})
    labels, judged = labelled(12, 3)
    with pytest.raises(RagAuditError) as caught:
        fit_judge(labels, judged)
    message = str(caught.value)
    assert "too few labels" in message and "12 pass and 3 fail" in message
    assert f"needs {MIN_PER_CLASS} of each" in message and f"label {MIN_PER_CLASS - 3} more fail answers" in message
    with pytest.raises(RagAuditError, match="no labelled id has a judgement"):
        fit_judge({"x": {"faithfulness": 1.0}}, {"y": {"faithfulness": 1.0}})


def test_a_dimension_short_of_labels_is_noted_while_another_is_fitted() -> None:
    labels, judged = labelled(20, 20)
    for i, key in enumerate(sorted(labels)[:5]):
        labels[key] = {**labels[key], "context_relevance": 1.0 if i % 2 else 0.0}
    result = fit_judge(labels, judged)
    assert list(result.config.thresholds) == ["faithfulness"]
    assert any(note.startswith("context_relevance: 2 pass and 3 fail") for note in result.notes)


# -- the config file -----------------------------------------------------------------------------------


def test_config_round_trip(tmp_path: Path) -> None:
    labels, judged = labelled(20, 20)
    texts = {key: {"query": "q", "answer": "a", "context": "c"} for key in labels}
    config = fit_judge(labels, judged, texts=texts, judge="chat:m").config
    path = tmp_path / "judge-config.json"
    config.save(path)
    data = json.loads(path.read_text())
    assert data["version"] == 1 and data["judge"] == "chat:m"
    assert data["thresholds"]["faithfulness"] == pytest.approx(0.725)
    assert data["agreement"]["faithfulness"]["after"]["kappa"] == 1.0
    loaded = JudgeConfig.load(path)
    assert loaded.to_dict() == config.to_dict() and loaded.digest() == config.digest()


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"),
    ("[]", "must be a JSON object"),
    ('{"thresholds": {"faithfulness": 0.5}}', 'no "version"'),
    ('{"version": 2, "thresholds": {"faithfulness": 0.5}}', "version 2 is not supported"),
    ('{"version": 1}', 'no "thresholds"'),
    ('{"version": 1, "thresholds": {}}', "no dimension has a threshold"),
    ('{"version": 1, "thresholds": {"faithfulness": 1.5}}', "faithfulness must be a number in"),
    ('{"version": 1, "thresholds": {"fluency": 0.5}}', "unknown dimension 'fluency'"),
    ('{"version": 1, "thresholds": {"faithfulness": 0.5}, "extra": 1}', "unknown keys"),
    ('{"version": 1, "thresholds": {"faithfulness": 0.5}, "examples": [{"id": "x"}]}', "example 1"),
])
def test_bad_config_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=re.escape(message)) as caught:
        JudgeConfig.load(path)
    assert "bad.json" in str(caught.value)
    with pytest.raises(ConfigurationError, match="cannot be read"):
        JudgeConfig.load(tmp_path / "missing.json")


# -- the fitted judge in an Auditor -----------------------------------------------------------------


def make_turn(i: int) -> RagTurn:
    return RagTurn(turn_id=f"turn-{i}", query=f"question {i}", answer=f"answer {i}",
                   documents=(RetrievedDoc(id=f"d{i}", content=f"doc {i}", rank=1),))


def test_fitted_fake_judge_applied_by_an_auditor(tmp_path: Path) -> None:
    config = JudgeConfig(thresholds={"faithfulness": 0.725}, judge="fake")
    judge = FittedJudge(FakeJudge(lambda r: {"faithfulness": 0.7 if r.query.endswith("1") else 0.9}), config)
    assert isinstance(judge, RagJudge)
    seen: dict[str, Judgement] = {}
    log = tmp_path / "audit.jsonl"
    with Auditor(judge, audit_log=log, on_judgement=lambda t, j: seen.__setitem__(t.turn_id, j)) as auditor:
        for i in range(2):
            auditor.submit(make_turn(i))
        assert auditor.force_flush(10)
    assert seen["turn-1"].faithfulness == 0.7  # the score stays the judge's
    assert seen["turn-1"].details["fitted"]["passed"] == {"faithfulness": False}
    assert seen["turn-0"].details["fitted"]["passed"] == {"faithfulness": True}
    line = next(json.loads(x) for x in log.read_text().splitlines() if '"turn-1"' in x)
    assert line["details"]["fitted"]["thresholds"] == {"faithfulness": 0.725}
    assert line["details"]["fitted"]["config"] == config.digest()


def test_fitted_lexical_judge_from_a_file_and_a_mismatched_judge(tmp_path: Path) -> None:
    path = tmp_path / "judge-config.json"
    JudgeConfig(thresholds={"faithfulness": 0.9, "answer_relevance": 0.2}, judge="lexical").save(path)
    judge = FittedJudge.load(path, judge=LexicalJudge())
    seen: list[Judgement] = []
    with Auditor(judge, audit_log=None, on_judgement=lambda t, j: seen.append(j)) as auditor:
        auditor.submit(RagTurn(turn_id="t", query="When did the Rhine bridge open?", answer="It opened in 1932.",
                               documents=(RetrievedDoc(id="d", content="The Rhine bridge opened in 1932.", rank=1),)))
        assert auditor.force_flush(10)
    [judgement] = seen
    fitted = judgement.details["fitted"]
    assert fitted["examples"] == 0  # a judge without a prompt is shown none
    assert fitted["passed"]["faithfulness"] == (judgement.faithfulness is not None and judgement.faithfulness >= 0.9)
    assert judge.config_key() == f"{LexicalJudge().config_key()}|fitted:{judge.config.digest()}"
    with pytest.raises(ConfigurationError, match="fitted for judge 'lexical', not 'fake'"):
        FittedJudge.load(path, judge=FakeJudge(lambda r: {}))
    FittedJudge.load(path, judge=FakeJudge(lambda r: {}), check_judge=False)


def test_failed_judgements_pass_unchanged() -> None:
    judge = FittedJudge(FakeJudge(lambda r: 1 / 0), JudgeConfig(thresholds={"faithfulness": 0.5}))
    judgement = judge.judge(JudgeRequest(query="q", answer="a", context="c"))
    assert judgement.error is not None and "fitted" not in judgement.details


# -- few-shot examples through the judge protocol -------------------------------------------------------


EXAMPLE = FewShotExample(id="x1", query="Who built the bridge?", answer="Napoleon built it.",
                         context="The bridge was built by the city in 1932.", labels={"faithfulness": 0.0},
                         judge_scores={"faithfulness": 0.9})


def test_few_shot_examples_reach_the_chat_judge_prompt() -> None:
    with LLMServer(default=judgement_json(0.4, 0.8, 0.7)) as server:
        inner = ChatRagJudge("m", base_url=server.base_url, timeout_s=5.0, max_retries=0, protocol="three-score")
        plain_version = inner.protocol_version
        config = JudgeConfig(thresholds={"faithfulness": 0.3}, examples=(EXAMPLE,), judge=inner.name)
        judge = FittedJudge(inner, config)
        try:
            judgement = judge.judge(JudgeRequest(query="When?", answer="In 1932.", context="It opened in 1932."))
        finally:
            judge.close()
        [request] = server.requests
    system = request.messages[0]["content"]
    assert "Examples the team labelled" in system and "The human's scores: faithfulness 0 (fail)" in system
    assert re.search(r"<<<ragaudit:example_answer:\w+>>>\nNapoleon built it\.\n<<<end:example_answer:", system)
    assert judgement.faithfulness == 0.4 and judgement.details["fitted"]["passed"]["faithfulness"] is True
    assert judgement.details["fitted"]["examples"] == 1
    assert judgement.identity is not None and judgement.identity.protocol_version != plain_version
    assert judgement.identity.protocol_version.startswith(plain_version + "+examples/")


def test_few_shot_protocol_is_a_judge_protocol() -> None:
    protocol = FewShotProtocol(ThreeScoreProtocol(), [EXAMPLE])
    assert isinstance(protocol, JudgeProtocol)
    messages = protocol.messages(JudgeRequest(query="q", answer="a", context="c"), max_context_chars=1000)
    assert [m["role"] for m in messages] == ["system", "user"]
    with pytest.raises(ConfigurationError, match="one or more FewShotExample"):
        FewShotProtocol(ThreeScoreProtocol(), [])


# -- the command line -------------------------------------------------------------------------------------


def write_inputs(tmp_path: Path, n_pass: int, n_fail: int) -> tuple[Path, Path]:
    labels, judged = labelled(n_pass, n_fail)
    label_path = tmp_path / "labels.jsonl"
    label_path.write_text("".join(json.dumps({"id": k, **v}) + "\n" for k, v in labels.items()))
    log_path = tmp_path / "audit.jsonl"
    rows: list[dict[str, Any]] = [{"turn_id": k, "judge": "chat:m", "query": f"q {k}", "answer": f"a {k}",
                                   "documents": [{"id": "d", "content": f"c {k}"}], **v} for k, v in judged.items()]
    log_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return label_path, log_path


def test_cli_fit_writes_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    label_path, log_path = write_inputs(tmp_path, 20, 20)
    out = tmp_path / "judge-config.json"
    assert main(["calibrate", str(label_path), str(log_path), "--fit", "--out", str(out), "--max-examples", "2"]) == 0
    printed = capsys.readouterr().out
    assert "agreement on the held-out labels only" in printed and "0.500 -> 0.725" in printed
    config = JudgeConfig.load(out)
    assert config.judge == "chat:m" and len(config.examples) == 2
    assert config.examples[0].context == "[1] c " + config.examples[0].id


def test_cli_fit_too_few_labels_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    label_path, log_path = write_inputs(tmp_path, 4, 11)
    assert main(["calibrate", str(label_path), str(log_path), "--fit", "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert "too few labels" in err and f"label {MIN_PER_CLASS - 4} more pass answers" in err
    assert not (tmp_path / "c.json").exists()


def test_worker_judge_config_flag_parses(tmp_path: Path) -> None:
    args = build_parser().parse_args(["worker", "--judge", "lexical", "--judge-config", str(tmp_path / "c.json")])
    assert args.judge_config == str(tmp_path / "c.json")
    assert build_parser().parse_args(["worker"]).judge_config is None


def test_worker_refuses_a_bad_judge_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c.json"
    bad.write_text('{"version": 1}')
    pytest.importorskip("ragaudit.integrations.otlp")
    assert main(["worker", "--judge", "lexical", "--judge-config", str(bad), "--port", "0"]) == 2
    assert 'no "thresholds"' in capsys.readouterr().err
