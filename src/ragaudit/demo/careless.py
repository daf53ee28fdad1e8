"""The demo's **careless generator**: the offline stand-in with scripted mistakes, to show the audit catch them.

The extractive stand-in (`extractive_answer`) only copies retrieved
sentences, so every answer it gives is faithful and the audit has nothing to catch. Real models
make mistakes; this variant makes three of the common ones, deterministically and offline, each on
one demo question, and labels every answer `CARELESS_LABEL`:

- **wrong number** (q1, the refund window): the first figure of the answer is doubled (30 days
  becomes 60 days);
- **citation to the wrong document** (q2, size exchanges): the first ``[n]`` marker points at
  another retrieved document;
- **unsupported claim** (q5, a gift without a receipt): a sentence no document says is added, with
  a citation.

Every other question gets the stand-in's faithful answer. ``ragaudit demo --careless`` runs it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .generator import STANDIN_LABEL, Passage, extractive_answer

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from llama_index.core.llms import CustomLLM

__all__ = [
    "CARELESS_LABEL",
    "CARELESS_MODEL",
    "MISTAKES",
    "Mistake",
    "careless_answer",
    "langchain_careless",
    "llamaindex_careless",
    "mistake_for",
]

CARELESS_MODEL = "ragaudit-careless-stand-in"
"""The model name the careless generator reports."""

CARELESS_LABEL = "[offline careless generator: scripted mistakes]"
"""How every careless answer starts."""

Mistake = Literal["wrong_number", "wrong_citation", "unsupported_claim"]

MISTAKES: dict[str, Mistake] = {"q1": "wrong_number", "q2": "wrong_citation", "q5": "unsupported_claim"}
"""Which demo question gets which mistake."""

MADE_UP_CLAIM = "You can also ask for a cash refund at any branch, no questions asked"
"""The unsupported claim: no document of the knowledge base says it."""

_NUMBER_RE = re.compile(r"(?<![\[\w.])(\d+)(?![\]\w])")
_MARKER_RE = re.compile(r"\[(\d+)\]")


def mistake_for(question: str) -> Mistake | None:
    """The mistake planted in the answer to *question* (a demo question's text), or None."""
    from .kb import QUESTIONS

    normalised = " ".join(question.split()).casefold()
    for q in QUESTIONS:
        if " ".join(q.text.split()).casefold() == normalised:
            return MISTAKES.get(q.id)
    return None


def careless_answer(question: str, passages: Sequence[Passage]) -> str:
    """The stand-in's answer to *question*, with the mistake `mistake_for` plants (if any)."""
    answer = extractive_answer(question, passages).replace(STANDIN_LABEL, CARELESS_LABEL, 1)
    mistake = mistake_for(question)
    if mistake == "wrong_number":
        match = _NUMBER_RE.search(answer)
        if match is not None:
            return answer[: match.start()] + str(int(match.group(1)) * 2) + answer[match.end() :]
        mistake = "unsupported_claim"
    if mistake == "wrong_citation":
        numbers = sorted({p.number for p in passages})
        match = _MARKER_RE.search(answer)
        others = [n for n in numbers if match is not None and n != int(match.group(1))]
        if match is not None and others:
            return answer[: match.start()] + f"[{others[0]}]" + answer[match.end() :]
        mistake = "unsupported_claim"
    if mistake == "unsupported_claim":
        first = min((p.number for p in passages), default=1)
        return f"{answer} {MADE_UP_CLAIM} [{first}]."
    return answer


def langchain_careless() -> BaseChatModel:
    """The careless generator as a LangChain chat model. Needs ``langchain-core``."""
    from .generator import _langchain_standin_class

    base: Any = _langchain_standin_class()

    class CarelessChatModel(base):  # type: ignore[misc, valid-type]
        """The extractive stand-in with scripted mistakes (see `ragaudit.demo.careless`)."""

        model_name: str = CARELESS_MODEL

        @property
        def _llm_type(self) -> str:
            return "ragaudit-careless"

        def _answer(self, question: str, passages: Sequence[Passage]) -> str:
            return careless_answer(question, passages)

    model: BaseChatModel = CarelessChatModel()
    return model


def llamaindex_careless() -> CustomLLM:
    """The careless generator as a LlamaIndex LLM. Needs ``llama-index-core``."""

    from .generator import _llamaindex_standin_class

    base: Any = _llamaindex_standin_class()

    class CarelessLLM(base):  # type: ignore[misc, valid-type]
        """The extractive stand-in with scripted mistakes (see `ragaudit.demo.careless`)."""

        standin_model: ClassVar[str] = CARELESS_MODEL

        def _answer(self, question: str, passages: Sequence[Passage]) -> str:
            return careless_answer(question, passages)

        # complete and stream_complete are the stand-in's: they answer with self._answer.

    llm: CustomLLM = CarelessLLM()
    return llm
