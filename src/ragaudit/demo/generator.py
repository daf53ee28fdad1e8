"""The demo's generators: an offline extractive stand-in, and the frameworks' own OpenAI models.

Both read the same prompt: `GENERATOR_SYSTEM_PROMPT` plus a user message with the numbered
context (``[1] (source: return_policy.pdf, section: exchanges)`` and the document text) and the
question (`format_user_prompt`).

The **stand-in** (`extractive_answer`) is not a language model and does not pretend to be
one: it answers only with sentences copied from the retrieved documents — those that best match
the question's content words — cites each as ``[n]``, and starts with `STANDIN_LABEL`. When no
sentence matches well it says the retrieved documents do not say. So it never adds a fact, and
the demo's signal is in context and answer relevance.

Framework classes are built on first use, so this module imports without any framework:
`langchain_standin` (a LangChain ``BaseChatModel``) / `langchain_openai` (``ChatOpenAI``)
and `llamaindex_standin` (a LlamaIndex ``CustomLLM``) / `llamaindex_openai` (``OpenAILike``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from .._text import content_terms, is_number, sentence_spans

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from llama_index.core.llms import LLM, CustomLLM

__all__ = [
    "DEFAULT_MODEL",
    "GENERATOR_SYSTEM_PROMPT",
    "LLAMAINDEX_PROMPT",
    "STANDIN_LABEL",
    "STANDIN_MODEL",
    "USER_PROMPT_TEMPLATE",
    "Passage",
    "extractive_answer",
    "format_context",
    "format_passage",
    "format_user_prompt",
    "langchain_openai",
    "langchain_standin",
    "llamaindex_openai",
    "llamaindex_standin",
    "model_from_env",
    "parse_prompt",
]

STANDIN_MODEL = "ragaudit-extractive-stand-in"
"""The model name the stand-in reports (in spans and audit lines)."""

STANDIN_LABEL = "[offline extractive stand-in: sentences copied from the retrieved documents]"
"""How every stand-in answer starts. In brackets, so judges treat it like a citation marker."""

DEFAULT_MODEL = "gpt-4o-mini"
"""The real model used when ``RAGAUDIT_MODEL`` is not set."""

GENERATOR_SYSTEM_PROMPT = (
    "You are a customer-service assistant for a shop. Answer the question using only the numbered "
    "context documents. Cite each document you use as [n]. If the documents do not contain the "
    "answer, say that the retrieved documents do not say, and do not guess."
)
"""The generator's system prompt (also what tells a scripted test server a generation request)."""

USER_PROMPT_TEMPLATE = "Context:\n{context}\n\nQuestion: {question}"
"""The user message: ``{context}`` (numbered documents) and ``{question}``."""

LLAMAINDEX_PROMPT = GENERATOR_SYSTEM_PROMPT + "\n\n" + USER_PROMPT_TEMPLATE.format(
    context="{context_str}", question="{query_str}") + "\nAnswer:"
"""The same prompt as one text template, for LlamaIndex's ``text_qa_template``."""

MIN_COVERAGE = 0.4
"""A sentence must cover this share of the question's (weighted) content words to be quoted."""

_RELATIVE = 0.6  # further sentences must reach this share of the best sentence's coverage
_MAX_SENTENCES = 3
_HEADER_RE = re.compile(r"^\[(\d+)\][ \t]*(.*)$", re.MULTILINE)
_TERMINAL = ".!?"


def model_from_env() -> str:
    """The real model to use: ``RAGAUDIT_MODEL``, default `DEFAULT_MODEL`."""
    return os.environ.get("RAGAUDIT_MODEL") or DEFAULT_MODEL


@dataclass(frozen=True, slots=True)
class Passage:
    """One numbered context document as the generator sees it."""

    number: int
    text: str
    header: str = ""


def format_passage(number: int, text: str, metadata: Mapping[str, Any] | None = None) -> str:
    """``[n] (source: ..., section: ...)`` then the text on the next line."""
    metadata = metadata or {}
    notes = [f"{key}: {metadata[key]}" for key in ("source", "section") if metadata.get(key)]
    header = f"[{number}]" + (f" ({', '.join(notes)})" if notes else "")
    return f"{header}\n{text}"


def format_context(documents: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Number ``(text, metadata)`` pairs from 1 and join them with blank lines."""
    return "\n\n".join(format_passage(i, text, meta) for i, (text, meta) in enumerate(documents, 1))


def format_user_prompt(question: str, context: str) -> str:
    """The user message: the numbered context, then the question."""
    return USER_PROMPT_TEMPLATE.format(context=context, question=question)


def parse_prompt(prompt: str) -> tuple[str, list[Passage]]:
    """The question and the numbered passages of a prompt made by `format_user_prompt`.

    Text without ``Context:``/``Question:`` parts is taken as the question with no context.
    """
    start = prompt.find("Context:\n")
    split = prompt.rfind("\n\nQuestion: ")
    if start < 0 or split < start:
        question = prompt.strip()
        return question.removeprefix("Question:").strip(), []
    context = prompt[start + len("Context:\n") : split]
    question = prompt[split + len("\n\nQuestion: ") :]
    question = re.sub(r"\n\s*Answer:\s*$", "", question).strip()
    return question, _passages(context)


def _passages(context: str) -> list[Passage]:
    headers = list(_HEADER_RE.finditer(context))
    if not headers:
        return [Passage(1, context.strip())] if context.strip() else []
    out = []
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(context)
        out.append(Passage(int(match.group(1)), context[match.end() : end].strip(), match.group(2).strip()))
    return out


@dataclass(frozen=True, slots=True)
class _Sentence:
    number: int
    position: int
    text: str
    terms: frozenset[str]


def extractive_answer(question: str, passages: Sequence[Passage]) -> str:
    """Answer *question* with sentences copied from *passages*, each cited ``[n]``; never adds a fact.

    Question words are weighted by how rare they are among the context's sentences (a word every
    sentence shares says little); a sentence is quoted when it covers at least
    `MIN_COVERAGE` of that weight. Up to three sentences, in document order. When none
    qualifies the answer says the retrieved documents do not say, naming the question words that
    appear nowhere in them.
    """
    terms = {key: word for key, word in content_terms(question).items() if not is_number(key)}
    sentences = [
        _Sentence(p.number, i, p.text[s:e], frozenset(content_terms(p.text[s:e])))
        for p in passages
        for i, (s, e) in enumerate(sentence_spans(p.text))
    ]
    if not terms or not sentences:
        return _decline(question, terms, sentences)
    df = {t: sum(1 for s in sentences if t in s.terms) for t in terms}
    weight = {t: math.log(1.0 + len(sentences) / max(df[t], 1)) for t in terms}
    total = sum(weight.values())
    scored = [(sum(weight[t] for t in terms if t in s.terms) / total, s) for s in sentences]
    best = max(cov for cov, _ in scored)
    if best < MIN_COVERAGE:
        return _decline(question, terms, sentences)
    floor = max(MIN_COVERAGE, _RELATIVE * best)
    ranked = sorted((x for x in scored if x[0] >= floor), key=lambda x: (-x[0], x[1].number, x[1].position))
    chosen = sorted((s for _, s in ranked[:_MAX_SENTENCES]), key=lambda s: (s.number, s.position))
    return " ".join([STANDIN_LABEL, *(_cite(s.text, s.number) for s in chosen)])


def _cite(sentence: str, number: int) -> str:
    # After the sentence, as models most often write it ("... refund. [1]"): the one sentence splitter
    # keeps such a trailing citation with the sentence before it.
    if sentence and sentence[-1] in _TERMINAL:
        return f"{sentence} [{number}]"
    return f"{sentence}. [{number}]"


def _decline(question: str, terms: Mapping[str, str], sentences: Sequence[_Sentence]) -> str:
    if not sentences:
        why = "nothing was retrieved"
    else:
        seen = frozenset().union(*(s.terms for s in sentences))
        missing = [word for key, word in terms.items() if key not in seen]
        if missing:
            as_written = {w.lower(): w for w in re.findall(r"[^\W\d_]+(?:['’][^\W\d_]+)*", question)}
            named = [f"“{as_written.get(w, w)}”" for w in missing]
            listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " or " + named[-1]
            why = f"none of them mentions {listed}"
        else:
            why = "no passage addresses the question directly"
    return f"{STANDIN_LABEL} The retrieved documents do not say: {why}."


# -- LangChain ----------------------------------------------------------------------------------


def _message_text(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    parts = []
    for part in content or ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "".join(parts)


def _role(message: Any) -> str:
    kind = getattr(message, "type", "human")
    return {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}.get(kind, "user")


@lru_cache(maxsize=1)
def _langchain_standin_class() -> type:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ExtractiveChatModel(BaseChatModel):
        """The offline extractive stand-in as a LangChain chat model (see `extractive_answer`).

        It reads the question and the numbered context from the last user message.
        """

        model_name: str = STANDIN_MODEL

        @property
        def _llm_type(self) -> str:
            return "ragaudit-extractive"

        def _answer(self, question: str, passages: Sequence[Passage]) -> str:
            """The answer; a subclass (the careless demo's) answers its own way."""
            return extractive_answer(question, passages)

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.model_name}

        def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            users = [m for m in messages if _role(m) == "user"]
            question, passages = parse_prompt(_message_text(users[-1]) if users else "")
            answer = self._answer(question, passages)
            message = AIMessage(content=answer, response_metadata={"model_name": self.model_name})
            return ChatResult(generations=[ChatGeneration(message=message)],
                              llm_output={"model_name": self.model_name})

    return ExtractiveChatModel


def _endpoint(base_url: str | None, api_key: str | None) -> tuple[str | None, str | None]:
    """The endpoint and key for a real model: the arguments, else ``OPENAI_BASE_URL``/``OPENAI_API_KEY``."""
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
    if api_key is None and base_url is not None:
        # A local OpenAI-compatible server (vLLM, Ollama, a test server) needs no key, but the SDK
        # refuses to start without one.
        api_key = "not-needed"
    return base_url, api_key


def langchain_standin() -> BaseChatModel:
    """The offline extractive stand-in as a LangChain chat model. Needs ``langchain-core``."""
    model: BaseChatModel = _langchain_standin_class()()
    return model


def langchain_openai(model: str | None = None, *, base_url: str | None = None,
                     api_key: str | None = None, timeout_s: float = 60.0) -> BaseChatModel:
    """LangChain's ``ChatOpenAI`` (``langchain-openai``) on any OpenAI-compatible endpoint, temperature 0;
    *model* defaults to `model_from_env`."""
    from langchain_openai import ChatOpenAI

    base_url, api_key = _endpoint(base_url, api_key)
    settings: dict[str, Any] = {"base_url": base_url} if base_url else {}
    if api_key:
        settings["api_key"] = api_key
    chat: BaseChatModel = ChatOpenAI(model=model or model_from_env(), temperature=0.0, timeout=timeout_s,
                                     max_retries=2, **settings)
    return chat


# -- LlamaIndex ---------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _llamaindex_standin_class() -> type:
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback

    class ExtractiveLLM(CustomLLM):
        """The offline extractive stand-in as a LlamaIndex LLM (see `extractive_answer`).

        Use it with `LLAMAINDEX_PROMPT` as the query engine's ``text_qa_template``.
        """

        standin_model: ClassVar[str] = STANDIN_MODEL

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name=self.standin_model, context_window=32_768, num_output=512)

        def _answer(self, question: str, passages: Sequence[Passage]) -> str:
            """The answer; a subclass (the careless demo's) answers its own way."""
            return extractive_answer(question, passages)

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            question, passages = parse_prompt(prompt)
            return CompletionResponse(text=self._answer(question, passages))

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False,
                            **kwargs: Any) -> Iterator[CompletionResponse]:
            text = self.complete(prompt, formatted=formatted).text

            def gen() -> Iterator[CompletionResponse]:
                yield CompletionResponse(text=text, delta=text)

            return gen()

    return ExtractiveLLM


def llamaindex_standin() -> CustomLLM:
    """The offline extractive stand-in as a LlamaIndex LLM. Needs ``llama-index-core``."""
    llm: CustomLLM = _llamaindex_standin_class()()
    return llm


def llamaindex_openai(model: str | None = None, *, base_url: str | None = None,
                      api_key: str | None = None, timeout_s: float = 60.0) -> LLM:
    """LlamaIndex's ``OpenAILike`` (``llama-index-llms-openai-like``: the OpenAI LLM for any
    OpenAI-compatible endpoint and model name) as a chat model, temperature 0; *model* defaults to
    `model_from_env`."""
    from llama_index.llms.openai_like import OpenAILike

    base_url, api_key = _endpoint(base_url, api_key)
    settings: dict[str, Any] = {"api_base": base_url} if base_url else {}
    if api_key:
        settings["api_key"] = api_key
    llm: LLM = OpenAILike(model=model or model_from_env(), temperature=0.0, timeout=timeout_s, max_retries=2,
                          is_chat_model=True, context_window=128_000, **settings)
    return llm
