"""The service's settings, read once at startup from the environment (through
``helix_dbos/settings.py``) and the command line.

Refusing to start is the point: a service bound beyond loopback with no authentication configured
would hand every session to whoever reaches the port, so it exits with a ``configuration_error``
unless the operator says ``--insecure`` (``HELIX_DBOS_INSECURE=1``) on purpose.

- ``HELIX_DBOS_API_KEYS``: hashed API keys (see ``helix_dbos.apikeys``).
- ``HELIX_DBOS_AUTHENTICATE``: ``package.module:function`` taking the request, returning a principal.
- ``HELIX_DBOS_ALLOWED_HOSTS``: comma-separated Host names the service answers (``*.example.com``
  and ``*`` allowed); default the bound address and localhost.
- ``HELIX_DBOS_CORS_ORIGINS``: comma-separated origins allowed cross-origin calls; none by default.
"""

from __future__ import annotations

import importlib
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import apikeys
from ..errors import ConfigurationError
from ..settings import EnvSettings, from_environ

HOOK_ENV = "HELIX_DBOS_AUTHENTICATE"
HOSTS_ENV = "HELIX_DBOS_ALLOWED_HOSTS"
CORS_ENV = "HELIX_DBOS_CORS_ORIGINS"
INSECURE_ENV = "HELIX_DBOS_INSECURE"
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def load_hook(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{HOOK_ENV} must be package.module:function, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import the authenticate hook's module {module_name!r} ({HOOK_ENV}={spec!r})", detail=str(exc)) from exc
    hook = getattr(module, attr, None)
    if not callable(hook):
        raise ConfigurationError(f"{spec!r} ({HOOK_ENV}) names nothing callable")
    return hook  # type: ignore[no-any-return]


@dataclass
class ServiceSettings:
    host: str = "127.0.0.1"
    insecure: bool = False
    keys: list[apikeys.KeyEntry] = field(default_factory=list)
    hook: Callable[..., Any] | None = None
    allowed_hosts: list[str] = field(default_factory=list)
    cors_origins: list[str] = field(default_factory=list)
    #: Threads the blocking calls run in (``HELIX_DBOS_HTTP_THREADS``); Python's CPU-sized default is far too few.
    http_threads: int = 64
    #: How often an event stream polls the ledger (``HELIX_DBOS_SSE_POLL_SEC``).
    sse_poll_sec: float = 0.1
    #: The largest request body read, in bytes (``HELIX_DBOS_MAX_REQUEST_BYTES``); larger is a 413 unread.
    max_request_bytes: int = 1_048_576
    #: The longest message (and client tool error) an entry or an answer takes (``HELIX_DBOS_MAX_MESSAGE_CHARS``).
    max_message_chars: int = 262_144
    #: The largest client tool result stored, in bytes of its JSON (``HELIX_DBOS_MAX_RESULT_BYTES``).
    max_result_bytes: int = 524_288

    @property
    def auth_enabled(self) -> bool:
        return bool(self.keys) or self.hook is not None

    @classmethod
    def from_env(cls, host: str | None = None, insecure: bool | None = None, environment: EnvSettings | None = None) -> ServiceSettings:
        """Read and check the settings; raises ``ConfigurationError`` before the service listens.

        The variables come from ``environment`` (``helix_dbos/settings.py``; read now when none)."""
        environment = environment or from_environ()
        host = host or environment.host
        if insecure is None:
            insecure = environment.insecure
        try:
            keys = apikeys.parse(environment.api_keys)
        except ValueError as exc:
            raise ConfigurationError(f"{apikeys.ENV}: {exc}") from None
        hook = load_hook(environment.authenticate) if environment.authenticate else None
        allowed = list(environment.allowed_hosts) or [*LOCAL_NAMES, *([host] if host not in ("0.0.0.0", "::") else [])]
        settings = cls(
            host=host,
            insecure=insecure,
            keys=keys,
            hook=hook,
            allowed_hosts=allowed,
            cors_origins=list(environment.cors_origins),
            http_threads=environment.http_threads,
            sse_poll_sec=environment.sse_poll_sec,
            max_request_bytes=environment.max_request_bytes,
            max_message_chars=environment.max_message_chars,
            max_result_bytes=environment.max_result_bytes,
        )
        if not settings.auth_enabled and not is_loopback(host) and not insecure:
            raise ConfigurationError(
                f"refusing to serve on {host} without authentication: set {apikeys.ENV} (mint a key with `helix-dbos api-key NAME`) "
                f"or {HOOK_ENV}, or pass --insecure ({INSECURE_ENV}=1) if something in front of the service authenticates every request"
            )
        return settings

    def host_allowed(self, header: str) -> bool:
        """Whether a request's Host header names one of the allowed hosts (``host_name`` parses it)."""
        name = host_name(header)
        if name is None:
            return False
        for allowed in self.allowed_hosts:
            pattern = allowed.lower().strip("[]")
            if pattern == "*" or pattern == name or (pattern.startswith("*.") and name.endswith(pattern[1:])):
                return True
        return False


_PORT = re.compile(r"[0-9]{1,5}")
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")


def host_name(header: str) -> str | None:
    """The host name (lower case, IPv6 without brackets) of a ``Host`` header, or None if it is not one.

    Strict (RFC 9110 ``uri-host [ ":" port ]``): a port is 1 to 5 digits up to 65535 and nothing
    follows it, a name is dot-separated labels, an IPv6 literal is bracketed (a bare one is accepted
    only if it parses as an address). So ``localhost:evil.com`` and ``[::1]evil.com`` name no host.
    """
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        name, rest = text[1:end], text[end + 1 :]
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    elif text.count(":") > 1:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return None
        return text
    else:
        name, sep, port = text.partition(":")
        rest = sep + port
        if _NAME.fullmatch(name) is None:
            return None
    if rest and not (rest.startswith(":") and _PORT.fullmatch(rest[1:]) and int(rest[1:]) <= 65535):
        return None
    return name
