"""Free TCP ports for the servers the tests start, outside the kernel's ephemeral range.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range it takes
the source port of every outgoing connection from. Between choosing a port and the server binding it
(a Collector builds its pipelines first; a fleet starts its workers first) any outgoing connection on
the machine may take it ("bind: address already in use", seen in CI). Ports below that range are never
given to outgoing connections, so only another server choosing the same one can race us: each port
is checked free (bound) when chosen, and a process hands its ports out in turn from a random start
(wrapping around), so it never hands out the same port twice in a run.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10_000  # well above the ports services listen on by default (6379, 8888, 9090, ...)


def _candidates() -> range:
    """The ports to choose from: below the ephemeral range, or above it where it starts too low."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):  # not Linux: the usual ephemeral range (IANA's 49152-65535)
        low, high = 49_152, 65_535
    if low - _LOWEST >= 1_000:
        return range(_LOWEST, low)
    if 65_535 - high >= 1_000:
        return range(high + 1, 65_536)
    return range(0, 1)  # no room outside the range: the kernel's choice


_cursor: int | None = None  # the next port to try, in this process


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """*n* distinct ports free on *host* now (see the module docstring)."""
    global _cursor
    candidates = _candidates()
    if len(candidates) == 1:  # no room outside the ephemeral range: the kernel's choice
        return _kernel_ports(n, host)
    ports: list[int] = []
    for _ in range(len(candidates)):
        if len(ports) == n:
            break
        if _cursor is None or _cursor not in candidates:
            _cursor = random.choice(candidates)
        port, _cursor = _cursor, _cursor + 1
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:  # taken: the next one
                continue
        ports.append(port)
    if len(ports) < n:
        raise RuntimeError(f"no {n} free ports on {host} in {candidates}")
    return ports


def _kernel_ports(n: int, host: str) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One port free on *host* now (see the module docstring)."""
    return free_ports(1, host)[0]
