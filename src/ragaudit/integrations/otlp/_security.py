"""Who may send to the worker, over what, and for how long: bearer token, TLS, connection limits.

Values, as the Collector's receiver settings are: the token (its ``bearertokenauth`` extension's
contract: ``Authorization: Bearer <token>``, compared in constant time), the TLS files (its
``tls: {cert_file, key_file}``), and the connection limits (its ``read_header_timeout``,
``idle_timeout``, plus a cap on open connections that Go's server leaves to the kernel's file limit).
"""

from __future__ import annotations

import hmac
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigurationError

__all__ = ["TOKEN_ENV", "BearerToken", "ConnectionLimits", "ServerTLS"]

TOKEN_ENV = "RAGAUDIT_WORKER_TOKEN"
"""The environment variable ``ragaudit worker`` reads its bearer token from (or ``--auth-token-file``)."""

_FD_HEADROOM = 64  # files the worker needs besides its connections: logs, exporters' sockets, the judge's


@dataclass(frozen=True, slots=True)
class BearerToken:
    """The bearer token a sender must present (``Authorization: Bearer <token>``, gRPC metadata
    ``authorization`` likewise). Never printed: ``repr`` and ``str`` hide it."""

    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or not self.token.strip():
            raise ConfigurationError("the worker's bearer token is empty")
        if any(c.isspace() for c in self.token) or not self.token.isprintable():
            raise ConfigurationError("the worker's bearer token has whitespace or control characters in it")

    def __str__(self) -> str:
        return "BearerToken(***)"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BearerToken:
        """The token in the file *path* (a mounted secret; surrounding whitespace is stripped)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read the worker's token file {os.fspath(path)!r}: {exc}") from exc
        return cls(text.strip())

    @classmethod
    def from_env(cls, name: str = TOKEN_ENV) -> BearerToken | None:
        """The token in the environment variable *name*; None when it is unset or empty."""
        value = os.environ.get(name, "").strip()
        return cls(value) if value else None

    def accepts(self, authorization: str | bytes | None) -> bool:
        """Whether *authorization* (the header's value) is ``Bearer <this token>``, in constant time."""
        if authorization is None:
            return False
        if isinstance(authorization, str):
            authorization = authorization.encode("utf-8", "surrogateescape")
        scheme, _, presented = authorization.strip().partition(b" ")
        # The scheme is case-insensitive (RFC 7235); the token's comparison runs in constant time.
        ok_scheme = scheme.lower() == b"bearer"
        return hmac.compare_digest(presented.strip(), self.token.encode()) and ok_scheme


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """The certificate chain and private key (PEM files) the worker serves HTTPS and gRPC with."""

    cert_file: str
    key_file: str

    def __post_init__(self) -> None:
        for name, value in (("cert_file", self.cert_file), ("key_file", self.key_file)):
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"ServerTLS.{name} must be a path, got {value!r}")

    def ssl_context(self) -> ssl.SSLContext:
        """A server context (TLS 1.2 at least) with the chain loaded; ConfigurationError when it will not load."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"cannot load the TLS certificate {self.cert_file!r} and key "
                                     f"{self.key_file!r}: {exc}") from exc
        return context

    def pem_pair(self) -> tuple[bytes, bytes]:
        """``(private key, certificate chain)`` as bytes, what ``grpc.ssl_server_credentials`` takes."""
        self.ssl_context()  # the same checks (and the same error) as for HTTP
        return Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes()


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a connection may take, and how many may be open (OTLP/HTTP).

    *header_timeout_s*: from a request's first byte to the end of its headers (and the TLS
    handshake); past it the connection is closed (a slowloris holds nothing for long).
    *body_timeout_s*: to read a whole request body once its headers are in; past it 408 and close.
    *keepalive_timeout_s*: an idle connection between requests is closed after this.
    *max_connections*: open at once; a new connection past it closes the oldest one that is idle
    or still sending headers, else it is refused. None: 1,000, lowered to fit the process's open-file
    limit (``RLIMIT_NOFILE``) with room for the worker's own files.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    keepalive_timeout_s: float = 60.0
    max_connections: int | None = None

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ConfigurationError(f"ConnectionLimits.{name} must be a finite number > 0, got {value!r}")
        cap = self.max_connections
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigurationError(f"ConnectionLimits.max_connections must be None or an int >= 1, got {cap!r}")

    def connection_cap(self) -> int:
        """*max_connections*, or the default that fits this process's open-file limit."""
        if self.max_connections is not None:
            return self.max_connections
        try:
            import resource
        except ImportError:  # not on Windows: no file limit to fit
            return 1_000
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 1_000
        return max(16, min(1_000, soft - _FD_HEADROOM))
