"""The review round trip with a real Phoenix: select -> Phoenix dataset (its REST API) -> a person labels the
examples (Phoenix's own ``patchDatasetExamples`` mutation, what its UI sends) -> labels read back ->
``ragaudit calibrate --fit`` fits the judge on them -> an Auditor judges with the fitted judge. Skipped with
the reason when Phoenix is not installed (``make test`` makes ``.venv-phoenix``; ``RAGAUDIT_PHOENIX_BIN``
points elsewhere)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragaudit import Auditor
from ragaudit.cli import main
from ragaudit.evaluation.calibration import read_labels
from ragaudit.evaluation.review import select
from ragaudit.evaluation.review_destinations import labels_from_phoenix, to_phoenix
from ragaudit.judges import FittedJudge
from tests.support.phoenix import PHOENIX_BIN, PhoenixServer, start_phoenix
from tests.support.review_logs import ScriptedAuditJudge, good_turns, write_review_log

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

_PATCH = ("mutation($input: PatchDatasetExamplesInput!) { patchDatasetExamples(input: $input) "
          "{ dataset { id } } }")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    if os.environ.get("RAGAUDIT_SKIP_E2E") == "1":
        pytest.skip("RAGAUDIT_SKIP_E2E=1: the Phoenix round trip is skipped")
    if not PHOENIX_BIN.exists():
        pytest.skip(f"{PHOENIX_BIN} not found: run `make test` (it creates .venv-phoenix) or set RAGAUDIT_PHOENIX_BIN")
    server = start_phoenix(tmp_path_factory.mktemp("phoenix-review"))
    try:
        yield server
    finally:
        server.stop()


def test_select_to_phoenix_labels_back_to_calibrate(phoenix: PhoenixServer, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # 26 turns, faithfulness spread from 0.1 to 1: 12 below 0.5, 14 above (--fit needs 10 of each)
    turns, verdicts = good_turns(26, start=0.1)
    log = write_review_log(tmp_path / "audit.jsonl", turns, verdicts)
    items = select(log, low=0.5, sample=26, seed=1, trace_url="http://jaeger:16686/trace/{trace_id}")
    assert len(items) == 26
    assert main(["review", str(log), "--low", "0.5", "--sample", "26", "--seed", "1", "--trace-url",
                 "http://jaeger:16686/trace/{trace_id}", "--phoenix-dataset", "review-1",
                 "--phoenix-endpoint", phoenix.base_url]) == 0
    assert "uploaded" in capsys.readouterr().err
    assert labels_from_phoenix("review-1", endpoint=phoenix.base_url) == []  # nothing labelled yet
    dataset = phoenix.get_json("/v1/datasets?name=review-1")["data"][0]
    examples = phoenix.get_json(f"/v1/datasets/{dataset['id']}/examples")["data"]["examples"]
    assert sorted(e["metadata"]["turn_id"] for e in examples) == sorted(i.id for i in items)
    first = next(e for e in examples if e["metadata"]["turn_id"] == items[0].id)
    assert first["input"]["question"] == items[0].question and first["input"]["evidence"][0]["content"]
    assert first["metadata"]["trace_url"].startswith("http://jaeger:16686/trace/")
    # a person labels every example in Phoenix: pass when the judge's faithfulness is at least 0.5
    truth = {i.id: (i.scores["faithfulness"] or 0) >= 0.5 for i in items}
    operations = [{"replace": {"exampleId": e["id"], "field": "OUTPUT",
                               "value": {"faithfulness": "pass" if truth[e["metadata"]["turn_id"]] else "fail",
                                         "context_relevance": None, "answer_relevance": None}}}
                  for e in examples]
    answer = phoenix.post_json("/graphql", {"query": _PATCH, "variables": {
        "input": {"datasetId": dataset["id"], "operations": operations}}})
    assert not answer.get("errors"), answer
    labels_path = tmp_path / "labels.jsonl"
    assert main(["review", "--labels", str(labels_path), "--phoenix-dataset", "review-1",
                 "--phoenix-endpoint", phoenix.base_url]) == 0
    assert read_labels(labels_path) == {k: {"faithfulness": 1.0 if v else 0.0} for k, v in truth.items()}
    capsys.readouterr()
    assert main(["calibrate", str(labels_path), str(log), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["matched"] == len(items)
    # the labels fit the judge, and an Auditor judges with the fitted configuration
    config = tmp_path / "judge-config.json"
    assert main(["calibrate", str(labels_path), str(log), "--fit", "--out", str(config), "--seed", "1"]) == 0
    capsys.readouterr()
    judge = FittedJudge.load(config, judge=ScriptedAuditJudge(verdicts))
    seen: dict[str, Any] = {}
    with Auditor(judge, audit_log=None, on_judgement=lambda t, j: seen.__setitem__(t.turn_id, j)) as auditor:
        for t in (turns[0], turns[-1]):
            auditor.submit(t)
        assert auditor.force_flush(10)
    assert seen[turns[0].turn_id].details["fitted"]["passed"] == {"faithfulness": False}
    assert seen[turns[-1].turn_id].details["fitted"]["passed"] == {"faithfulness": True}
    # sending the same queue again appends to the dataset
    to_phoenix(items[:1], "review-1", endpoint=phoenix.base_url)
    again = phoenix.get_json(f"/v1/datasets/{dataset['id']}/examples")["data"]["examples"]
    assert len(again) == len(items) + 1
