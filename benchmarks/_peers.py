"""Run a peer's faithfulness, answer relevance and context relevance metrics on turns (a child process).

    <peer venv>/bin/python benchmarks/_peers.py {ragas|deepeval|trulens} TURNS.json BASE_URL

Runs in the peers' own virtualenv (``.venv-peers``: ragas, deepeval, trulens and their
dependencies, kept apart so they cannot break ragaudit's), against the loopback chat-completions
server ``judge_throughput.py`` started; the parent counts the calls and tokens in that server's
request log. Prints one JSON line: the peer, its version, the metrics, scores and errors per turn.
Embeddings (RAGAS answer relevancy) are computed locally with a deterministic hashing embedding:
only chat calls are counted, as for ragaudit.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
import zlib
from importlib import metadata
from typing import Any

METRICS = {
    "ragas": ["Faithfulness", "AnswerRelevancy (strictness 3)", "ContextRelevance"],
    "deepeval": ["FaithfulnessMetric", "AnswerRelevancyMetric", "ContextualRelevancyMetric"],
    "trulens": ["groundedness_measure_with_cot_reasons (sentences split by the model)", "relevance_with_cot_reasons",
                "context_relevance_with_cot_reasons (per chunk)"],
}
MODEL = "gpt-4o-mini"


def _embed(text: str, dim: int = 64) -> list[float]:
    vec = [0.0] * dim
    for word in text.lower().split():
        vec[zlib.crc32(word.encode()) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def run_ragas(turns: list[dict[str, Any]], base_url: str) -> list[dict[str, Any]]:
    from openai import AsyncOpenAI
    from ragas.embeddings.base import BaseRagasEmbedding
    from ragas.llms import llm_factory
    from ragas.metrics.collections import AnswerRelevancy, ContextRelevance, Faithfulness

    class HashEmbedding(BaseRagasEmbedding):
        def embed_text(self, text: str, **kwargs: Any) -> list[float]:
            return _embed(text)

        async def aembed_text(self, text: str, **kwargs: Any) -> list[float]:
            return _embed(text)

    llm = llm_factory(MODEL, client=AsyncOpenAI(base_url=base_url, api_key="dummy", max_retries=0))
    metrics = {"faithfulness": Faithfulness(llm=llm), "answer_relevance": AnswerRelevancy(llm=llm,
               embeddings=HashEmbedding()), "context_relevance": ContextRelevance(llm=llm)}

    async def one(turn: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        contexts = turn["contexts"]
        calls = {
            "faithfulness": lambda: metrics["faithfulness"].ascore(
                user_input=turn["query"], response=turn["answer"], retrieved_contexts=contexts),
            "answer_relevance": lambda: metrics["answer_relevance"].ascore(
                user_input=turn["query"], response=turn["answer"]),
            "context_relevance": lambda: metrics["context_relevance"].ascore(
                user_input=turn["query"], retrieved_contexts=contexts),
        }
        for name, call in calls.items():
            try:
                out[name] = float((await call()).value)
            except Exception as exc:
                out[name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        return out

    async def main() -> list[dict[str, Any]]:
        return [await one(turn) for turn in turns]

    return asyncio.run(main())


def run_deepeval(turns: list[dict[str, Any]], base_url: str) -> list[dict[str, Any]]:
    from deepeval.metrics import AnswerRelevancyMetric, ContextualRelevancyMetric, FaithfulnessMetric
    from deepeval.models import GPTModel
    from deepeval.test_case import LLMTestCase

    model = GPTModel(model=MODEL, api_key="dummy", base_url=base_url)
    results = []
    for turn in turns:
        case = LLMTestCase(input=turn["query"], actual_output=turn["answer"], retrieval_context=turn["contexts"])
        out: dict[str, Any] = {}
        for name, metric in (("faithfulness", FaithfulnessMetric(model=model, async_mode=False)),
                             ("answer_relevance", AnswerRelevancyMetric(model=model, async_mode=False)),
                             ("context_relevance", ContextualRelevancyMetric(model=model, async_mode=False))):
            try:
                out[name] = float(metric.measure(case, _show_indicator=False))
            except Exception as exc:
                out[name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        results.append(out)
    return results


def run_trulens(turns: list[dict[str, Any]], base_url: str) -> list[dict[str, Any]]:
    from trulens.core.metric.metric import GroundednessConfigs
    from trulens.providers.openai import OpenAI as TruOpenAI

    provider = TruOpenAI(model_engine=MODEL, base_url=base_url, api_key="dummy")
    # TruLens tries OpenAI's Responses API first and falls back to chat completions for endpoints
    # that say they lack it; the loopback server speaks chat completions only, so start there.
    provider._set_capabilities({"responses_api": False, "cfg": False})
    # Sentences split by the model, not NLTK (whose punkt data is a download).
    split = GroundednessConfigs(use_sent_tokenize=False, filter_trivial_statements=False)
    return [_trulens_turn(provider, split, turn) for turn in turns]


def _trulens_turn(provider: Any, split: Any, turn: dict[str, Any]) -> dict[str, Any]:
    source = "\n\n".join(turn["contexts"])
    calls = {
        "faithfulness": lambda: provider.groundedness_measure_with_cot_reasons(
            source, turn["answer"], groundedness_configs=split)[0],
        "answer_relevance": lambda: provider.relevance_with_cot_reasons(turn["query"], turn["answer"])[0],
        "context_relevance": lambda: sum(provider.context_relevance_with_cot_reasons(turn["query"], chunk)[0]
                                         for chunk in turn["contexts"]) / len(turn["contexts"]),
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        try:
            out[name] = float(call())
        except Exception as exc:
            out[name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    return out


RUNNERS = {"ragas": run_ragas, "deepeval": run_deepeval, "trulens": run_trulens}
DISTRIBUTIONS = {"ragas": "ragas", "deepeval": "deepeval", "trulens": "trulens-core"}


def main() -> int:
    peer, turns_path, base_url = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.update({"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "dummy", "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
                       "RAGAS_DO_NOT_TRACK": "true", "TRULENS_OTEL_TRACING": "0", "DO_NOT_TRACK": "1"})
    with open(turns_path) as f:
        turns = json.load(f)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # progress bars and banners stay out of the result line
    started = time.perf_counter()
    scores = RUNNERS[peer](turns, base_url)
    elapsed = time.perf_counter() - started
    sys.stdout = real_stdout
    errors = sorted({v for row in scores for v in row.values() if isinstance(v, str)})
    print(json.dumps({"peer": peer, "version": metadata.version(DISTRIBUTIONS[peer]), "metrics": METRICS[peer],
                      "turns": len(turns), "scores": scores, "errors": errors, "elapsed_s": elapsed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
