"""What the hostile-receiver tests share: a ``ragaudit worker`` process, its memory from /proc, a gzip
bomb, a raw HTTP client that reads an early answer, and spans of a chosen weight."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.ports import free_port
from tests.worker.conftest import ROOT, wait_for


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[str]
    port: int
    stderr: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def memory_kb(self, key: str = "VmRSS") -> int:
        """``VmRSS`` (now) or ``VmHWM`` (the peak) of the worker process, in kB, from /proc."""
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise AssertionError(f"no {key} in /proc/{self.proc.pid}/status")

    def stop(self) -> str:
        """SIGTERM, reaped; its stderr (kept: a second call returns the same)."""
        if self.stderr is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                _, self.stderr = self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, self.stderr = self.proc.communicate()
        return self.stderr


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "RAGAUDIT_WORKER"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(extra)
    return env


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def spawn_worker(collector: Any, *args: str, env: dict[str, str] | None = None, port: int | None = None
                 ) -> subprocess.Popen[str]:
    port = free_port() if port is None else port
    return subprocess.Popen([sys.executable, "-m", "ragaudit.cli", "worker", "--port", str(port),
                             "--otlp-endpoint", collector.endpoint, *args], env=env or worker_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def worker_process(collector: Any, *args: str, env: dict[str, str] | None = None) -> Iterator[WorkerProcess]:
    """A ``ragaudit worker`` process listening on a free port (SIGTERM and reaped at the end)."""
    port = free_port()
    proc = spawn_worker(collector, *args, env=env, port=port)
    worker = WorkerProcess(proc, port)
    try:
        wait_for(lambda: healthy(worker.url) or proc.poll() is not None, timeout=60, what="the worker to listen")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield worker
    finally:
        worker.stop()


def gzip_bomb(mib: int) -> bytes:
    """A valid gzip stream of *mib* MiB of zeros, ~1 KiB per MiB: each MiB is deflated after a full
    flush (no history), so every block after the first compresses to the same bytes and is repeated."""
    block = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    assert again == deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + first + again * (mib - 1) + deflate.flush() + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)


def raw_post(port: int, body: bytes, headers: dict[str, str], chunk: int = 64 * 1024,
             timeout: float = 60.0) -> int | None:
    """POST *body* over a plain socket, reading between chunks: a server that answers early (413) and
    closes is seen answering, as a sender that watches its socket sees it. The status, or None."""
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": "127.0.0.1", "Content-Length": str(len(body)),
                                                 **headers}.items())
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    received = b""
    try:
        sock.sendall(f"POST /v1/traces HTTP/1.1\r\n{head}\r\n".encode())
        for start in range(0, len(body), chunk):
            if select.select([sock], [], [], 0)[0]:
                break  # answered before the body ended
            try:
                sock.sendall(body[start:start + chunk])
            except OSError:
                break
        deadline = time.monotonic() + timeout
        while b"\r\n" not in received and time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            received += data
    finally:
        sock.close()
    line = received.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None
