"""What ragaudit records of the texts it sees: the one [`ContentPolicy`][ragaudit.content.ContentPolicy], and secret
scrubbing.

Every text that leaves the process — span attributes and events, audit-log fields, exporter payloads,
ragaudit's own log lines — goes through a [`ContentPolicy`][ragaudit.content.ContentPolicy] (the Auditor builds one and
hands it to its span recorder, audit log and exporters). The policy decides, per kind of text:

- **content** (question, answer, documents, prompts, metadata keys and values, citation markers, the
  judge's raw reply): recorded only with content capture on;
- **the judge's reason**: recorded with content capture on, or when the user opted in to keeping it
  on its own (``capture_reason=True``);
- **errors** (judge failures, host exceptions, exporter replies): with capture on, their text; with
  capture off, only their type, HTTP status and a fixed message of ours — an error text quotes
  whatever the failing party saw (a 400 that echoes the prompt, a parse error quoting the reply);
- **identifiers** (ids, sources, names): always recorded.

Whatever is recorded is first scrubbed of every secret ragaudit knows (capture on or off), then
passed through the user's ``redact`` hook (contained: any exception, ``BaseException`` included,
withholds the text and never escapes), then cut when a limit applies.

Secrets are process-wide, because a key is a key whichever Auditor sees it echoed: API keys and
header values of the judge clients and exporters (registered when they are built), userinfo and query
values of their URLs and of the budget store's, the values of ``OTEL_EXPORTER_OTLP_*HEADERS``, the
credentials in ``OTEL_EXPORTER_OTLP_*ENDPOINT`` URLs, and the values of environment variables
whose names look like keys or tokens (re-read at most once a second). A logging filter on the
``ragaudit`` logger scrubs the same secrets from every log record of ours, message and traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit, urlunsplit

from ._fork import lock as _fork_safe_lock
from .errors import ConfigurationError
from .records import truncate

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "ERROR_WITHHELD",
    "REDACTION_FAILED",
    "SECRET_MARKER",
    "ContentPolicy",
    "bounded_attributes",
    "content_capture_from_env",
    "error_status",
    "error_type",
    "exception_type_name",
    "log_exception",
    "otlp_safe",
    "register_client",
    "register_headers",
    "register_secret",
    "register_url",
    "scrub",
    "scrub_url",
]

_logger = logging.getLogger("ragaudit")

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The OTel GenAI variable that turns content capture off when set to NO_CONTENT, false or 0."""

SECRET_MARKER = "***"
"""What a known secret is replaced with in any recorded text."""

REDACTION_FAILED = "[ragaudit: redact() failed, text withheld]"
"""What a text the user's ``redact`` hook failed on is recorded as (never the text itself)."""

ERROR_WITHHELD = "details withheld (content capture is off)"
"""The fixed message of an error recorded with content capture off, after its type and status."""

_CONTENT_OFF_VALUES = frozenset({"no_content", "false", "0"})
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def content_capture_from_env() -> bool:
    """False when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is NO_CONTENT, false or 0."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() not in _CONTENT_OFF_VALUES


# --- secrets -----------------------------------------------------------------------------------------

# An environment variable holds a secret when its name says so (OPENAI_API_KEY, HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ...). PWD/OLDPWD are directories, not passwords.
_SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SIGNATURE", re.I)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
_OTLP_HEADERS_RE = re.compile(r"^OTEL_EXPORTER_OTLP(?:_[A-Z]+)?_HEADERS$")
_OTLP_ENDPOINT_RE = re.compile(r"^OTEL_EXPORTER_OTLP(?:_[A-Z]+)?_ENDPOINT$")
# A header or query value with no telling name is still taken for a credential when it looks like one:
# a long run of token characters holding both letters and digits.
_TOKEN_LIKE_RE = re.compile(r"^(?=.*[A-Za-z])(?=.*\d)[A-Za-z0-9_\-.~+/=:]{16,}$")
# Dates, versions and plain numbers ("2024-02-01", "1.2.3") are never taken for secrets: scrubbing
# them would eat ordinary text.
_PLAIN_VALUE_RE = re.compile(r"^[\d.\-:/ ]*$")
_AUTH_SCHEME_RE = re.compile(r"^(?:Bearer|Basic|Token|Bot|ApiKey|Api-Key|Digest)\s+(\S+)$", re.I)
# Shorter values would match ordinary words ("test" is a key in many a test suite, and in "latest");
# no real credential is that short.
_MIN_SECRET = 8
_ENV_RECHECK_S = 1.0


class _Secrets:
    """The process-wide set of known secret strings and their scrubbing."""

    def __init__(self) -> None:
        self._lock = _fork_safe_lock()
        self._given: set[str] = set()
        self._env: frozenset[str] = frozenset()
        self._env_key: tuple[int, int] = (-1, -1)
        self._env_checked = float("-inf")
        self._ordered: tuple[str, ...] = ()
        # Bumped whenever the set of secrets changes: a TextMemo made before holds texts scrubbed of
        # the old set, and drops them.
        self.version = 0

    def add(self, value: object, min_len: int = _MIN_SECRET) -> None:
        if not isinstance(value, str):
            return
        value = value.strip()
        if len(value) < min_len or _PLAIN_VALUE_RE.match(value):
            return
        with self._lock:
            if value in self._given:
                return
            self._given.update(_forms(value))
            self._rebuild()

    def _rebuild(self) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self._ordered = tuple(sorted(self._given | self._env, key=len, reverse=True))
        self.version += 1

    def refresh_env(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._env_checked < _ENV_RECHECK_S:
            return
        self._env_checked = now
        environ = os.environ
        # A cheap fingerprint: a process rarely changes its environment; only rescan when it did.
        key = (len(environ), hash(tuple(environ.items())))
        if key == self._env_key:
            return
        found: set[str] = set()
        for name, value in environ.items():
            if _OTLP_ENDPOINT_RE.match(name):  # a key in the exporter's URL (userinfo or query)
                found.update(form for secret in _url_secrets(value.strip()) if len(secret.strip()) >= _MIN_SECRET
                             and not _PLAIN_VALUE_RE.match(secret) for form in _forms(secret.strip()))
            elif _OTLP_HEADERS_RE.match(name):
                for part in value.split(","):
                    header, sep, header_value = part.partition("=")
                    if sep:
                        found.update(_header_secrets(unquote(header.strip()), unquote(header_value.strip())))
                        found.update(_header_secrets(header.strip(), header_value.strip()))
            elif name not in _NOT_SECRET_NAMES and _SECRET_NAME_RE.search(name):
                value = value.strip()
                if len(value) >= _MIN_SECRET and not _PLAIN_VALUE_RE.match(value):
                    found.update(_forms(value))
        with self._lock:
            self._env_key = key
            self._env = frozenset(found)
            self._rebuild()

    def scrub(self, text: str) -> str:
        self.refresh_env()
        for secret in self._ordered:
            if secret in text:
                text = text.replace(secret, SECRET_MARKER)
        return text

    def known(self) -> tuple[str, ...]:
        self.refresh_env()
        return self._ordered


def _forms(value: str) -> set[str]:
    """*value* and the encodings it is echoed in (URL-quoted, in a URL query, JSON-escaped)."""
    forms = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]}
    return {form for form in forms if len(form) >= _MIN_SECRET}


def _header_secrets(name: str, value: str) -> set[str]:
    value = value.strip()
    if not value or _PLAIN_VALUE_RE.match(value):
        return set()
    secret_name = bool(_SECRET_NAME_RE.search(name)) or name.lower() in ("api-key", "x-api-key")
    if not secret_name and not _TOKEN_LIKE_RE.match(value):
        return set()
    out: set[str] = set()
    if len(value) >= _MIN_SECRET:
        out.update(_forms(value))
    scheme = _AUTH_SCHEME_RE.match(value)
    if scheme is not None and len(scheme.group(1)) >= _MIN_SECRET:
        out.update(_forms(scheme.group(1)))
    return out


_SECRETS = _Secrets()


def register_secret(value: object) -> None:
    """Add *value* (an API key, a token, a password) to the secrets scrubbed from every recorded text.

    Values shorter than 8 characters, and dates, versions and numbers, are ignored (scrubbing them
    would eat ordinary text; no real credential is that short).
    """
    _SECRETS.add(value)


def register_headers(headers: Mapping[str, Any] | None) -> None:
    """Register the credentials among HTTP *headers*: every value under a name that says key, token,
    auth, secret, password, cookie or signature (``Authorization``, ``x-api-key``), and any other value
    that looks like a token; for ``Bearer x``/``Basic x`` also ``x`` alone."""
    if not headers:
        return
    try:
        items = list(headers.items())
    except Exception:
        return
    for name, value in items:
        if isinstance(name, str) and isinstance(value, str):
            for secret in _header_secrets(name, value):
                _SECRETS.add(secret)


def _url_secrets(url: str) -> set[str]:
    """The credentials of *url*: its userinfo (user and password, raw and unquoted) and its query values."""
    try:
        parts = urlsplit(url)
        found = {unquote(item) for item in (parts.username, parts.password) if item}
        found.update(item for item in (parts.username, parts.password) if item)
        # The openai SDK appends "/" to a base_url, query and all: "?key=abc" becomes "?key=abc/".
        found.update(value.rstrip("/") for _, value in parse_qsl(parts.query, keep_blank_values=False))
        found.update(raw.partition("=")[2].rstrip("/") for raw in parts.query.split("&"))
    except Exception:  # an unparseable URL holds no credential we could find
        return set()
    return found


def register_url(url: object) -> None:
    """Register the credentials of *url*: its userinfo (user and password) and its query values."""
    if url is None:
        return
    for secret in _url_secrets(str(url)):
        _SECRETS.add(secret)


def register_client(client: Any) -> None:
    """Register the credentials an OpenAI-compatible *client* carries: its ``api_key``, its headers
    (``default_headers``, gateway keys included), its ``base_url`` and default query values."""
    if client is None:
        return
    def query() -> None:
        for value in (getattr(client, "_custom_query", None) or {}).values():
            _SECRETS.add(value, _MIN_SECRET)

    for read in (
        lambda: register_secret(getattr(client, "api_key", None)),
        lambda: register_headers(getattr(client, "default_headers", None)),
        lambda: register_headers(getattr(client, "_custom_headers", None)),
        lambda: register_url(getattr(client, "base_url", None)),
        query,
    ):
        try:
            read()
        except Exception:  # a client of another shape: register what can be read
            continue


def scrub(text: str) -> str:
    """*text* with every known secret replaced by ``***`` (see the module docstring)."""
    return _SECRETS.scrub(text)


def scrub_url(url: str | None) -> str | None:
    """*url* registered ([`register_url`][ragaudit.content.register_url]) and scrubbed: safe to show in a ``repr``, a
    log line or an error. Its password is masked whatever its length, as Celery and kombu show a broker URL
    (``redis://:***@host:6379/0``): a short one (``PW``) is never scrubbed from free text."""
    if url is None:
        return None
    register_url(url)
    return _SECRETS.scrub(_masked_password(str(url)))


def _masked_password(url: str) -> str:
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        userinfo, _, host = parts.netloc.rpartition("@")
        return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:{SECRET_MARKER}@{host}"))
    except ValueError:  # an unparseable URL: the registered secrets are still scrubbed
        return url


# --- errors ------------------------------------------------------------------------------------------

# The leading "Type:" of an error text, when it names an exception class (or our "timeout"): only such a
# word is kept with capture off, so the first word of a quoted reply ("high: <document>") never is.
_ERROR_TYPE_RE = re.compile(
    r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Exit|Interrupt|Cancelled|Timeout|Fault|Warning)"
    r"|timeout)(?=:|\s|$)"
)
_STATUS_RE = re.compile(r"\b(?:Error code|HTTP(?:/[\d.]+)?|status(?:[ _]code)?)[:= ]+([1-5]\d\d)\b", re.I)


def error_type(error: str | None) -> str:
    """The exception type an error text starts with (``"APIStatusError: ..."``), else ``"Error"``."""
    match = _ERROR_TYPE_RE.match(error or "")
    return match.group(1) if match else "Error"


def error_status(error: str | None) -> int | None:
    """The HTTP status an error text mentions (``Error code: 401``, ``HTTP 503``), else None."""
    match = _STATUS_RE.search(error or "")
    return int(match.group(1)) if match else None


def _exception_status(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def exception_type_name(exc: BaseException) -> str:
    """*exc*'s class as ``error.type`` wants it (its canonical name): ``module.QualName`` with the
    private modules left out (``openai.APIConnectionError``, not ``openai._exceptions...``), the bare
    name for builtins (``ValueError``)."""
    cls = type(exc)
    module = ".".join(part for part in (cls.__module__ or "").split(".") if not part.startswith("_"))
    name = cls.__qualname__ if "<" not in cls.__qualname__ else cls.__name__  # a class made in a function
    return f"{module}.{name}" if module and module != "builtins" else name


def _exception_text(exc: BaseException) -> str:
    try:
        message = str(exc)
    except Exception:  # an exception whose __str__ raises still gets recorded by its type
        message = "<unprintable>"
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


# Set once any policy with content capture off is built. Log lines are process-wide, so code that logs
# without a policy at hand follows the strictest one in the process (see log_exception).
_capture_off_somewhere = False


def log_exception(exc: BaseException, policy: ContentPolicy | None = None) -> str:
    """*exc* for a log line written where the policy of the text it may quote is not at hand (an
    integration callback, a shared worker): ``Type: message`` scrubbed (and through *policy*, when
    given), or only its type and status once any policy in this process has content capture off (the
    message may quote the host's text)."""
    if _capture_off_somewhere:
        return ContentPolicy._withheld_error(type(exc).__name__, _exception_status(exc))
    if policy is not None:
        return policy.exception(exc)
    return scrub(_exception_text(exc))


# --- the policy --------------------------------------------------------------------------------------


class ContentPolicy:
    """Decides what of each text is recorded (see the module docstring). Built once by the Auditor.

    Args:
        capture_content: record questions, answers, documents, prompts, metadata, the judge's reason
            and raw reply, and error texts. None: on unless
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is NO_CONTENT, false or 0. Off, only
            ids, scores, sizes, and errors as type + HTTP status + a fixed message are recorded.
        capture_reason: record the judge's reason; None means as *capture_content*. ``True`` with
            capture off keeps the reason (redacted) and nothing else.
        redact: ``str -> str`` applied to every recorded text (after secrets are scrubbed, before it
            is cut). If it raises anything, the text is withheld (`REDACTION_FAILED`) and the
            failure logged by its type only.
        secrets: more strings to scrub (they join the process-wide set, see
            [`register_secret`][ragaudit.content.register_secret]).

    Thread-safe; never raises from its text methods.
    """

    __slots__ = ("__weakref__", "_redact", "_reported", "capture_content", "capture_reason")

    def __init__(
        self,
        *,
        capture_content: bool | None = None,
        capture_reason: bool | None = None,
        redact: Callable[[str], str] | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        if redact is not None and not callable(redact):
            raise ConfigurationError(f"redact must be a callable str -> str, got {type(redact).__name__}")
        if isinstance(secrets, str):
            raise ConfigurationError("secrets must be an iterable of strings, not one string")
        self.capture_content: bool = content_capture_from_env() if capture_content is None else bool(capture_content)
        self.capture_reason: bool = self.capture_content if capture_reason is None else bool(capture_reason)
        self._redact = redact
        self._reported: set[str] = set()
        if not self.capture_content:
            global _capture_off_somewhere
            _capture_off_somewhere = True
        for secret in secrets:
            register_secret(secret)
        _SECRETS.refresh_env(force=True)

    @property
    def redact(self) -> Callable[[str], str] | None:
        """The user's redact hook (None when there is none)."""
        return self._redact

    def __repr__(self) -> str:
        redact = None if self._redact is None else getattr(self._redact, "__qualname__", type(self._redact).__name__)
        return (f"ContentPolicy(capture_content={self.capture_content}, capture_reason={self.capture_reason}, "
                f"redact={redact})")

    # -- the one text pipeline ---------------------------------------------------------------------

    def text(self, value: str, limit: int | None = None) -> str:
        """*value* as it may be recorded whatever the capture setting: secrets scrubbed, redacted, cut
        to *limit* characters (with a visible marker; None: whole). Lone surrogates are kept (the audit
        log writes them escaped); [`otlp_safe`][ragaudit.content.otlp_safe] replaces them for span attributes."""
        if not isinstance(value, str):
            value = _safe_str(value)
        value = _SECRETS.scrub(value)
        if self._redact is not None:
            value = self._redacted(value)
        if limit is not None and len(value) > limit:
            value = truncate(value, max(0, limit))
        return value

    def _redacted(self, value: str) -> str:
        redact = self._redact
        assert redact is not None
        try:
            out = redact(value)
            if not isinstance(out, str):
                out = str(out)
            # A hook may put a secret back (or return its input); scrubbing is not optional.
            return _SECRETS.scrub(out)
        except BaseException as exc:  # a hook must never cost a turn or kill a thread
            self._report_redact(exc)
            return REDACTION_FAILED

    def _report_redact(self, exc: BaseException) -> None:
        # The type only: the exception's message may quote the very text that was to be hidden.
        kind = type(exc).__name__
        try:
            if kind in self._reported:
                _logger.debug("ragaudit: redact() raised %s again; the text was withheld", kind)
                return
            self._reported.add(kind)
            _logger.warning("ragaudit: redact() raised %s; the text was withheld (logged once per exception "
                            "type, then at DEBUG)", kind)
        except Exception:  # logging itself failed: the text is withheld all the same
            pass

    # -- per kind of text --------------------------------------------------------------------------

    def captured(self, value: str | None, limit: int | None = None) -> str | None:
        """Host or judge free text (question, answer, document, prompt, marker, raw reply): None with
        content capture off, else [`text`][ragaudit.content.ContentPolicy.text]."""
        if value is None or not self.capture_content:
            return None
        return self.text(value, limit)

    def reason(self, value: str | None, limit: int | None = None) -> str | None:
        """The judge's reason: None unless [`capture_reason`][ragaudit.content.ContentPolicy.capture_reason], else
        [`text`][ragaudit.content.ContentPolicy.text]."""
        if value is None or not self.capture_reason:
            return None
        return self.text(value, limit)

    def identifier(self, value: str | None, limit: int | None = None) -> str | None:
        """An id, source or name: recorded with capture on or off (scrubbed, redacted)."""
        return None if value is None else self.text(value, limit)

    def error(self, value: str | None, *, status: int | None = None, limit: int | None = None) -> str | None:
        """An error text: with capture on, [`text`][ragaudit.content.ContentPolicy.text]; off, ``"<Type> (HTTP
        <status>): details withheld (content capture is off)"`` — the type from the text's ``Type:`` prefix, the status
        from *status* or the text."""
        if value is None:
            return None
        if self.capture_content:
            return self.text(value, limit)
        return self._withheld_error(error_type(value), status if status is not None else error_status(value))

    def exception(self, exc: BaseException, limit: int | None = None) -> str:
        """*exc* as ``"Type: message"`` (capture on) or type, status and the fixed message (capture off),
        for spans and log lines."""
        if self.capture_content:
            return self.text(_exception_text(exc), limit)
        return self._withheld_error(type(exc).__name__, _exception_status(exc))

    @staticmethod
    def _withheld_error(kind: str, status: int | None) -> str:
        return f"{kind} (HTTP {status}): {ERROR_WITHHELD}" if status is not None else f"{kind}: {ERROR_WITHHELD}"

    def body(self, value: str | None, *, status: int | None = None, limit: int | None = 200) -> str:
        """A reply body from a backend (an exporter's HTTP error) for a log line: its text with capture on,
        else only the status."""
        if self.capture_content and value:
            return self.text(value, limit)
        return f"HTTP {status}: body withheld" if status is not None else "body withheld"

    def metadata(self, value: Mapping[Any, Any] | None) -> dict[str, Any] | None:
        """Host metadata, keys and values (nested too) through [`text`][ragaudit.content.ContentPolicy.text]; None with
        capture off."""
        if value is None or not self.capture_content:
            return None
        return _deep_mapping(value, self.text, None)

    def details(self, value: Mapping[str, Any] | None, limit: int | None = None) -> dict[str, Any]:
        """A judge's extra details: with capture on, every string in them (keys too) through
        [`text`][ragaudit.content.ContentPolicy.text], each cut to *limit*; off, only the numbers, booleans and nulls at
        the top (the rest quotes the reply, the answer or the documents)."""
        if not value:
            return {}
        if self.capture_content:
            return _deep_mapping(value, self.text, limit)
        return {
            _safe_str(k): v
            for k, v in _items(value)
            if v is None or isinstance(v, (bool, int)) or (isinstance(v, float) and v == v)
        }

    def json(self, value: Any, limit: int | None = None) -> str:
        """*value* (already through this policy) as compact JSON for a span attribute: scrubbed once
        more, cut to *limit*, lone surrogates replaced ([`otlp_safe`][ragaudit.content.otlp_safe])."""
        try:
            text = _COMPACT_JSON.encode(value)
        except (TypeError, ValueError):
            text = _safe_str(value)
        text = _SECRETS.scrub(text)
        if limit is not None and len(text) > limit:
            text = truncate(text, limit)
        return otlp_safe(text)



class TextMemo:
    """The texts of one scope (the spans of one turn) through *policy*, each distinct text scrubbed and
    redacted once (the span writers'; not public API): a turn's question is recorded on its turn and
    retrieval spans, a document's source as its id and in its metadata, the answer as the turn's and
    the model's output.

    ``text`` and ``metadata`` give what the policy's methods of those names give. It holds the texts of
    its scope only, as long as the scope keeps it (never process-wide). When the process's secrets
    change (a secret registered, or one found in the environment when it is next re-read, at most once
    a second as for every scrub) it drops every text it holds, and scrubs them again when asked. The
    user's ``redact`` hook runs once per distinct text of the scope. Not shared across threads.
    """

    __slots__ = ("_done", "_policy", "_version", "capture_content")

    def __init__(self, policy: ContentPolicy) -> None:
        self._policy = policy
        self.capture_content = policy.capture_content
        self._done: dict[str, str] = {}
        self._version = _SECRETS.version

    def text(self, value: str, limit: int | None = None) -> str:
        """[`ContentPolicy.text`][ragaudit.content.ContentPolicy.text], once per distinct *value*."""
        if type(value) is not str:
            return self._policy.text(value, limit)
        version = _SECRETS.version  # read before scrubbing: a secret added meanwhile drops this text too
        if version != self._version:
            self._done.clear()
            self._version = version
        done = self._done.get(value)
        if done is None:
            # Scrubbed and redacted whole (the scrub re-reads the environment at most once a second, as
            # every scrub does); cutting after is what text(value, limit) does.
            done = self._done[value] = self._policy.text(value)
        if limit is not None and len(done) > limit:
            return truncate(done, max(0, limit))
        return done

    def metadata(self, value: Mapping[Any, Any] | None) -> dict[str, Any] | None:
        """[`ContentPolicy.metadata`][ragaudit.content.ContentPolicy.metadata], each text once."""
        if value is None or not self.capture_content:
            return None
        return _deep_mapping(value, self.text, None)


def _deep_mapping(value: Mapping[Any, Any], text: Callable[[str, int | None], str],
                  limit: int | None) -> dict[str, Any]:
    """*value* with every key and every string in it (nested too) through *text*."""
    return {text(_safe_str(k), None): _deep(v, text, limit) for k, v in _items(value)}


def _deep(value: Any, text: Callable[[str, int | None], str], limit: int | None) -> Any:
    if isinstance(value, str):
        return text(value, limit)
    if isinstance(value, Mapping):
        return _deep_mapping(value, text, limit)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_deep(v, text, limit) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return text(_safe_str(value), limit)  # any other object would be written as its str()


def otlp_safe(text: str) -> str:
    """*text* with lone surrogates replaced by U+FFFD: OTLP exporters cannot encode them as UTF-8
    and drop the whole attribute."""
    if not text.isascii() and _SURROGATE_RE.search(text):
        return _SURROGATE_RE.sub("\ufffd", text)
    return text


_MARKER_SLACK = 48  # a text cut by the policy is its cap plus the truncation marker
_SCALARS = frozenset({int, float, bool, type(None)})


def bounded_attributes(attrs: dict[str, Any], limit: int) -> dict[str, Any]:
    """*attrs* (changed in place and returned) with every string, and every string in a list, cut to
    *limit* characters and encodable by OTLP: the content policy's cap (``max_attribute_chars``) on
    what texts alone did not cover (ids, session ids, JSON lists, metadata). Every span attribute,
    span event, link and log record ragaudit emits goes through it, so no attribute is unbounded (a
    10 MB ``session.id`` once made an 84 MB batch that the exporter dropped whole)."""
    slack = limit + _MARKER_SLACK  # a text the policy cut already is left as it is
    for key, value in attrs.items():
        kind = type(value)
        if kind is str:  # most of them, then numbers: by exact type first (a span has ~30 attributes)
            if len(value) > slack:
                attrs[key] = otlp_safe(truncate(value, limit))
        elif kind in _SCALARS:
            continue
        elif isinstance(value, str):
            if len(value) > slack:
                attrs[key] = otlp_safe(truncate(value, limit))
        elif isinstance(value, (list, tuple)) and any(isinstance(v, str) and len(v) > slack for v in value):
            attrs[key] = [otlp_safe(truncate(v, limit)) if isinstance(v, str) and len(v) > slack else v
                          for v in value]
    return attrs


def _items(value: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        return list(value.items())
    except Exception:
        return []


def _safe_str(value: Any) -> str:
    try:
        return value if isinstance(value, str) else str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


# ContentPolicy.json's encoder, built once: json.dumps with these arguments builds one per call.
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, default=_safe_str, separators=(",", ":"))


# --- ragaudit's own log records ----------------------------------------------------------------------


class _ScrubSecrets(logging.Filter):
    """Scrubs known secrets from every record of the ``ragaudit`` logger: message, traceback, stack.

    The record is rewritten in place (message formatted, traceback pre-rendered), so every handler
    and formatter downstream sees only the scrubbed text.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            message = _safe_str(record.msg)
        record.msg = scrub(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            try:
                rendered = logging.Formatter().formatException(record.exc_info)
            except Exception:
                rendered = _exception_text(record.exc_info[1])
            record.exc_text = scrub(rendered)
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


def _install_log_filter() -> None:
    logger = logging.getLogger("ragaudit")
    if not any(isinstance(f, _ScrubSecrets) for f in logger.filters):
        logger.addFilter(_ScrubSecrets())


_install_log_filter()
