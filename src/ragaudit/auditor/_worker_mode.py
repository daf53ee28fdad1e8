"""``Auditor(mode="worker")``: the app records its turns and ``ragaudit worker`` judges them.

In this mode the Auditor judges nothing. The integration handlers record every turn as they always
do -- the turn span with the question and answer, its retrieval spans with the documents, the model
call with the messages that reached the model, all with OpenInference attributes -- and the app's
OTLP exporter (``ragaudit.tracing.configure()``, or any OTel SDK setup) sends them to the
OpenTelemetry Collector or straight to ``ragaudit worker``. The worker reads ragaudit's own spans
like any other convention, assembles the same turn, judges it and writes the records (judge span,
evaluation log records, its audit log and exporters). Judging then costs the app's interpreter nothing:
no judge calls, no parsing, no record, no judge span.

Counted on the app's side: ``stats()["to_worker"]``, every turn handed over with its trace;
a turn that has no trace (tracing not configured, or the sampler dropped its span) cannot reach
the worker and is counted ``dropped``, with a warning. Sampling, budgets, rate limits, the judge
and the exporters are the worker's (``ragaudit worker --sample-rate``, the Collector's
``tail_sampling``); giving them here is a [`ConfigurationError`][ragaudit.ConfigurationError].
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigurationError
from ..judges.base import BaseRagJudge
from ..records import Judgement, JudgeRequest

__all__ = ["JUDGED_BY_WORKER", "WorkerModeJudge", "check_worker_mode"]

JUDGED_BY_WORKER = "ragaudit-worker"


class WorkerModeJudge(BaseRagJudge):
    """The Auditor's judge in worker mode: it names where judging happens and is never called (a
    turn never reaches the judging loop); called anyway, it fails the judgement, never invents one."""

    calls_per_judgement = 0
    name = JUDGED_BY_WORKER

    async def ajudge(self, request: JudgeRequest) -> Judgement:
        return Judgement.failed(self.name, "mode='worker': turns are judged by ragaudit worker, not here")


def check_worker_mode(given: Mapping[str, bool]) -> None:
    """Raise ConfigurationError naming every setting marked given in *given* (name: whether it was
    given): in worker mode only the worker can act on them."""
    ignored = sorted(name for name, was_given in given.items() if was_given)
    if ignored:
        raise ConfigurationError(
            f"Auditor(mode='worker') judges nothing in this process: {', '.join(ignored)} would have no "
            "effect here; give them to the worker (ragaudit worker --sample-rate, a Worker(judge=..., exporters=...))"
        )
