"""Judge protocols as declared objects (issue 24): chosen by name, one meaning per name, the members of
RagJudge declared. Real ``openai`` SDK against the loopback server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragaudit import BaseRagJudge, ChatRagJudge, FakeJudge, Judgement, JudgeRequest, RetrievedDoc
from ragaudit.errors import ConfigurationError
from ragaudit.judges.base import RagJudge
from ragaudit.judges.combinators.cache import CachedJudge, cache_key
from ragaudit.judges.combinators.tiered import TieredJudge
from ragaudit.judges.cost import estimate_cost
from ragaudit.judges.llm.prompt import template_hash
from ragaudit.judges.protocols import PROTOCOL_NAMES, JudgeProtocol, protocol_named
from ragaudit.judges.rubric import Criterion, RubricJudge, RubricProtocol
from tests.support.judges import open_judge
from tests.support.llm_server import LLMServer, judgement_json

pytestmark = pytest.mark.timeout(60)

DOCS = (RetrievedDoc(id="policy", content="Items can be returned within 30 days of delivery.", rank=1),)
REQUEST = JudgeRequest(query="How long do I have to return an item?", answer="Within 30 days [1].",
                       context=JudgeRequest.build_context(DOCS), documents=DOCS)
VERSIONS = {"three-score": "ragaudit-judge/3", "full-audit": "ragaudit-full-audit/1", "g-eval": "ragaudit-geval/1"}


@pytest.fixture
def srv() -> Any:
    with LLMServer(default=judgement_json(0.9, 0.8, 0.7)) as server:
        yield server


@pytest.mark.parametrize("name", ["three-score", "full-audit", "g-eval"])
def test_a_protocol_is_chosen_by_name_and_protocol_is_the_object(srv: LLMServer, name: str) -> None:
    judge = open_judge(ChatRagJudge, srv, protocol=name)
    # One meaning per name: .protocol is the protocol, its wire version is protocol_version.
    assert isinstance(judge.protocol, JudgeProtocol) and judge.protocol.name == name
    assert judge.protocol_version == judge.protocol.version == VERSIONS[name]
    assert json.loads(judge.config_key())["protocol"] == VERSIONS[name]
    judgement = judge.judge(REQUEST)
    assert judgement.identity is not None and judgement.identity.protocol == name
    assert judgement.identity.protocol_version == VERSIONS[name]
    assert judgement.details["protocol"] == name and judgement.details["protocol_version"] == VERSIONS[name]
    # what went on the wire is the protocol's: its messages and its schema
    sent = srv.requests[-1].body
    messages = judge.protocol.messages(REQUEST, max_context_chars=judge.max_context_chars)
    assert sent["messages"][0] == messages[0]
    assert judgement.identity.prompt_hash == template_hash(messages, judge.protocol.schema)
    fmt = sent.get("response_format") or {}
    assert (fmt.get("type") == "json_schema") == (judge.protocol.schema is not None)


def test_every_protocol_of_the_design_is_a_declared_object() -> None:
    assert set(PROTOCOL_NAMES) == {"three-score", "full-audit", "g-eval"}
    rubric = RubricProtocol([Criterion("clarity", "Easy to follow.", scale=(1, 5))])
    for protocol in [*(protocol_named(name) for name in PROTOCOL_NAMES), rubric]:
        assert isinstance(protocol, JudgeProtocol), protocol
        assert protocol.version and protocol.name
        messages = protocol.messages(REQUEST, max_context_chars=1000)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert isinstance(protocol.repair_prompt(REQUEST), str) and protocol.reply_shape(REQUEST)
    with pytest.raises(ConfigurationError, match="criteria"):
        ChatRagJudge("m", base_url="http://127.0.0.1:9/v1", protocol="rubric")
    with pytest.raises(ConfigurationError, match="protocol must be one of"):
        ChatRagJudge("m", base_url="http://127.0.0.1:9/v1", protocol="full_audit")


def test_g_eval_by_name_reads_the_written_1_to_5_scores(srv: LLMServer) -> None:
    srv.enqueue('{"analysis": "claims checked", "faithfulness": 5, "context_relevance": 3, '
                '"answer_relevance": 9, "reason": "ok"}')
    judgement = open_judge(ChatRagJudge, srv, protocol="g-eval").judge(REQUEST)
    assert judgement.scores() == {"faithfulness": 1.0, "context_relevance": 0.5, "answer_relevance": None}
    assert judgement.reason == "ok" and judgement.error is None


def test_a_rubric_protocol_object_runs_on_chat_rag_judge_like_rubric_judge(srv: LLMServer) -> None:
    criteria = [Criterion("clarity", "Easy to follow.", scale=(1, 5), maps_to="answer_relevance")]
    srv.default = '{"scores": {"clarity": 4}, "reason": "clear"}'
    direct = open_judge(ChatRagJudge, srv, protocol=RubricProtocol(criteria))
    rubric = open_judge(RubricJudge, srv, criteria=criteria)
    assert rubric.protocol.name == "rubric" and rubric.protocol_version == "ragaudit-rubric/1"
    one, two = direct.judge(REQUEST), rubric.judge(REQUEST)
    assert one.answer_relevance == two.answer_relevance == 0.75
    assert one.identity is not None and two.identity is not None
    assert one.identity.prompt_hash == two.identity.prompt_hash


class _Configured(BaseRagJudge):
    name = "configured"
    calls_per_judgement = 3
    timeout_s = 1.5

    def __init__(self) -> None:
        self.closed = 0

    def judge(self, request: JudgeRequest) -> Judgement:
        return Judgement(faithfulness=0.5, judge=self.name)

    def config_key(self) -> str:
        return "configured-v2"

    def close(self) -> None:
        self.closed += 1


def test_rag_judge_declares_what_combinators_and_costs_use() -> None:
    plain = FakeJudge(lambda r: {"faithfulness": 1.0})
    # defaults on the base class
    assert plain.config_key() == "fake" and plain.calls_per_judgement == 0 and plain.timeout_s is None
    assert BaseRagJudge.calls_per_judgement == 1 and BaseRagJudge.timeout_s is None
    configured = _Configured()
    assert isinstance(configured, RagJudge)
    cached = CachedJudge(configured)
    assert cached.config_key() == "configured-v2" and cached.timeout_s == 1.5 and cached.calls_per_judgement == 3
    assert cache_key(configured, REQUEST) == cache_key(cached, REQUEST)
    tiered = TieredJudge(plain, configured, detailed_rate=1.0)
    assert json.loads(tiered.config_key())["detailed"] == "configured-v2"
    assert estimate_cost(configured, [REQUEST]).calls == 3
    tiered.close()
    cached.close()
    assert configured.closed == 2
