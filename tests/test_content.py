"""ContentPolicy on its own: what each kind of text becomes with capture on, off and with redact; secret
registration and scrubbing; the contained redact hook; the logging filter on the ``ragaudit`` logger."""

from __future__ import annotations

import asyncio
import base64
import logging

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragaudit import content
from ragaudit.content import (
    ERROR_WITHHELD,
    REDACTION_FAILED,
    SECRET_MARKER,
    ContentPolicy,
    error_status,
    error_type,
    register_client,
    register_headers,
    register_secret,
    register_url,
    scrub,
    scrub_url,
)
from ragaudit.errors import ConfigurationError


def upper(text: str) -> str:
    return text.replace("card-4111", "[CARD]")


# --- the kinds of text --------------------------------------------------------------------------------


def test_capture_on_keeps_content_reason_and_errors_redacted() -> None:
    policy = ContentPolicy(capture_content=True, redact=upper)
    assert policy.captured("pay with card-4111") == "pay with [CARD]"
    assert policy.reason("judge saw card-4111") == "judge saw [CARD]"
    assert policy.error("APIStatusError: Error code: 400 - card-4111") == "APIStatusError: Error code: 400 - [CARD]"
    assert policy.identifier("/docs/card-4111.pdf") == "/docs/[CARD].pdf"
    assert policy.metadata({"card-4111": {"nested": ["card-4111", 3, None]}}) == {
        "[CARD]": {"nested": ["[CARD]", 3, None]}
    }


def test_capture_off_keeps_no_free_text() -> None:
    policy = ContentPolicy(capture_content=False, redact=upper)
    assert policy.captured("question text") is None
    assert policy.reason("the judge's reason") is None
    assert policy.metadata({"k": "v"}) is None
    # an error keeps its type, its status and our fixed message, never its text
    assert policy.error("AuthenticationError: Error code: 401 - {'message': 'quoted prompt'}") == (
        f"AuthenticationError (HTTP 401): {ERROR_WITHHELD}"
    )
    assert policy.error("JudgeError: unusable judge output: high: <document text>") == f"JudgeError: {ERROR_WITHHELD}"
    # a reply quoted at the start of an error never passes for a type
    assert policy.error("high: <document text>") == f"Error: {ERROR_WITHHELD}"
    assert policy.error("x", status=503) == f"Error (HTTP 503): {ERROR_WITHHELD}"
    # identifiers are still recorded (through redact)
    assert policy.identifier("/docs/card-4111.pdf") == "/docs/[CARD].pdf"


def test_judge_details_with_capture_off_keep_only_numbers_and_flags() -> None:
    details = {"status_code": 401, "repaired": True, "initial_output": "raw reply", "parse_notes": ["quote"],
               "score": 0.5, "nan": float("nan"), "none": None}
    assert ContentPolicy(capture_content=False).details(details) == {
        "status_code": 401, "repaired": True, "score": 0.5, "none": None}
    on = ContentPolicy(capture_content=True, redact=lambda t: t.replace("raw", "[R]")).details(details)
    assert on["initial_output"] == "[R] reply" and on["parse_notes"] == ["quote"]


def test_the_judges_reason_can_be_kept_on_its_own() -> None:
    policy = ContentPolicy(capture_content=False, capture_reason=True, redact=upper)
    assert policy.reason("because card-4111") == "because [CARD]"
    assert policy.captured("the answer") is None
    assert ContentPolicy(capture_content=True, capture_reason=False).reason("r") is None


def test_capture_follows_the_otel_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(content.CAPTURE_CONTENT_ENV, "NO_CONTENT")
    assert ContentPolicy().capture_content is False
    assert ContentPolicy().capture_reason is False
    monkeypatch.setenv(content.CAPTURE_CONTENT_ENV, "true")
    assert ContentPolicy().capture_content is True


def test_exception_text() -> None:
    class Status(Exception):
        status_code = 429

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    on, off = ContentPolicy(capture_content=True), ContentPolicy(capture_content=False)
    assert on.exception(ValueError("prompt text")) == "ValueError: prompt text"
    assert off.exception(ValueError("prompt text")) == f"ValueError: {ERROR_WITHHELD}"
    assert off.exception(Status("body")) == f"Status (HTTP 429): {ERROR_WITHHELD}"
    assert on.exception(Unprintable()) == "Unprintable: <unprintable>"
    assert on.body("sink body echo", status=401) == "sink body echo"
    assert off.body("sink body echo", status=401) == "HTTP 401: body withheld"


def test_truncation_and_surrogates() -> None:
    policy = ContentPolicy(capture_content=True)
    cut = policy.captured("x" * 100, limit=10)
    assert cut is not None and cut.startswith("x" * 10) and "truncated 90 chars" in cut
    assert policy.text("a\ud800b") == "a\ud800b"  # kept: the audit log writes it escaped
    assert content.otlp_safe("a\ud800b") == "a\ufffdb"
    assert policy.json({"k": "a\ud800"}) == '{"k":"a\ufffd"}'


def test_error_type_and_status_readers() -> None:
    assert error_type("openai.APIConnectionError: Connection error.") == "openai.APIConnectionError"
    assert error_type("timeout: no judgement within 5s") == "timeout"
    assert error_type("SystemExit raised by the judge: 3") == "SystemExit"
    assert error_type("faithfulness: high") == "Error"
    assert error_type(None) == "Error"
    assert error_status("Error code: 429 - {}") == 429
    assert error_status("got HTTP 503 from x") == 503
    assert error_status("no number 4040 here") is None


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        ContentPolicy(redact="not callable")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        ContentPolicy(secrets="one-string")


def test_repr_names_settings_only() -> None:
    policy = ContentPolicy(capture_content=False, redact=upper, secrets=["sk-repr-secret-0000"])
    assert repr(policy) == "ContentPolicy(capture_content=False, capture_reason=False, redact=upper)"


# --- redact contained ---------------------------------------------------------------------------------


@pytest.mark.parametrize("exc", [ValueError("quoted: card-4111"), KeyboardInterrupt("card-4111"),
                                 SystemExit("card-4111"), asyncio.CancelledError("card-4111"),
                                 GeneratorExit("card-4111")])
def test_a_failing_redact_withholds_the_text_and_logs_its_type_only(
        exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    def redact(text: str) -> str:
        raise exc

    policy = ContentPolicy(capture_content=True, redact=redact)
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        assert policy.captured("card-4111 question") == REDACTION_FAILED
        assert policy.metadata({"card-4111": "card-4111"}) == {REDACTION_FAILED: REDACTION_FAILED}
        assert policy.error("ValueError: card-4111") == REDACTION_FAILED
    logged = "\n".join(r.getMessage() + str(r.exc_text or "") for r in caplog.records)
    assert type(exc).__name__ in logged
    assert "card-4111" not in logged
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 1  # then at DEBUG


def test_a_redact_returning_a_non_string_or_the_secret_back() -> None:
    register_secret("sk-put-back-0123456789")
    assert ContentPolicy(capture_content=True, redact=lambda t: 42).captured("x") == "42"  # type: ignore[arg-type,return-value]
    back = ContentPolicy(capture_content=True, redact=lambda t: t + " sk-put-back-0123456789")
    assert back.captured("x") == f"x {SECRET_MARKER}"


# --- secrets ------------------------------------------------------------------------------------------


def test_registered_secrets_are_scrubbed_whatever_the_capture_setting() -> None:
    register_secret("sk-unit-registered-000111")
    for capture in (True, False):
        policy = ContentPolicy(capture_content=capture)
        assert policy.identifier("src sk-unit-registered-000111") == f"src {SECRET_MARKER}"
    assert ContentPolicy(capture_content=True).captured("k=sk-unit-registered-000111;") == f"k={SECRET_MARKER};"
    # URL-quoted and JSON-escaped echoes too
    assert scrub("sk-unit-registered-000111".replace("-", "%2D")) != "sk-unit-registered-000111"


def test_short_and_plain_values_are_not_secrets() -> None:
    register_secret("abc")
    register_secret("2024-02-01")
    register_secret(None)
    assert scrub("abc on 2024-02-01") == "abc on 2024-02-01"


def test_headers_by_name_and_by_look() -> None:
    register_headers({"x-api-key": "gw-key-aaaa", "Authorization": "Bearer tok-bearer-zzzz",
                      "X-Custom": "Zq8x7Lk2Mn4Bv6Cx1Pz9", "Content-Type": "application/json",
                      "X-Stainless-Runtime-Version": "3.11.4"})
    text = scrub("gw-key-aaaa tok-bearer-zzzz Zq8x7Lk2Mn4Bv6Cx1Pz9 application/json 3.11.4")
    assert text == f"{SECRET_MARKER} {SECRET_MARKER} {SECRET_MARKER} application/json 3.11.4"


def test_url_userinfo_and_query_values() -> None:
    register_url("https://gateway-user-01:pw-secret-99@gw.example/v1?key=q-secret-value-77&api-version=2024-02-01")
    text = scrub("gateway-user-01 pw-secret-99 q-secret-value-77 2024-02-01")
    assert text == f"{SECRET_MARKER} {SECRET_MARKER} {SECRET_MARKER} 2024-02-01"
    assert scrub_url("https://gw.example/v1?key=q-secret-value-77") == f"https://gw.example/v1?key={SECRET_MARKER}"
    assert scrub_url(None) is None
    register_url("::not a url::")  # never raises


def test_environment_keys_and_otlp_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "env-key-value-123456")
    monkeypatch.setenv("HF_TOKEN", "hf_tokenvalue987654")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS",
                       "x-honeycomb-team=otlp-team-key-42,Authorization=Basic%20b3RscDpzZWNyZXQ=")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=otlp-traces-key-24")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("PWD", "/srv/somewhere/long")
    ContentPolicy()  # building a policy rereads the environment at once
    text = scrub("env-key-value-123456 hf_tokenvalue987654 otlp-team-key-42 b3RscDpzZWNyZXQ= otlp-traces-key-24 "
                 "false /srv/somewhere/long")
    assert text == " ".join([SECRET_MARKER] * 5) + " false /srv/somewhere/long"


def test_a_secret_containing_another_is_replaced_whole() -> None:
    register_secret("inner-secret-abcd")
    register_secret("outer-inner-secret-abcd-tail")
    assert scrub("[outer-inner-secret-abcd-tail]") == f"[{SECRET_MARKER}]"


def test_openai_clients_register_key_headers_and_base_url() -> None:
    client = openai.OpenAI(api_key="sk-client-unit-1111", base_url="http://127.0.0.1:9/v1?token=qtok-unit-2222",
                           default_headers={"x-api-key": "gw-unit-3333"}, default_query={"code": "az-code-unit-4444"})
    register_client(client)
    assert scrub("sk-client-unit-1111 qtok-unit-2222 gw-unit-3333 az-code-unit-4444") == " ".join([SECRET_MARKER] * 4)
    register_client(object())  # a client of another shape registers what it can, never raises
    register_client(None)


def test_langfuse_basic_token_and_its_parts() -> None:
    token = base64.b64encode(b"pk-lf-unit:sk-lf-unit-secret").decode()
    register_headers({"Authorization": f"Basic {token}"})
    assert scrub(f"echo {token}") == f"echo {SECRET_MARKER}"


# --- logs ---------------------------------------------------------------------------------------------


def test_log_records_of_ragaudit_are_scrubbed_message_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    register_secret("sk-log-unit-5555")
    logger = logging.getLogger("ragaudit")
    with caplog.at_level(logging.DEBUG, logger="ragaudit"):
        logger.debug("got %s back", "sk-log-unit-5555")
        try:
            raise RuntimeError("server said sk-log-unit-5555")
        except RuntimeError:
            logger.warning("failed", exc_info=True)
        logger.info("stack", stack_info=True, extra={"x": 1})
    text = caplog.text
    assert "sk-log-unit-5555" not in text
    assert "got *** back" in text and "RuntimeError: server said ***" in text


# --- properties ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.booleans())
def test_any_text_never_raises_and_never_shows_a_registered_secret(text: str, capture: bool) -> None:
    register_secret("sk-prop-secret-7777")
    policy = ContentPolicy(capture_content=capture, redact=lambda t: t[::-1][::-1])
    for out in (policy.captured(text + "sk-prop-secret-7777" + text), policy.error("sk-prop-secret-7777" + text),
                policy.identifier(text + "sk-prop-secret-7777"), policy.json({text: "sk-prop-secret-7777"}, 50)):
        assert out is None or "sk-prop-secret-7777" not in out


def test_the_module_is_on_the_bottom_floor() -> None:
    # content is floor 1: of ragaudit it imports records, errors and _fork (fork-safe locks) only
    # (neither imports anything of ours), so every floor above may use it.
    import ast

    with open(content.__file__, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    ours = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
    assert ours == {"errors", "records", "_fork"}


def test_log_lines_without_a_policy_follow_the_strictest_one_in_the_process() -> None:
    register_secret("sk-log-exc-6666")
    ContentPolicy(capture_content=False)  # from now on, in this process
    assert content.log_exception(ValueError("quoted question sk-log-exc-6666")) == f"ValueError: {ERROR_WITHHELD}"
