"""Run a quick-start page of the docs the way a reader does (issue 44): its marked blocks, as written.

A page marks what runs with an HTML comment (invisible on the site) right above a fenced block:

- ``<!-- quickstart: install -->`` above a ``bash`` block: its ``pip install`` lines are what the page
  says to install (the ``user_install`` nox sessions install exactly these, in a fresh virtualenv, with
  ragaudit from this checkout in place of the PyPI name);
- ``<!-- quickstart: run -->`` above a ``python`` block: the blocks, in page order, are the app (one
  script, run in an empty directory); above a ``bash`` block: its ``ragaudit ...`` lines run after the
  app (``ragaudit worker ...`` is started before it, in the background).

The model and the judge are the loopback chat-completions server (tests/support/llm_server.py), reached
through the variables the pages document (``OPENAI_BASE_URL``, ``OPENAI_API_BASE`` for LlamaIndex,
``OPENAI_API_KEY``); spans and judgements go over OTLP/HTTP (``OTEL_EXPORTER_OTLP_ENDPOINT``) to a loopback
receiver that answers 200. The run passes when the first answer is judged: an audit log line with
``judge_status`` ``judged`` (or, for the worker, ``turns_judged`` in its ``/stats``, the page's own check).

Only the standard library and llm_server.py: this runs inside a virtualenv holding nothing but what the
page says to install. ``python -m tests.support.quickstart PAGE [--json OUT]`` from the repository root.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.llm_server import LLMServer, judgement_json
from tests.support.ports import free_port

__all__ = ["blocks", "install_requirements", "run_page"]

_MARKED = re.compile(r"^<!-- quickstart: (install|run) -->[ \t]*\n```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
ANSWER = "Items can be returned within 30 days of delivery for a full refund. [returns]"
WORKER_PORT = "4319"  # the port the OTLP worker page uses; the run gives the worker a free one instead
PACKAGES = ("ragaudit", "openai", "langchain-core", "langchain-openai", "llama-index-core", "llama-index-llms-openai",
            "opentelemetry-sdk", "openinference-instrumentation-langchain", "aiohttp")


def blocks(page: Path, kind: str, language: str) -> list[str]:
    """The bodies of *page*'s fenced *language* blocks marked ``<!-- quickstart: KIND -->``, in order."""
    return [body for mark, lang, body in _MARKED.findall(page.read_text(encoding="utf-8"))
            if mark == kind and lang == language]


def install_requirements(page: Path) -> list[str]:
    """The requirements of the page's marked ``pip install`` lines (comments dropped)."""
    found: list[str] = []
    for body in blocks(page, "install", "bash"):
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["pip", "install"]:
                found.extend(w for w in words[2:] if not w.startswith("-"))
    return found


def _reply(body: dict[str, Any]) -> str:
    text = json.dumps(body.get("messages", ""))
    if body.get("response_format") or "RAG evaluator" in text:  # the judge
        return judgement_json(0.9, 0.8, 0.85, reason="supported by the returns policy")
    return ANSWER


class _Receiver:
    """OTLP/HTTP on loopback that takes everything (an empty 200 is a valid Export*ServiceResponse)."""

    def __init__(self) -> None:
        self.posts: dict[str, int] = {}
        lock = threading.Lock()
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    posts[self.path] = posts.get(self.path, 0) + 1
                self.send_response(200)
                self.send_header("Content-Type", self.headers.get("Content-Type") or "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


def _wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _command(line: str) -> list[str]:
    """A page's ``ragaudit ...`` line as this interpreter runs it (``python -m ragaudit``, same command)."""
    return [sys.executable, "-m", "ragaudit", *shlex.split(line, comments=True)[1:]]


def _versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def run_page(page: Path, workdir: Path, *, pythonpath: str | None = None, timeout: float = 300) -> dict[str, Any]:
    """Run *page* in *workdir*; raises AssertionError naming what failed. Returns what was measured."""
    started = time.time()
    app = "\n\n".join(blocks(page, "run", "python"))
    shell = [line for body in blocks(page, "run", "bash") for line in body.splitlines() if line.startswith("ragaudit ")]
    assert app.strip(), f"{page}: no <!-- quickstart: run --> python block"
    port = str(free_port())
    (workdir / "app.py").write_text(app.replace(f":{WORKER_PORT}/", f":{port}/"), encoding="utf-8")
    receiver = _Receiver()
    worker: subprocess.Popen[str] | None = None
    try:
        with LLMServer(_reply) as srv:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "RAGAUDIT_"))}
            env.update(OPENAI_API_KEY="dummy", OPENAI_BASE_URL=srv.base_url, OPENAI_API_BASE=srv.base_url,
                       OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SERVICE_NAME="docs-quickstart")
            if pythonpath:
                env["PYTHONPATH"] = pythonpath
            else:
                env.pop("PYTHONPATH", None)
            worker_lines = [line for line in shell if line.split()[:2] == ["ragaudit", "worker"]]
            if worker_lines:
                worker = subprocess.Popen(_command(worker_lines[0].replace(WORKER_PORT, port)), cwd=workdir, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                _wait(lambda: worker.poll() is not None or _get_json(f"http://127.0.0.1:{port}/readyz")["ready"],
                      60, "the worker to be ready")
                assert worker.poll() is None, f"the worker of {page.name} exited: {worker.communicate()[0][-3000:]}"
            run = subprocess.run([sys.executable, "app.py"], cwd=workdir, env=env, capture_output=True, text=True,
                                 timeout=timeout)
            assert run.returncode == 0, f"{page.name}: the app failed:\n{run.stderr[-4000:]}"
            judge_calls = [r for r in srv.requests if "RAG evaluator" in r.prompt_text]
            if worker is not None:
                stats = _wait(lambda: (s := _get_json(f"http://127.0.0.1:{port}/stats"))["turns_judged"]
                              + s["turns_judge_failed"] >= 1 and s, 60, "the worker to judge the app's turn")
                if stats["turns_judge_failed"]:
                    worker.terminate()
                    said = [x for x in worker.communicate(timeout=60)[0].splitlines() if "ragaudit" in x]
                    raise AssertionError(f"{page.name}: the worker's judge failed: {stats['turns_judge_failed']} "
                                         "turn(s); what the worker said:\n" + "\n".join(said)[-3000:])
                judged = stats["turns_judged"]
                first_judged = time.time()
            else:
                log = workdir / "ragaudit-audit.jsonl"
                assert log.exists(), f"{page.name}: no audit log; stderr:\n{run.stderr[-3000:]}"
                lines = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
                first = lines[0] if lines else {}
                said = "\n".join(x for x in run.stderr.splitlines() if "ragaudit" in x)[-3000:]
                assert first.get("judge_status") == "judged" and first.get("faithfulness") is not None, (
                    f"{page.name}: the first answer was not judged: {first.get('judge_status')} "
                    f"{first.get('error')}\nwhat the app said on stderr:\n{said}")
                assert len(judge_calls) == len(lines), "one judge call per judged answer"
                judged = len(lines)
                # When the first answer was judged: its audit line's timestamp (UTC, milliseconds).
                first_judged = datetime.fromisoformat(first["ts"].replace("Z", "+00:00")).timestamp()
            for line in shell:
                if line.split()[:2] != ["ragaudit", "worker"]:
                    done = subprocess.run(_command(line), cwd=workdir, env=env, capture_output=True, text=True,
                                          timeout=120)
                    assert done.returncode == 0, (line, done.stderr[-2000:])
            if worker is not None:
                worker.terminate()
                out = worker.communicate(timeout=60)[0]
                assert worker.returncode == 0, out[-3000:]
                assert "ragaudit worker: listening on" in out, out[-3000:]
        assert receiver.posts.get("/v1/traces"), f"{page.name}: no spans reached OTLP: {receiver.posts}"
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.communicate()
        receiver.close()
    return {"page": page.name, "judged": judged, "app_to_first_judged_s": round(first_judged - started, 2),
            "first_judged_at": first_judged, "otlp_posts": receiver.posts, "versions": _versions()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quickstart-") as tmp:
        result = run_page(args.page.resolve(), Path(tmp))
    print(json.dumps(result, sort_keys=True))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
