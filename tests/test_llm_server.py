"""The loopback chat-completions server, driven by the real openai SDK (raw HTTP where it hides things)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from tests.support.llm_server import (
    DEFAULT_CONTENT,
    Fault,
    LLMServer,
    Reply,
    Token,
    ToolCall,
    judgement_json,
)

pytestmark = pytest.mark.timeout(60)

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello big world"}]


def client(srv: LLMServer, *, timeout: float = 5.0, max_retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="sk-test", timeout=timeout, max_retries=max_retries)


def ask(srv: LLMServer, **kwargs: Any) -> Any:
    with client(srv, max_retries=kwargs.pop("max_retries", 0), timeout=kwargs.pop("timeout", 5.0)) as c:
        return c.chat.completions.create(model=kwargs.pop("model", "judge-x"), messages=MESSAGES, **kwargs)


def raw_post(
    srv: LLMServer, body: dict[str, Any], path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        srv.root_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


# --- replies -----------------------------------------------------------------------------------


def test_default_reply_usage_and_model_echo(srv: LLMServer) -> None:
    completion = ask(srv)
    assert completion.choices[0].message.content == DEFAULT_CONTENT
    assert completion.model == "judge-x"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens == 5  # "be brief" + "hello big world"
    assert completion.usage.completion_tokens == len(DEFAULT_CONTENT.split())
    usage = completion.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_queue_is_fifo_then_default(srv: LLMServer) -> None:
    srv.enqueue("one", Reply(content="two words", model="other-model", usage={"prompt_tokens": 99}))
    first, second, third = ask(srv), ask(srv), ask(srv)
    assert first.choices[0].message.content == "one"
    assert second.choices[0].message.content == "two words"
    assert second.model == "other-model"
    assert second.usage.prompt_tokens == 99
    assert second.usage.completion_tokens == 2
    assert third.choices[0].message.content == DEFAULT_CONTENT


def test_rule_sees_request_and_none_falls_through(srv: LLMServer) -> None:
    seen: list[dict[str, Any]] = []

    def rule(request: Any) -> str | None:
        seen.append(dict(request))
        return None if request["model"] == "pass" else f"echo {request['messages'][-1]['content']}"

    srv.rule = rule
    srv.enqueue("queued")
    assert ask(srv).choices[0].message.content == "echo hello big world"
    assert ask(srv, model="pass").choices[0].message.content == "queued"
    assert [r["model"] for r in seen] == ["judge-x", "pass"]


def test_rule_can_return_a_fault_and_a_broken_rule_is_a_500(srv: LLMServer) -> None:
    srv.rule = lambda request: Fault.server_error(503)
    with pytest.raises(openai.InternalServerError) as info:
        ask(srv)
    assert info.value.status_code == 503

    def broken(request: Any) -> str:
        raise KeyError("oops")

    srv.rule = broken
    with pytest.raises(openai.InternalServerError, match="rule raised KeyError"):
        ask(srv)


def test_n_choices_repeat_or_follow_the_script(srv: LLMServer) -> None:
    same = ask(srv, n=3)
    assert [c.index for c in same.choices] == [0, 1, 2]
    assert {c.message.content for c in same.choices} == {DEFAULT_CONTENT}
    srv.enqueue(["a", Reply(content="b", finish_reason="length")])
    scripted = ask(srv, n=3)
    assert [c.message.content for c in scripted.choices] == ["a", "b", "a"]
    assert scripted.choices[1].finish_reason == "length"
    assert scripted.usage.completion_tokens == 3


def test_logprobs_scripted_tokens_cut_to_top_k(srv: LLMServer) -> None:
    tokens = [
        Token("{", 0.0),
        Token("4", -0.2, top_logprobs=[("4", -0.2), ("5", -1.8), ("3", -3.0), ("2", -6.0)]),
        Token("}", 0.0),
    ]
    srv.enqueue(Reply(tokens=tokens))
    completion = ask(srv, logprobs=True, top_logprobs=3)
    choice = completion.choices[0]
    assert choice.message.content == "{4}"
    content = choice.logprobs.content
    assert [t.token for t in content] == ["{", "4", "}"]
    assert content[1].logprob == pytest.approx(-0.2)
    assert [(t.token, t.logprob) for t in content[1].top_logprobs] == [("4", -0.2), ("5", -1.8), ("3", -3.0)]
    assert len(content[0].top_logprobs) == 3  # padded with fillers
    assert content[0].top_logprobs[0].token == "{"
    assert content[1].bytes == list(b"4")


def test_logprobs_generated_when_not_scripted_and_absent_when_not_asked(srv: LLMServer) -> None:
    srv.enqueue('{"score": 42}  ', "plain")
    completion = ask(srv, logprobs=True, top_logprobs=2)
    content = completion.choices[0].logprobs.content
    assert "".join(t.token for t in content) == '{"score": 42}  '
    assert [t.token for t in content][-4:] == [" 4", "2", "}", "  "]  # digits are single tokens
    assert all(t.logprob == 0.0 and len(t.top_logprobs) == 2 for t in content)
    assert ask(srv).choices[0].logprobs is None


# --- delay ---------------------------------------------------------------------------------------


def test_server_delay_past_timeout_and_reply_delay_override(srv: LLMServer) -> None:
    srv.delay = 2.0
    with pytest.raises(openai.APITimeoutError):
        ask(srv, timeout=0.3)
    srv.enqueue(Reply(content="fast", delay=0.0))
    assert ask(srv, timeout=1.5).choices[0].message.content == "fast"
    srv.delay = 0.0
    srv.enqueue(Reply(content="slow", delay=2.0))
    with pytest.raises(openai.APITimeoutError):
        ask(srv, timeout=0.3)


# --- faults --------------------------------------------------------------------------------------


def test_500_then_sdk_retry_succeeds(srv: LLMServer) -> None:
    srv.fail_next(Fault.server_error(), times=2)
    with pytest.raises(openai.InternalServerError):
        ask(srv)
    assert ask(srv, max_retries=1).choices[0].message.content == DEFAULT_CONTENT
    assert srv.request_count == 3


def test_429_carries_retry_after(srv: LLMServer) -> None:
    srv.fail_next(Fault.rate_limit(retry_after=0.05))
    status, headers, body = raw_post(srv, {"model": "m", "messages": MESSAGES})
    assert status == 429
    assert headers["Retry-After"] == "0.05"
    assert json.loads(body)["error"]["message"].startswith("Rate limit")
    srv.fail_next(Fault.rate_limit(retry_after=0.01), times=2)
    assert ask(srv, max_retries=2).choices[0].message.content == DEFAULT_CONTENT
    srv.fail_next(Fault.rate_limit(retry_after=0.01), times=2)
    with pytest.raises(openai.RateLimitError):
        ask(srv, max_retries=1)


def test_hang_times_out_the_client(srv: LLMServer) -> None:
    srv.fail_next(Fault.hang(seconds=3.0))
    with pytest.raises(openai.APITimeoutError):
        ask(srv, timeout=0.3)
    assert srv.request_count == 1


def test_malformed_body(srv: LLMServer) -> None:
    srv.fail_next(Fault.malformed())
    status, _, body = raw_post(srv, {"model": "m", "messages": MESSAGES})
    assert status == 200
    with pytest.raises(ValueError):
        json.loads(body)
    srv.fail_next(Fault.malformed())
    with pytest.raises(ValueError):  # the SDK lets the JSON decode error through
        ask(srv)


def test_empty_choices(srv: LLMServer) -> None:
    srv.fail_next(Fault.empty_choices())
    assert ask(srv).choices == []


def test_connection_drop(srv: LLMServer) -> None:
    srv.fail_next(Fault.drop())
    with pytest.raises(openai.APIConnectionError) as info:
        ask(srv)
    assert not isinstance(info.value, openai.APITimeoutError)
    assert ask(srv).choices[0].message.content == DEFAULT_CONTENT  # the server itself is fine


def test_reject_response_format_only_when_present(srv: LLMServer) -> None:
    srv.reject_response_format = True
    with pytest.raises(openai.BadRequestError, match="response_format") as info:
        ask(srv, response_format={"type": "json_object"})
    assert info.value.body["param"] == "response_format"  # type: ignore[index]
    assert ask(srv).choices[0].message.content == DEFAULT_CONTENT


def test_queued_faults_come_before_rule_and_queue(srv: LLMServer) -> None:
    srv.rule = lambda request: "from rule"
    srv.fail_next(Fault.bad_request("nope"))
    with pytest.raises(openai.BadRequestError, match="nope"):
        ask(srv)
    assert ask(srv).choices[0].message.content == "from rule"


# --- routes, recording, lifecycle -----------------------------------------------------------------


def test_records_path_headers_and_body(srv: LLMServer) -> None:
    ask(srv, temperature=0, response_format={"type": "json_object"})
    (request,) = srv.requests
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["temperature"] == 0
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.messages == MESSAGES
    assert request.prompt_text == "be brief\n\nhello big world"


def test_other_routes_are_refused(srv: LLMServer) -> None:
    status, _, _ = raw_post(srv, {"model": "m", "messages": MESSAGES}, path="/chat/completions")
    assert status == 200
    status, _, _ = raw_post(srv, {"model": "m"}, path="/v1/embeddings")
    assert status == 404
    assert [r.path for r in srv.requests] == ["/chat/completions", "/v1/embeddings"]


def test_streaming_sends_the_reply_token_by_token_with_usage(srv: LLMServer) -> None:
    srv.enqueue("the answer is 42")
    with client(srv) as c:
        chunks = list(c.chat.completions.create(model="m", messages=MESSAGES, stream=True,
                                                stream_options={"include_usage": True}))
    pieces = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert "".join(pieces) == "the answer is 42" and len(pieces) > 3
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_tool_calls_plain_and_streamed(srv: LLMServer) -> None:
    call = ToolCall("search", {"query": "refunds"}, id="call_a")
    srv.enqueue(Reply(tool_calls=[call]), Reply(tool_calls=[call, ToolCall("lookup", '{"id": 7}')]))
    reply = ask(srv)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls" and message.content is None
    assert [(t.id, t.function.name, json.loads(t.function.arguments)) for t in message.tool_calls] == [
        ("call_a", "search", {"query": "refunds"})]
    with client(srv) as c:
        chunks = list(c.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or ():
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.id or ""
            entry["name"] += (delta.function.name or "") if delta.function else ""
            entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
    assert calls[1]["id"].startswith("call_") and calls[1]["id"] != "call_a"
    assert calls == {0: {"id": "call_a", "name": "search", "arguments": '{"query": "refunds"}'},
                     1: {"id": calls[1]["id"], "name": "lookup", "arguments": '{"id": 7}'}}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_azure_client_path(srv: LLMServer) -> None:
    with openai.AzureOpenAI(
        azure_endpoint=srv.root_url, api_key="az-key", api_version="2024-06-01", max_retries=0
    ) as azure:
        completion = azure.chat.completions.create(model="my-deployment", messages=MESSAGES)
    assert completion.choices[0].message.content == DEFAULT_CONTENT
    (request,) = srv.requests
    assert request.path == "/openai/deployments/my-deployment/chat/completions"
    assert request.query["api-version"] == ["2024-06-01"]
    assert request.headers["api-key"] == "az-key"


def test_concurrent_requests_are_all_recorded(srv: LLMServer) -> None:
    srv.delay = 0.05
    srv.rule = lambda request: f"reply to {request['messages'][-1]['content']}"
    results: dict[int, str] = {}
    with client(srv) as shared:

        def worker(i: int) -> None:
            completion = shared.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"q{i}"}]
            )
            results[i] = completion.choices[0].message.content or ""

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {i: f"reply to q{i}" for i in range(48)}
    assert sorted(r.messages[0]["content"] for r in srv.requests) == sorted(f"q{i}" for i in range(48))


def test_stop_wakes_a_hanging_handler() -> None:
    server = LLMServer().start()
    server.fail_next(Fault.hang(seconds=60.0))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            ask(server, timeout=30.0)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    while server.request_count == 0:
        threading.Event().wait(0.01)
    server.stop()
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    assert not isinstance(errors[0], openai.APITimeoutError)  # closed by stop(), not by the client


def test_lifecycle() -> None:
    server = LLMServer(replies=["preset"])
    with pytest.raises(RuntimeError):
        _ = server.port
    with server:
        with pytest.raises(RuntimeError):
            server.start()
        assert server.base_url.endswith(f":{server.port}/v1")
        assert ask(server).choices[0].message.content == "preset"
    server.stop()  # twice is fine
    with pytest.raises(RuntimeError):
        _ = server.base_url


def test_judgement_json_helper() -> None:
    data = json.loads(judgement_json(0.1, "80%", None, reason="r", scale="0-1"))
    assert data == {
        "faithfulnessScore": 0.1,
        "contextRelevanceScore": "80%",
        "answerRelevanceScore": None,
        "reason": "r",
        "scale": "0-1",
    }


# --- structured output: json_schema like a real endpoint --------------------------------------------------

SCHEMA = {
    "name": "verdict",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "why": {"type": "string"}},
        "required": ["score", "why"],
        "additionalProperties": False,
    },
}


def test_response_format_kinds_the_server_does_not_take_are_refused(srv: LLMServer) -> None:
    srv.response_formats = ("json_object",)
    with pytest.raises(openai.BadRequestError, match="response_format") as info:
        ask(srv, response_format={"type": "json_schema", "json_schema": SCHEMA})
    assert info.value.body["param"] == "response_format"  # type: ignore[index]
    assert ask(srv, response_format={"type": "json_object"}).choices[0].message.content == DEFAULT_CONTENT


@pytest.mark.parametrize(
    "bad, problem",
    [
        ({"schema": SCHEMA["schema"]}, "'name'"),
        ({"name": "has space", "schema": SCHEMA["schema"]}, "'name'"),
        ({"name": "v"}, "'schema'"),
        ({"name": "v", "strict": True, "schema": {"type": "array"}}, "root"),
        ({"name": "v", "strict": True, "schema": {**SCHEMA["schema"], "additionalProperties": True}},  # type: ignore[dict-item]
         "additionalProperties"),
        ({"name": "v", "strict": True, "schema": {**SCHEMA["schema"], "required": ["score"]}},  # type: ignore[dict-item]
         "required"),
    ],
)
def test_an_invalid_json_schema_is_refused(srv: LLMServer, bad: dict[str, Any], problem: str) -> None:
    with pytest.raises(openai.BadRequestError, match="Invalid schema for response_format") as info:
        ask(srv, response_format={"type": "json_schema", "json_schema": bad})
    assert problem in str(info.value)


def test_enforced_schema_replies_always_validate(srv: LLMServer) -> None:
    srv.enforce_schema = True
    good = json.dumps({"score": 0.25, "why": "ok"})
    srv.enqueue(good, json.dumps({"score": 30, "why": "out of range"}), "prose, not JSON",
                json.dumps({"score": 0.5, "why": "x", "extra": 1}))
    replies = [ask(srv, response_format={"type": "json_schema", "json_schema": SCHEMA}).choices[0].message.content
               for _ in range(4)]
    assert replies[0] == good
    assert [json.loads(r) for r in replies[1:]] == [{"score": 0, "why": ""}] * 3
    assert len(srv.schema_violations) == 3 and srv.schema_violations[1] == "prose, not JSON"
    srv.enqueue("not JSON either")  # without json_schema the server does not enforce anything
    assert ask(srv, response_format={"type": "json_object"}).choices[0].message.content == "not JSON either"
