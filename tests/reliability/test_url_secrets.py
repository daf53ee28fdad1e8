"""Credentials in the URLs ragaudit is given never show (issue 46 item 7 and its Secrets bullet).

The budget store's Redis URL, the OTLP endpoints and the judge's base_url may carry a password or a
key. With Redis down the budget store's WARNING used to print the whole ``redis://:PW@host`` URL.
Now each URL's credentials are registered with the scrubber, and wherever a URL is said its password
is masked whatever its length (``redis://:***@host:port/0``), as Celery and kombu show a broker URL.
Real parts: a real ``redis-server`` with ``requirepass``, stopped mid-run and never started; the real
``openai`` SDK against the loopback judge; the real OTLP exporter.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from ragaudit import Auditor, Budget, ChatRagJudge, ConfigurationError, CostControl, RagTurn, RetrievedDoc
from ragaudit.content import scrub, scrub_url
from tests.support.judges import closing
from tests.support.llm_server import LLMServer
from tests.support.redis_server import redis_binary, start_redis

pytestmark = pytest.mark.timeout(120)

SHORT_PW = "pW7x"  # shorter than the scrubber's 8-character floor for free text: only masking hides it
LONG_PW = "redis-Passw0rd-4ab9c1e2"
DOC = RetrievedDoc(id="returns", content="Items can be returned within 30 days of delivery.", rank=1)


def turn(i: int) -> RagTurn:
    return RagTurn(turn_id=f"t-{i}", query="How long do I have to return an item?", answer="Within 30 days.",
                   documents=(DOC,))


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)


@pytest.mark.parametrize("password", [SHORT_PW, LONG_PW])
def test_redis_password_never_in_the_warning_when_redis_goes_down(
        password: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    if redis_binary() is None:
        pytest.skip("redis-server not found (apt-get install redis-server; make test installs it)")
    redis = start_redis(tmp_path, password=password)
    caplog.set_level(logging.DEBUG, logger="ragaudit")
    try:
        with LLMServer() as srv:
            judge = closing(ChatRagJudge("gpt-4o-mini", base_url=srv.base_url, api_key="sk-test", max_retries=0))
            auditor = Auditor(judge, audit_log=None, cost=CostControl(budget=Budget(max_calls=100), store=redis.url))
            auditor.submit(turn(0))
            assert auditor.force_flush(10)
            redis.stop()  # Redis down: the store fails, the warning says which store
            for i in range(1, 4):
                auditor.submit(turn(i))
            assert auditor.force_flush(20)
            stats = auditor.stats()
            auditor.shutdown()
    finally:
        redis.stop()
    assert stats["judged"] == 4 and stats["budget_store_errors"] >= 1  # authenticated, then failing open
    warnings = [r.getMessage() for r in caplog.records if "budget store" in r.getMessage()]
    assert len(warnings) == 1
    assert f"redis://:***@127.0.0.1:{redis.port}/0" in warnings[0]
    assert password not in _logged(caplog)


def test_redis_password_never_in_the_warning_when_redis_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("limits")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"redis://:{SHORT_PW}@127.0.0.1:{port}/0"
    caplog.set_level(logging.DEBUG, logger="ragaudit")
    with LLMServer() as srv:
        judge = closing(ChatRagJudge("gpt-4o-mini", base_url=srv.base_url, api_key="sk-test", max_retries=0))
        auditor = Auditor(judge, audit_log=None,
                          cost=CostControl(budget=Budget(max_calls=10), store=url, fail="closed"))
        for i in range(3):
            auditor.submit(turn(i))
        assert auditor.force_flush(20)
        stats = auditor.stats()
        auditor.shutdown()
    assert stats["budget_unavailable"] == 3
    assert f"redis://:***@127.0.0.1:{port}/0" in _logged(caplog)
    assert SHORT_PW not in _logged(caplog)


def test_a_store_url_that_cannot_be_used_is_said_masked() -> None:
    pytest.importorskip("limits")
    with pytest.raises(ConfigurationError) as refused:
        Auditor(closing(ChatRagJudge("m", base_url="http://127.0.0.1:9/v1", api_key="sk-test")), audit_log=None,
                cost=CostControl(budget=Budget(max_calls=1), store=f"nosuch://:{SHORT_PW}@127.0.0.1:1/0"))
    assert "CostControl.store" in str(refused.value) and SHORT_PW not in str(refused.value)
    assert ":***@127.0.0.1:1/0" in str(refused.value)


def test_judge_base_url_password_is_masked_and_its_long_secrets_scrubbed() -> None:
    judge = closing(ChatRagJudge("m", base_url=f"http://gateway-user:{SHORT_PW}@127.0.0.1:9/v1", api_key="sk-test"))
    assert SHORT_PW not in judge.base_url and SHORT_PW not in repr(judge)
    assert scrub_url(f"redis://user:{LONG_PW}@h:6379/1") == "redis://user:***@h:6379/1"
    assert LONG_PW not in scrub(f"an error quoting {LONG_PW}")


def test_credentials_in_an_otlp_endpoint_variable_are_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "otlp-Key-in-url-5d41402abc4b2a76"
    password = "otlp-Passw0rd-7e2b19f0"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://collector.example:4318/v1/traces?key={key}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://svc:{password}@collector.example:4318")
    from ragaudit.content import _SECRETS

    _SECRETS.refresh_env(force=True)
    text = scrub(f"export to https://collector.example:4318/v1/traces?key={key} failed ({password})")
    assert key not in text and password not in text


def test_evaluation_log_exporter_registers_its_endpoint_and_headers() -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from ragaudit.tracing.evaluation_logs import EvaluationLogExporter

    token = "logs-Bearer-Token-0f1e2d3c4b5a"
    password = "logs-Passw0rd-99aa11bb"
    sink = EvaluationLogExporter(endpoint=f"http://u:{password}@127.0.0.1:9",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        text = scrub(f"refused: Bearer {token} at u:{password}@127.0.0.1")
    finally:
        sink.shutdown()
    assert token not in text and password not in text
