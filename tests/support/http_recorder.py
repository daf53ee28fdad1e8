"""A loopback HTTP server that records JSON requests and answers with a configurable status.

Stands in for backends that cannot run here (Langfuse's public API): tests assert on the exact
wire format the real clients send (path, headers, body).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HttpRecorder"]


class HttpRecorder:
    """``with HttpRecorder() as rec: rec.url`` — every request lands in ``rec.requests``.

    ``status`` and ``delay_s`` apply to every request; ``delays`` (a list) scripts the delay of the
    next requests, one entry each (a request is recorded before its delay: stored, then answered late).
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.delay_s = 0.0
        self.delays: list[float] = []
        # What an error reply says: bytes, or a function of the recorded request (a backend that
        # echoes what it was sent, e.g. the Authorization header, in its 401 body).
        self.error_body: bytes | Callable[[dict[str, Any]], bytes] = b'{"error": "scripted failure"}'
        # What a success reply says, and as what (a proxy's login page answers 200 with HTML).
        self.ok_body = b'{"ok": true}'
        self.ok_content_type = "application/json"
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = {"method": self.command, "path": self.path,
                           "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                with recorder._lock:
                    recorder.requests.append(request)
                    status, delay, error_body = recorder.status, recorder.delay_s, recorder.error_body
                    ok_body, ok_type = recorder.ok_body, recorder.ok_content_type
                    if recorder.delays:
                        delay = recorder.delays.pop(0)
                if delay:
                    time.sleep(delay)
                content_type = "application/json"
                if status < 300:
                    payload, content_type = ok_body, ok_type
                else:
                    payload = error_body(request) if callable(error_body) else error_body
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a scripted delay): what was received is recorded

            do_POST = do_GET = do_PUT = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.02)
        with self._lock:
            return list(self.requests)

    def __enter__(self) -> HttpRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
