"""Every span name, attribute key, event name and fixed value ragaudit emits, with where it comes from.

Each span carries three vocabularies at once so that every common backend renders it without
configuration:

* **OTel GenAI** semantic conventions (``gen_ai.*``, development status; the Python package
  ``opentelemetry-semantic-conventions`` ships the same strings under ``_incubating``): read by
  Jaeger users and any OTel-native tool. Judge scores also go out as ``gen_ai.evaluation.result``
  span events, which Jaeger shows as logs.
* **OpenInference** (``openinference.span.kind``, ``input.value``, ``retrieval.documents.*``,
  ``llm.*``): what Arize Phoenix reads to draw retriever, LLM and evaluator spans.
* **Langfuse** (``langfuse.*``): ``langfuse.observation.type`` makes a span a
  span/retriever/generation/tool/evaluator observation; every span with an input or output sets
  ``langfuse.observation.input``/``.output`` (once one is set Langfuse ignores ``input.value``),
  generations and the judge set ``langfuse.observation.model.name`` and ``.usage_details``; the
  turn's metadata goes out one key per ``langfuse.observation.metadata.<key>``; ``session.id`` and
  ``user.id`` fill Langfuse's Sessions and Users views; the ``langfuse.trace.*`` keys name the
  trace when the turn is its root. Span events (the evaluation results) are dropped by Langfuse:
  scores reach it through [`LangfuseExporter`][ragaudit.tracing.LangfuseExporter].

Keys under ``ragaudit.*`` are ours. Text-bearing keys (marked *content*) are only written when
content capture is on; with it off, ``ragaudit.*.chars`` sizes are written instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

__all__ = [
    "ATTR_ANSWER_CHARS",
    "ATTR_CITATIONS",
    "ATTR_CITATION_CHECKS",
    "ATTR_CITATION_COUNT",
    "ATTR_CITATION_DOC_IDS",
    "ATTR_CITATION_PRECISION",
    "ATTR_CITATION_RECALL",
    "ATTR_CITATION_RESULT",
    "ATTR_CONTENT_CAPTURED",
    "ATTR_DOCUMENT_CHARS",
    "ATTR_DOCUMENT_COUNT",
    "ATTR_DOCUMENT_GRADES",
    "ATTR_DOCUMENT_IDS",
    "ATTR_DOCUMENT_OMITTED",
    "ATTR_DOCUMENT_TRUNCATED_IDS",
    "ATTR_DOCUMENT_USED",
    "ATTR_DOCUMENT_USED_COUNT",
    "ATTR_ERROR_TYPE",
    "ATTR_EXCEPTION_MESSAGE",
    "ATTR_FRAMEWORK",
    "ATTR_JUDGE_ENDPOINT",
    "ATTR_JUDGE_ERROR",
    "ATTR_JUDGE_LATENCY_S",
    "ATTR_JUDGE_MISSING_SCORES",
    "ATTR_JUDGE_MODEL",
    "ATTR_JUDGE_NAME",
    "ATTR_JUDGE_PROMPT_HASH",
    "ATTR_JUDGE_PROTOCOL",
    "ATTR_JUDGE_PROTOCOL_VERSION",
    "ATTR_JUDGE_REASON",
    "ATTR_JUDGE_REASON_CHARS",
    "ATTR_JUDGE_RESPONSE_ID",
    "ATTR_JUDGE_STATUS",
    "ATTR_MODEL",
    "ATTR_PROMPT_CHARS",
    "ATTR_PROMPT_VERSION",
    "ATTR_QUERY_CHARS",
    "ATTR_RELEVANT_IDS",
    "ATTR_RETRIEVAL_DOCUMENT_GRADES",
    "ATTR_RUN_NAME",
    "ATTR_SENTENCES_COUNT",
    "ATTR_SENTENCES_EVENTS_DROPPED",
    "ATTR_SENTENCES_UNSUPPORTED",
    "ATTR_SENTENCE_INDEX",
    "ATTR_SENTENCE_SUPPORTING_DOC_IDS",
    "ATTR_SENTENCE_TEXT",
    "ATTR_SENTENCE_VERDICT",
    "ATTR_SERVICE_NAME",
    "ATTR_SESSION_CONTRADICTED",
    "ATTR_SESSION_CONTRADICTIONS",
    "ATTR_SESSION_ENDED",
    "ATTR_SESSION_GROUNDEDNESS",
    "ATTR_SESSION_MISSED_PREFIX",
    "ATTR_SESSION_PARTIAL",
    "ATTR_SESSION_REPEATED",
    "ATTR_SESSION_RESOLVED",
    "ATTR_SESSION_RESOLVED_TURN",
    "ATTR_SESSION_TURNS",
    "ATTR_SESSION_TURNS_JUDGED",
    "ATTR_TOOL_ARGUMENTS_CHARS",
    "ATTR_TOOL_OUTPUT_CHARS",
    "ATTR_TURN_ID",
    "ATTR_UNJUDGED_REASON",
    "DEPLOYMENT_ENVIRONMENT_KEYS",
    "ERROR_TYPE_JUDGE_ERROR",
    "ERROR_TYPE_MISSING_SCORE",
    "ERROR_TYPE_OTHER",
    "EVALUATOR_TYPE_LLM_JUDGE",
    "EVENT_EXCEPTION",
    "EVENT_SENTENCE",
    "EVENT_SESSION_CONTRADICTION",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_DATA_SOURCE_ID",
    "GEN_AI_EVALUATION_EVALUATOR_ID",
    "GEN_AI_EVALUATION_EVALUATOR_TYPE",
    "GEN_AI_EVALUATION_EVALUATOR_VERSION",
    "GEN_AI_EVALUATION_EXPLANATION",
    "GEN_AI_EVALUATION_NAME",
    "GEN_AI_EVALUATION_REFERENCE_SET_ID",
    "GEN_AI_EVALUATION_RESULT",
    "GEN_AI_EVALUATION_SCORE_LABEL",
    "GEN_AI_EVALUATION_SCORE_VALUE",
    "GEN_AI_OPERATION_CHAT",
    "GEN_AI_OPERATION_EXECUTE_TOOL",
    "GEN_AI_OPERATION_INVOKE_AGENT",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OPERATION_RETRIEVAL",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_PROVIDER_OPENAI",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_RETRIEVAL_DOCUMENTS",
    "GEN_AI_RETRIEVAL_QUERY_TEXT",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "INPUT_MIME_TYPE",
    "INPUT_VALUE",
    "LANGFUSE_ENVIRONMENT",
    "LANGFUSE_OBSERVATION_INPUT",
    "LANGFUSE_OBSERVATION_LEVEL",
    "LANGFUSE_OBSERVATION_METADATA",
    "LANGFUSE_OBSERVATION_MODEL_NAME",
    "LANGFUSE_OBSERVATION_OUTPUT",
    "LANGFUSE_OBSERVATION_STATUS_MESSAGE",
    "LANGFUSE_OBSERVATION_TYPE",
    "LANGFUSE_OBSERVATION_USAGE_DETAILS",
    "LANGFUSE_TRACE_INPUT",
    "LANGFUSE_TRACE_METADATA",
    "LANGFUSE_TRACE_NAME",
    "LANGFUSE_TRACE_OUTPUT",
    "LANGFUSE_TYPE_AGENT",
    "LANGFUSE_TYPE_EVALUATOR",
    "LANGFUSE_TYPE_GENERATION",
    "LANGFUSE_TYPE_RETRIEVER",
    "LANGFUSE_TYPE_SPAN",
    "LANGFUSE_TYPE_TOOL",
    "LINK_REF_TYPE",
    "LINK_TYPE",
    "LINK_TYPE_JUDGED_TURN",
    "LINK_TYPE_SESSION_TURN",
    "LLM_INPUT_MESSAGES",
    "LLM_MODEL_NAME",
    "LLM_OUTPUT_MESSAGES",
    "LLM_PROVIDER",
    "LLM_TOKEN_COUNT_COMPLETION",
    "LLM_TOKEN_COUNT_PROMPT",
    "LLM_TOKEN_COUNT_TOTAL",
    "MAX_SENTENCE_EVENTS",
    "METADATA",
    "METER_NAME",
    "METRICS",
    "METRIC_CITATIONS",
    "METRIC_JUDGE_COST",
    "METRIC_JUDGE_NOT_SENT",
    "METRIC_JUDGE_TOKENS",
    "METRIC_SENTENCES",
    "METRIC_SESSIONS",
    "METRIC_SESSION_GROUNDEDNESS",
    "METRIC_TURNS",
    "METRIC_VALUE_MAX_CHARS",
    "MIME_JSON",
    "MIME_TEXT",
    "MISSING_SCORE_LABEL",
    "OPENINFERENCE_SPAN_KIND",
    "OUTPUT_MIME_TYPE",
    "OUTPUT_VALUE",
    "PROMPT_VERSION_METADATA_KEYS",
    "REFERENCE_SET_METADATA_KEY",
    "REF_TYPE_CHILD_OF",
    "RETRIEVAL_DOCUMENTS",
    "SCORE_BUCKETS",
    "SCORE_METRICS",
    "SESSION_ID",
    "SPAN_AGENT",
    "SPAN_CHAT",
    "SPAN_JUDGE",
    "SPAN_KIND_AGENT",
    "SPAN_KIND_CHAIN",
    "SPAN_KIND_EVALUATOR",
    "SPAN_KIND_LLM",
    "SPAN_KIND_RETRIEVER",
    "SPAN_KIND_TOOL",
    "SPAN_RETRIEVAL",
    "SPAN_SESSION",
    "SPAN_TOOL",
    "SPAN_TURN",
    "TOOL_NAME",
    "TRACER_NAME",
    "TURN_METRIC_ATTRIBUTES",
    "USER_ID",
    "DocumentKeys",
    "MetricSpec",
    "agent_span_name",
    "chat_span_name",
    "document_keys",
    "error_type_of",
    "evaluator_attributes",
    "input_message_keys",
    "judge_identity_attributes",
    "judge_score_key",
    "judge_usage_key",
    "langfuse_metadata_key",
    "output_message_keys",
    "output_tool_call_keys",
    "provider_of_endpoint",
    "retrieval_metric_key",
    "retrieval_span_name",
    "tool_span_name",
]

TRACER_NAME: Final = "ragaudit"
"""Instrumentation scope name of every span ragaudit creates."""

# --- span names -------------------------------------------------------------------------------
SPAN_TURN: Final = "ragaudit.turn"
"""One question through one pipeline run (OpenInference CHAIN, Langfuse span)."""
SPAN_RETRIEVAL: Final = "retrieval"
"""GenAI semconv: a retrieval span is named ``{gen_ai.operation.name} {data source}``."""
SPAN_CHAT: Final = "chat"
"""GenAI semconv: an inference span is named ``{gen_ai.operation.name} {gen_ai.request.model}``."""
SPAN_JUDGE: Final = "ragaudit.judge"
"""The judgement of one turn (OpenInference EVALUATOR, Langfuse evaluator)."""
SPAN_TOOL: Final = "execute_tool"
"""GenAI semconv: a tool call span is named ``execute_tool {gen_ai.tool.name}``."""


SPAN_AGENT: Final = "invoke_agent"
"""GenAI semconv: an agent's turn span is named ``invoke_agent {gen_ai.agent.name}``."""


def agent_span_name(agent: str | None) -> str:
    """``invoke_agent {agent}``, or ``invoke_agent`` when the agent has no name."""
    return f"{SPAN_AGENT} {agent}" if agent else SPAN_AGENT


def retrieval_span_name(source: str | None) -> str:
    """``retrieval {source}``, or ``retrieval`` when the retriever has no name."""
    return f"{SPAN_RETRIEVAL} {source}" if source else SPAN_RETRIEVAL


def chat_span_name(model: str | None) -> str:
    """``chat {model}``, or ``chat`` when the model is unknown."""
    return f"{SPAN_CHAT} {model}" if model else SPAN_CHAT


def tool_span_name(tool: str | None) -> str:
    """``execute_tool {tool}``, or ``execute_tool`` when the tool has no name."""
    return f"{SPAN_TOOL} {tool}" if tool else SPAN_TOOL


# --- OpenInference (https://github.com/Arize-ai/openinference/blob/main/spec/semantic_conventions.md)
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
SPAN_KIND_CHAIN: Final = "CHAIN"
SPAN_KIND_RETRIEVER: Final = "RETRIEVER"
SPAN_KIND_LLM: Final = "LLM"
SPAN_KIND_EVALUATOR: Final = "EVALUATOR"
SPAN_KIND_TOOL: Final = "TOOL"
SPAN_KIND_AGENT: Final = "AGENT"
TOOL_NAME: Final = "tool.name"
INPUT_VALUE: Final = "input.value"
"""*content* The span's input: the question (turn, retrieval), the prompt (LLM)."""
INPUT_MIME_TYPE: Final = "input.mime_type"
OUTPUT_VALUE: Final = "output.value"
"""*content* The span's output: the answer (turn, LLM), the scores and reason (judge, JSON)."""
OUTPUT_MIME_TYPE: Final = "output.mime_type"
MIME_TEXT: Final = "text/plain"
MIME_JSON: Final = "application/json"
METADATA: Final = "metadata"
"""*content* OpenInference free-form metadata, a JSON string (the turn's own metadata)."""
RETRIEVAL_DOCUMENTS: Final = "retrieval.documents"
"""Prefix of the flattened document list: ``retrieval.documents.{i}.document.{id,content,score,metadata}``."""
LLM_MODEL_NAME: Final = "llm.model_name"
LLM_PROVIDER: Final = "llm.provider"
LLM_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL: Final = "llm.token_count.total"
LLM_INPUT_MESSAGES: Final = "llm.input_messages"
"""*content* Prefix: ``llm.input_messages.{i}.message.{role,content}``."""
LLM_OUTPUT_MESSAGES: Final = "llm.output_messages"
"""*content* Prefix: ``llm.output_messages.{i}.message.{role,content}``."""


class DocumentKeys(NamedTuple):
    """The four OpenInference keys of the document at one position of a retrieval span."""

    id: str
    content: str
    score: str
    metadata: str


def _document_keys(i: int) -> DocumentKeys:
    prefix = f"{RETRIEVAL_DOCUMENTS}.{i}.document."
    return DocumentKeys(prefix + "id", prefix + "content", prefix + "score", prefix + "metadata")


_DOC_KEYS: tuple[DocumentKeys, ...] = tuple(_document_keys(i) for i in range(64))


def document_keys(i: int) -> DocumentKeys:
    """Keys for document *i* (0-based, retrieval order) of a retrieval span; precomputed for i < 64."""
    return _DOC_KEYS[i] if 0 <= i < len(_DOC_KEYS) else _document_keys(i)


def input_message_keys(i: int) -> tuple[str, str]:
    """``(role key, content key)`` of input message *i* (OpenInference)."""
    return f"{LLM_INPUT_MESSAGES}.{i}.message.role", f"{LLM_INPUT_MESSAGES}.{i}.message.content"


def output_message_keys(i: int) -> tuple[str, str]:
    """``(role key, content key)`` of output message *i* (OpenInference)."""
    return f"{LLM_OUTPUT_MESSAGES}.{i}.message.role", f"{LLM_OUTPUT_MESSAGES}.{i}.message.content"


def output_tool_call_keys(i: int, j: int) -> tuple[str, str, str]:
    """``(id key, function name key, arguments key)`` of tool call *j* in output message *i*
    (OpenInference ``llm.output_messages.{i}.message.tool_calls.{j}.tool_call.*``)."""
    prefix = f"{LLM_OUTPUT_MESSAGES}.{i}.message.tool_calls.{j}.tool_call."
    return prefix + "id", prefix + "function.name", prefix + "function.arguments"


# --- OTel GenAI semantic conventions (open-telemetry/semantic-conventions-genai, development) --
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_OPERATION_RETRIEVAL: Final = "retrieval"
GEN_AI_OPERATION_CHAT: Final = "chat"
GEN_AI_OPERATION_EXECUTE_TOOL: Final = "execute_tool"
GEN_AI_OPERATION_INVOKE_AGENT: Final = "invoke_agent"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
"""The agent's name, as the app named it (LangGraph's graph name, a LlamaIndex agent's ``name``)."""
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""*content* JSON list of the model's reply messages (``role``, ``parts``: ``text`` / ``tool_call``)."""
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
"""*content* The tool call's arguments (as the model wrote them)."""
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
"""*content* What the tool returned."""
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""The conversation (session) the turn belongs to; also written as `SESSION_ID`."""
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""Required on inference spans: the provider as the client knows it (see
[`provider_of_endpoint`][ragaudit.tracing.conventions.provider_of_endpoint])."""
GEN_AI_PROVIDER_OPENAI: Final = "openai"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"
"""The retriever's name (the data source it searches)."""
GEN_AI_RETRIEVAL_QUERY_TEXT: Final = "gen_ai.retrieval.query.text"
"""*content* The retrieval query."""
GEN_AI_RETRIEVAL_DOCUMENTS: Final = "gen_ai.retrieval.documents"
"""JSON list of ``{id, score, rank, source}`` (semconv: each document SHOULD have id and score); an
unscored document has no ``score`` key, an unknown source no ``source`` (never null). A JSON string,
not a structured value: see ``docs/concepts/spans.md`` (Langfuse reads no OTLP maps)."""
GEN_AI_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
"""Event name: one per judge score, on the judge span."""
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
"""Event attribute (required): the score's name, e.g. ``faithfulness``."""
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
"""Event attribute: the score in [0, 1]; **absent** when the judge gave no score (never 0)."""
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
"""Event attribute: set only to `MISSING_SCORE_LABEL` when the score is missing."""
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
"""*content* Event attribute: the judge's reason (or, for a missing score, the judge's error)."""
MISSING_SCORE_LABEL: Final = "missing"
"""Label of a ``gen_ai.evaluation.result`` event whose score the judge did not give."""

# --- OTel general conventions ------------------------------------------------------------------
ATTR_ERROR_TYPE: Final = "error.type"
"""Low-cardinality error class (general semconv; also part of the evaluation event)."""
ERROR_TYPE_OTHER: Final = "_OTHER"
"""General semconv fallback of ``error.type`` when the failure names no exception type."""
ERROR_TYPE_JUDGE_ERROR: Final = "ragaudit.judge_error"
ERROR_TYPE_MISSING_SCORE: Final = "ragaudit.missing_score"
EVENT_EXCEPTION: Final = "exception"
ATTR_EXCEPTION_MESSAGE: Final = "exception.message"

# --- OTel general conventions: session, user, deployment -------------------------------------
SESSION_ID: Final = "session.id"
"""Turn span: the app's session / conversation id (Langfuse: the trace's session)."""
USER_ID: Final = "user.id"
"""Turn span: the app's user id (Langfuse: the trace's user)."""
DEPLOYMENT_ENVIRONMENT_KEYS: Final = ("deployment.environment.name", "deployment.environment")
"""Resource (or span) attributes naming the environment, in the order Langfuse reads them."""

# --- Langfuse (https://langfuse.com/integrations/native/opentelemetry#property-mapping) ---------
# Read against langfuse/langfuse v4.16 (packages/shared/src/server/otel/OtelIngestionProcessor.ts):
# once ``langfuse.observation.input`` or ``.output`` is set, ``input.value``/``output.value`` are
# ignored, so every span that has an input or output sets both Langfuse keys.
LANGFUSE_OBSERVATION_TYPE: Final = "langfuse.observation.type"
LANGFUSE_TYPE_SPAN: Final = "span"
LANGFUSE_TYPE_TOOL: Final = "tool"
LANGFUSE_TYPE_RETRIEVER: Final = "retriever"
LANGFUSE_TYPE_GENERATION: Final = "generation"
LANGFUSE_TYPE_EVALUATOR: Final = "evaluator"
LANGFUSE_TYPE_AGENT: Final = "agent"
LANGFUSE_OBSERVATION_INPUT: Final = "langfuse.observation.input"
"""*content* The observation's input: question (turn, retrieval), messages JSON (chat), arguments
(tool), what the judge was shown (judge, JSON)."""
LANGFUSE_OBSERVATION_OUTPUT: Final = "langfuse.observation.output"
"""The observation's output: answer (turn, chat; *content*), the document list (retrieval, ids,
scores, sources), the tool result (*content*), scores and reason (judge, JSON)."""
LANGFUSE_OBSERVATION_METADATA: Final = "langfuse.observation.metadata"
"""Prefix: ``langfuse.observation.metadata.<key>``, one filterable metadata entry per key."""
LANGFUSE_TRACE_METADATA: Final = "langfuse.trace.metadata"
"""Prefix: ``langfuse.trace.metadata.<key>`` (turn span): the turn's metadata on its trace."""
LANGFUSE_ENVIRONMENT: Final = "langfuse.environment"
"""Every span, when ``LANGFUSE_TRACING_ENVIRONMENT`` is set (else Langfuse reads the resource's
``deployment.environment[.name]``)."""
LANGFUSE_OBSERVATION_LEVEL: Final = "langfuse.observation.level"
"""``ERROR`` on failed turns, retrievals, generations and judgements."""
LANGFUSE_OBSERVATION_STATUS_MESSAGE: Final = "langfuse.observation.status_message"
LANGFUSE_OBSERVATION_MODEL_NAME: Final = "langfuse.observation.model.name"
LANGFUSE_OBSERVATION_USAGE_DETAILS: Final = "langfuse.observation.usage_details"
"""JSON ``{"input": n, "output": n, "total": n}``."""
LANGFUSE_TRACE_NAME: Final = "langfuse.trace.name"
"""Set on the turn span only when it is the root of its trace."""
LANGFUSE_TRACE_INPUT: Final = "langfuse.trace.input"
"""*content* Root turn only: the question."""
LANGFUSE_TRACE_OUTPUT: Final = "langfuse.trace.output"
"""*content* Root turn only: the answer."""

# --- ragaudit's own ----------------------------------------------------------------------------
ATTR_TURN_ID: Final = "ragaudit.turn.id"
ATTR_FRAMEWORK: Final = "ragaudit.framework"
ATTR_MODEL: Final = "ragaudit.model"
ATTR_CONTENT_CAPTURED: Final = "ragaudit.content_captured"
"""Bool: whether text content was recorded on this span."""
ATTR_QUERY_CHARS: Final = "ragaudit.query.chars"
ATTR_ANSWER_CHARS: Final = "ragaudit.answer.chars"
ATTR_PROMPT_CHARS: Final = "ragaudit.prompt.chars"
ATTR_DOCUMENT_CHARS: Final = "ragaudit.document.chars"
"""Int array: the length of each document's content, in retrieval order."""
ATTR_DOCUMENT_COUNT: Final = "ragaudit.document.count"
"""All documents of the turn or retrieval, recorded or not (see `ATTR_DOCUMENT_OMITTED`)."""
ATTR_DOCUMENT_IDS: Final = "ragaudit.document.ids"
"""String array of the turn's document ids in rank order, the top ``max_documents`` (Jaeger shows
an array as one JSON text: a tag search matches the whole list only)."""
ATTR_CITATIONS: Final = "ragaudit.citations"
"""JSON list of ``{doc_id, rank, marker, method}``; ``marker`` is null with content capture off."""
ATTR_CITATION_COUNT: Final = "ragaudit.citation.count"
ATTR_CITATION_DOC_IDS: Final = "ragaudit.citation.doc_ids"
ATTR_RELEVANT_IDS: Final = "ragaudit.relevant_ids"
"""JSON ``{doc id: label}``: the ground truth the retrieval metrics were computed from."""
ATTR_JUDGE_STATUS: Final = "ragaudit.judge.status"
"""On the turn span: what the Auditor did with it (queued, judged, failed, dropped, sampled_out)."""
ATTR_JUDGE_NAME: Final = "ragaudit.judge.name"
ATTR_JUDGE_REASON: Final = "ragaudit.judge.reason"
"""*content* The judge's reason."""
ATTR_JUDGE_REASON_CHARS: Final = "ragaudit.judge.reason.chars"
ATTR_JUDGE_ERROR: Final = "ragaudit.judge.error"
ATTR_JUDGE_LATENCY_S: Final = "ragaudit.judge.latency_s"
ATTR_JUDGE_MISSING_SCORES: Final = "ragaudit.judge.missing_scores"
"""String array: the scores the judge did not give (they have no ``ragaudit.judge.<score>`` key)."""
_JUDGE_PREFIX: Final = "ragaudit.judge."
_JUDGE_USAGE_PREFIX: Final = "ragaudit.judge.usage."
_RETRIEVAL_METRIC_PREFIX: Final = "ragaudit.retrieval."
LINK_TYPE: Final = "ragaudit.link.type"
LINK_TYPE_JUDGED_TURN: Final = "judged_turn"
"""Attribute value on the judge span's link to the turn span."""
LINK_REF_TYPE: Final = "opentracing.ref_type"
"""On the judge span's link when the turn is also its parent: `REF_TYPE_CHILD_OF`, so Jaeger
keeps the parent reference CHILD_OF (a link to the parent otherwise makes it FOLLOWS_FROM)."""
REF_TYPE_CHILD_OF: Final = "child_of"

ATTR_DOCUMENT_OMITTED: Final = "ragaudit.document.omitted"
"""Retrieval span: how many documents (the lowest ranked) were not recorded, beyond the cap."""
ATTR_DOCUMENT_USED: Final = "ragaudit.document.used"
"""Retrieval span, bool array (the recorded documents, in retrieval order): whether each reached the
model call that produced the answer; absent when that is not known."""
ATTR_DOCUMENT_USED_COUNT: Final = "ragaudit.document.used_count"
"""Retrieval span: how many of its documents reached the model call that produced the answer."""
ATTR_DOCUMENT_TRUNCATED_IDS: Final = "ragaudit.document.truncated_ids"
"""Turn span, string array: the evidence documents that reached the model in part (an app or a
middleware cut them on the way): the judge was shown that part (``RetrievedDoc.truncated``)."""
ATTR_TOOL_ARGUMENTS_CHARS: Final = "ragaudit.tool.arguments.chars"
ATTR_TOOL_OUTPUT_CHARS: Final = "ragaudit.tool.output.chars"

_JUDGE_SCORE_KEYS: dict[str, str] = {
    name: _JUDGE_PREFIX + name for name in ("faithfulness", "context_relevance", "answer_relevance")
}


def judge_score_key(score_name: str) -> str:
    """``ragaudit.judge.<score_name>``, e.g. ``ragaudit.judge.faithfulness``."""
    key = _JUDGE_SCORE_KEYS.get(score_name)
    return key if key is not None else _JUDGE_PREFIX + score_name


def judge_usage_key(usage_name: str) -> str:
    """``ragaudit.judge.usage.<usage_name>``, e.g. ``ragaudit.judge.usage.prompt_tokens``."""
    return _JUDGE_USAGE_PREFIX + usage_name


def retrieval_metric_key(metric: str) -> str:
    """``ragaudit.retrieval.<metric>``, e.g. ``ragaudit.retrieval.ndcg@10``."""
    return _RETRIEVAL_METRIC_PREFIX + metric


# --- the full audit (judge span) ---------------------------------------------------------------
# The turn and retrieval spans have ended when a background judge answers (the judge never holds
# the host's spans open), so the full audit's results go on the judge span, a child of the turn
# span; a judgement made before the turn span ends (inline) also puts the graded metrics (the
# retrieval metrics of the judge's grades) and the citation scores on the turn span and the grades
# on the retrieval spans. Graded metrics use retrieval_metric_key("graded_<metric>") (0.1.0:
# "judged_<metric>", read under the new name from span files by tracing.read_spans).
ATTR_DOCUMENT_GRADES: Final = "ragaudit.judge.document_grades"
"""JSON list of ``{rank, doc_id, grade, method}``; ``grade`` 0-3 (UMBRELA) or null when not given."""
ATTR_RETRIEVAL_DOCUMENT_GRADES: Final = "ragaudit.document.grades"
"""On a retrieval span, when the judgement came before the turn ended: JSON list of the recorded
documents' grades (0-3, null where not graded), in order."""
ATTR_CITATION_PRECISION: Final = "ragaudit.citation.precision"
"""Citations that hold / citations checked (absent when the answer cites nothing)."""
ATTR_CITATION_RECALL: Final = "ragaudit.citation.recall"
"""Supported sentences with a citation that holds / supported sentences (absent when undefined)."""
ATTR_CITATION_CHECKS: Final = "ragaudit.citation.checks"
"""JSON list of ``{sentence, doc_id, rank, marker, holds, verdict}``; marker null without content."""
ATTR_SENTENCES_COUNT: Final = "ragaudit.judge.sentences.count"
ATTR_SENTENCES_UNSUPPORTED: Final = "ragaudit.judge.sentences.unsupported"
"""Int: sentences judged ``unsupported`` or ``contradicted``."""
ATTR_SENTENCES_EVENTS_DROPPED: Final = "ragaudit.judge.sentences.events_dropped"
"""Int: sentence events left out above `MAX_SENTENCE_EVENTS` (problem sentences go first)."""
EVENT_SENTENCE: Final = "ragaudit.sentence"
"""One event per answer sentence on the judge span."""
ATTR_SENTENCE_INDEX: Final = "ragaudit.sentence.index"
ATTR_SENTENCE_VERDICT: Final = "ragaudit.sentence.verdict"
"""One of the five verdicts, or ``missing`` when the judge gave none."""
ATTR_SENTENCE_SUPPORTING_DOC_IDS: Final = "ragaudit.sentence.supporting_doc_ids"
ATTR_SENTENCE_TEXT: Final = "ragaudit.sentence.text"
"""*content* The sentence."""
MAX_SENTENCE_EVENTS: Final = 50
def langfuse_metadata_key(prefix: str, key: str) -> str:
    """``{prefix}.{key}`` for `LANGFUSE_OBSERVATION_METADATA` / `LANGFUSE_TRACE_METADATA`."""
    return f"{prefix}.{key}"


# --- judge identity ------------------------------------------------------------------------------
# On the judge span and on each of its gen_ai.evaluation.result events, so a score can always be
# traced to the judge that made it, and a change of judge model, endpoint or prompt shows as such.

ATTR_JUDGE_MODEL: Final = "ragaudit.judge.model"
"""The model the judge asked (``gen_ai.response.model`` holds the one that answered)."""
ATTR_JUDGE_ENDPOINT: Final = "ragaudit.judge.endpoint"
"""The judge endpoint's ``host[:port]``: never credentials, path or query."""
ATTR_JUDGE_PROTOCOL: Final = "ragaudit.judge.protocol"
"""The judge protocol's name (``full-audit``, ``three-score``, ``g-eval``, ...)."""
ATTR_JUDGE_PROTOCOL_VERSION: Final = "ragaudit.judge.protocol_version"
"""The judge protocol's wire version (``ragaudit-judge/3``): prompts and verdict schema of that version."""
ATTR_JUDGE_PROMPT_HASH: Final = "ragaudit.judge.prompt_hash"
"""First 16 hex digits of the SHA-256 of the judge's prompt template and verdict schema."""
ATTR_JUDGE_RESPONSE_ID: Final = "ragaudit.judge.response_id"
"""The completion id of the reply the scores were read from."""
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
"""OTel GenAI: the completion id (the same as ``ragaudit.judge.response_id`` on judge spans)."""

_IDENTITY_KEYS: Final = {
    "model": ATTR_JUDGE_MODEL,
    "endpoint": ATTR_JUDGE_ENDPOINT,
    "protocol": ATTR_JUDGE_PROTOCOL,
    "protocol_version": ATTR_JUDGE_PROTOCOL_VERSION,
    "prompt_hash": ATTR_JUDGE_PROMPT_HASH,
    "response_id": ATTR_JUDGE_RESPONSE_ID,
}


def judge_identity_attributes(identity: Mapping[str, object] | None) -> dict[str, str]:
    """The span and event attributes of a judge identity (``JudgeIdentity.to_dict()``); {} for None."""
    attrs: dict[str, str] = {}
    for key, attr in _IDENTITY_KEYS.items():
        value = identity.get(key) if identity is not None else None
        if isinstance(value, str) and value:
            attrs[attr] = value
    if ATTR_JUDGE_RESPONSE_ID in attrs:
        attrs[GEN_AI_RESPONSE_ID] = attrs[ATTR_JUDGE_RESPONSE_ID]
    return attrs


# --- conversations judged as a whole (ragaudit.sessions) ---------------------------------------------
SPAN_SESSION: Final = "ragaudit.session"
"""The session judge span: the root of a trace of its own, linked to every judged turn's span."""
LINK_TYPE_SESSION_TURN: Final = "session_turn"
"""Attribute value on the session span's link to each turn span."""
ATTR_SESSION_RESOLVED: Final = "ragaudit.session.resolved"
"""``yes``, ``partly`` or ``no``; absent when the judge gave none."""
ATTR_SESSION_RESOLVED_TURN: Final = "ragaudit.session.resolved_turn"
"""The 1-based turn where the user's need was resolved."""
ATTR_SESSION_GROUNDEDNESS: Final = "ragaudit.session.groundedness"
"""Computed from the turns' own sentence verdicts (never asked of the judge); absent when none had any."""
ATTR_SESSION_CONTRADICTIONS: Final = "ragaudit.session.contradictions"
"""How many cross-turn contradictions the judge found (absent when it gave no verdict)."""
ATTR_SESSION_REPEATED: Final = "ragaudit.session.repeated_turns"
"""How many turns the user had to repeat or rephrase (absent when the judge gave no verdict)."""
ATTR_SESSION_TURNS: Final = "ragaudit.session.turns"
"""Turns seen (and judged as the session)."""
ATTR_SESSION_TURNS_JUDGED: Final = "ragaudit.session.turns_judged"
"""Turns seen that had a judgement of their own."""
ATTR_SESSION_PARTIAL: Final = "ragaudit.session.partial"
"""True when the session was seen only in part (then ``ragaudit.session.missed.<reason>`` say what)."""
ATTR_SESSION_MISSED_PREFIX: Final = "ragaudit.session.missed."
"""Prefix: turns missed by reason (``sampled_out``, ``evicted``, ``unseen``)."""
ATTR_SESSION_ENDED: Final = "ragaudit.session.ended"
"""Why the session was judged: ``idle``, ``ended``, ``shutdown``."""
EVENT_SESSION_CONTRADICTION: Final = "ragaudit.session.contradiction"
"""Session span event per contradiction: both turns' and sentences' numbers (texts with capture on)."""


# --- evaluator identity (semantic-conventions-genai PR #359, proposed) ---------------------------
# Written next to ragaudit.judge.* (kept) on the judge span and on every gen_ai.evaluation.result
# record. The PR asks for values the evaluator really exposes, never synthesised ones: the judge's
# name is ragaudit's identifier of the evaluator; what makes two of its results comparable is the
# model asked plus the protocol and the exact prompt, so those are its version.
GEN_AI_EVALUATION_EVALUATOR_ID: Final = "gen_ai.evaluation.evaluator.id"
"""The judge's name (``ragaudit.judge.name``), with its model for an LLM judge: ``chat/gpt-4o-mini``."""
GEN_AI_EVALUATION_EVALUATOR_VERSION: Final = "gen_ai.evaluation.evaluator.version"
"""The judge protocol's wire version and prompt hash: ``ragaudit-full-audit/1+3f2a…``."""
GEN_AI_EVALUATION_EVALUATOR_TYPE: Final = "gen_ai.evaluation.evaluator.type"
"""The mechanism that decides the score: `EVALUATOR_TYPE_LLM_JUDGE` for an LLM judge; not
set for other judges (the PR sets a type only where the mechanism is known)."""
EVALUATOR_TYPE_LLM_JUDGE: Final = "llm_judge"
GEN_AI_EVALUATION_REFERENCE_SET_ID: Final = "gen_ai.evaluation.reference_set.id"
"""The reference set (dataset) the judgement was made against: the turn's
`REFERENCE_SET_METADATA_KEY`, absent when the app names none."""
REFERENCE_SET_METADATA_KEY: Final = "ragaudit.reference_set.id"
"""Turn metadata key (run metadata, instrument tags) that names the reference set a run is judged against."""


def evaluator_attributes(judge: str, identity: Mapping[str, object] | None,
                         metadata: Mapping[str, object] | None = None) -> dict[str, str]:
    """The ``gen_ai.evaluation.evaluator.*`` / ``reference_set.id`` attributes of a judgement by
    *judge* with *identity* (``JudgeIdentity.to_dict()``) of a turn with *metadata*."""
    identity = identity or {}
    model, prompt_hash = identity.get("model"), identity.get("prompt_hash")
    protocol = identity.get("protocol_version")  # the protocol's wire version (its name is "protocol")
    attrs: dict[str, str] = {GEN_AI_EVALUATION_EVALUATOR_ID: f"{judge}/{model}" if model else judge}
    version = "+".join(v for v in (protocol, prompt_hash) if isinstance(v, str) and v)
    if version:
        attrs[GEN_AI_EVALUATION_EVALUATOR_VERSION] = version
    if model:
        attrs[GEN_AI_EVALUATION_EVALUATOR_TYPE] = EVALUATOR_TYPE_LLM_JUDGE
    reference_set = (metadata or {}).get(REFERENCE_SET_METADATA_KEY)
    if isinstance(reference_set, str) and reference_set:
        attrs[GEN_AI_EVALUATION_REFERENCE_SET_ID] = reference_set
    return attrs


# Well-known hosts -> gen_ai.provider.name (the registry's values). Any other host is reached with
# the OpenAI chat-completions client, which the convention names "openai" ("based on the
# instrumentation's best knowledge": a proxy or local server speaking that API).
_PROVIDER_HOSTS: Final = (
    ("openai.azure.com", "azure.ai.openai"), ("services.ai.azure.com", "azure.ai.inference"),
    ("api.anthropic.com", "anthropic"), ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("aiplatform.googleapis.com", "gcp.vertex_ai"), ("api.groq.com", "groq"),
    ("api.deepseek.com", "deepseek"), ("api.mistral.ai", "mistral_ai"), ("api.x.ai", "x_ai"),
    ("api.perplexity.ai", "perplexity"), ("cohere.com", "cohere"), ("cohere.ai", "cohere"),
    ("api.moonshot.ai", "moonshot_ai"), ("amazonaws.com", "aws.bedrock"),
)


def provider_of_endpoint(host: str | None) -> str:
    """``gen_ai.provider.name`` of an OpenAI-compatible endpoint at *host* (``host[:port]``)."""
    name = (host or "").rsplit(":", 1)[0].lower() if host and not host.startswith("[") else (host or "")
    for suffix, provider in _PROVIDER_HOSTS:
        if name == suffix or name.endswith("." + suffix):
            return provider
    return GEN_AI_PROVIDER_OPENAI


def error_type_of(error: str | None) -> str:
    """``error.type`` of an error text: the exception's (qualified) class name it starts with
    (``openai.APIConnectionError: ...``), else ``_OTHER`` (the general convention's fallback)."""
    from ..content import error_type

    found = error_type(error)
    return found if found != "Error" or (error or "").lstrip().startswith("Error") else ERROR_TYPE_OTHER


# --- score metrics (OpenTelemetry metrics; the table of docs/guides/alerts.md) -------------------
# One instrument per score so that an alert reads one series family; attributes a team groups by
# and nothing else: never the question, an id or free text (every value is cut to
# METRIC_VALUE_MAX_CHARS, and only str/int/bool metadata values are read).
METER_NAME: Final = "ragaudit"
"""The instrumentation scope of ragaudit's metrics (the worker's own are ``ragaudit.worker``)."""
ATTR_SERVICE_NAME: Final = "service.name"
"""On a metric point: the judged app's service (the worker reads it from the app's resource);
in-process the app's own resource carries it, so the point does not."""
ATTR_RUN_NAME: Final = "ragaudit.run.name"
"""The chain, graph, route or query engine that answered (the turn's ``run_name`` metadata)."""
ATTR_PROMPT_VERSION: Final = "ragaudit.prompt.version"
"""The app's prompt version: turn metadata ``prompt_version`` or ``ragaudit.prompt.version``."""
PROMPT_VERSION_METADATA_KEYS: Final = ("ragaudit.prompt.version", "prompt_version")
ATTR_UNJUDGED_REASON: Final = "ragaudit.reason"
"""Why a turn was not judged (``UNJUDGED_REASONS``) or cost control kept it from the judge."""
ATTR_CITATION_RESULT: Final = "ragaudit.citation.result"
"""A citation check's outcome: ``holds``, ``fails`` or ``unchecked`` (its sentence has no verdict)."""
ATTR_SESSION_CONTRADICTED: Final = "ragaudit.session.contradicted"
"""On ``ragaudit.sessions``: True when the session judge found a contradiction between turns."""
METRIC_VALUE_MAX_CHARS: Final = 64
TURN_METRIC_ATTRIBUTES: Final = (ATTR_SERVICE_NAME, ATTR_RUN_NAME, ATTR_MODEL, ATTR_JUDGE_NAME, ATTR_PROMPT_VERSION)
"""Every turn metric's attributes (each only when known)."""
SCORE_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""Histogram bucket bounds of every score in [0, 1] (the SDK's default bounds are for milliseconds)."""


class MetricSpec(NamedTuple):
    """One metric ragaudit records: its OTel name, instrument, unit, description, attributes."""

    name: str
    instrument: str  # "histogram" or "counter"
    unit: str
    description: str
    attributes: tuple[str, ...]


SCORE_METRICS: Final = {  # AuditRecord value -> histogram
    "faithfulness": "ragaudit.score.faithfulness", "context_relevance": "ragaudit.score.context_relevance",
    "answer_relevance": "ragaudit.score.answer_relevance",
    "citation_precision": "ragaudit.score.citation_precision", "citation_recall": "ragaudit.score.citation_recall",
    "graded_ndcg@10": "ragaudit.score.graded_ndcg",
}
METRIC_TURNS: Final = "ragaudit.turns"
METRIC_SENTENCES: Final = "ragaudit.sentences"
METRIC_CITATIONS: Final = "ragaudit.citations"
METRIC_SESSIONS: Final = "ragaudit.sessions"
METRIC_SESSION_GROUNDEDNESS: Final = "ragaudit.session.groundedness"
METRIC_JUDGE_TOKENS: Final = "ragaudit.judge.tokens"
METRIC_JUDGE_COST: Final = "ragaudit.judge.cost"
METRIC_JUDGE_NOT_SENT: Final = "ragaudit.judge.not_sent"
_SESSION_ATTRS: Final = (ATTR_JUDGE_NAME,)  # a session's turns keep no metadata

METRICS: Final[tuple[MetricSpec, ...]] = (
    *(MetricSpec(metric, "histogram", "1", f"{score.replace('_', ' ').capitalize()} of each judged turn, in [0, 1]",
                 TURN_METRIC_ATTRIBUTES) for score, metric in SCORE_METRICS.items()),
    MetricSpec(METRIC_TURNS, "counter", "{turn}", "Finished turns by outcome (judged, failed, unjudged) and reason",
               (*TURN_METRIC_ATTRIBUTES, ATTR_JUDGE_STATUS, ATTR_UNJUDGED_REASON)),
    MetricSpec(METRIC_SENTENCES, "counter", "{sentence}", "Answer sentences by the judge's verdict",
               (*TURN_METRIC_ATTRIBUTES, ATTR_SENTENCE_VERDICT)),
    MetricSpec(METRIC_CITATIONS, "counter", "{citation}", "Citation checks by result (holds, fails, unchecked)",
               (*TURN_METRIC_ATTRIBUTES, ATTR_CITATION_RESULT)),
    MetricSpec(METRIC_SESSIONS, "counter", "{session}", "Judged sessions by verdict",
               (*_SESSION_ATTRS, ATTR_SESSION_RESOLVED, ATTR_SESSION_CONTRADICTED, ATTR_SESSION_PARTIAL)),
    MetricSpec(METRIC_SESSION_GROUNDEDNESS, "histogram", "1", "Groundedness of each judged session, in [0, 1]",
               _SESSION_ATTRS),
    MetricSpec(METRIC_JUDGE_TOKENS, "counter", "{token}", "Tokens of judge calls (prompt + completion)",
               (GEN_AI_REQUEST_MODEL,)),
    MetricSpec(METRIC_JUDGE_COST, "counter", "USD", "Cost of judge calls", (GEN_AI_REQUEST_MODEL,)),
    MetricSpec(METRIC_JUDGE_NOT_SENT, "counter", "{turn}", "Turns cost control kept from the judge, by reason",
               (ATTR_UNJUDGED_REASON,)),
)
"""Every metric of `METER_NAME` (the score metrics exporter's, then the cost controller's)."""
