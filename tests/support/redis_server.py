"""A real ``redis-server`` on loopback for tests (Debian's package; ``make test`` installs it).

:func:`start_redis` runs one on a free port with no persistence, in its own directory, and returns a
handle with its URL; :meth:`RedisServer.stop` ends it (tests stop one mid-run on purpose).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port

__all__ = ["RedisServer", "redis", "redis_binary", "start_redis"]


def redis_binary() -> str | None:
    return shutil.which("redis-server")


@dataclass
class RedisServer:
    process: subprocess.Popen[bytes]
    port: int
    password: str | None = None

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:port/0``."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_redis(workdir: Path, timeout: float = 20.0, password: str | None = None) -> RedisServer:
    """A redis-server on a free loopback port (with *password*: ``requirepass``, clients must AUTH)."""
    binary = redis_binary()
    if binary is None:
        raise FileNotFoundError("redis-server not found (apt-get install redis-server; make test installs it)")
    port = free_port()
    auth = ("--requirepass", password) if password else ()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", str(workdir), *auth], stdout=subprocess.DEVNULL,
                               stderr=subprocess.STDOUT)
    server = RedisServer(process, port, password)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # up (and asking for the password)
                    return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"redis-server did not start on port {port}")


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (skipped with the reason when none is installed)."""
    if redis_binary() is None:
        pytest.skip("redis-server not found (apt-get install redis-server; make test installs it)")
    server = start_redis(tmp_path)
    try:
        yield server
    finally:
        server.stop()
