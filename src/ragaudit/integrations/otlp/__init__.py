"""``ragaudit worker``: judge the RAG turns of any app that sends OpenTelemetry traces (an OTLP source).

```python
from ragaudit.integrations.otlp import Worker

with Worker(port=4318, otlp_endpoint="http://otel-collector:4318"):   # serves on a thread of its own
    ...

Worker(otlp_endpoint="http://otel-collector:4318").run()              # or in this thread, until SIGTERM

Worker(host="0.0.0.0", auth_token=BearerToken.from_file("/run/secrets/worker-token"),   # on a network
       tls=ServerTLS("/tls/tls.crt", "/tls/tls.key"))
```

The receiver (OTLP/HTTP protobuf and JSON, gzip, chunked), trace readiness, the convention
readers (OpenInference, OpenLLMetry, OTel GenAI, ragaudit's own) and the output (a ``ragaudit.judge``
span in the evaluated trace, ``gen_ai.evaluation.result`` log records, metrics) are described in
[`Worker`][ragaudit.integrations.otlp.Worker] and the README's worker section. Needs the ``worker`` extra.
"""

from __future__ import annotations

from ._core import IngestOutcome, Worker
from ._output import WORKER_SERVICE
from ._security import TOKEN_ENV, BearerToken, ConnectionLimits, ServerTLS

__all__ = ["TOKEN_ENV", "WORKER_SERVICE", "BearerToken", "ConnectionLimits", "IngestOutcome", "ServerTLS", "Worker"]
