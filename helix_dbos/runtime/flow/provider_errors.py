"""A model provider's error, read: how long it asked to wait, and the
typed error a run fails with when the step gives up (``model_rate_limited``, ``model_unavailable``,
``model_auth_failed``, ``model_request_invalid``), keeping the provider's status and request id.

pydantic-ai has already sorted the SDK's exception into its categories (``ModelRateLimitError``,
``ModelAuthenticationError``...), read ``Retry-After``/``retry-after-ms`` into ``retry_after`` and kept
the response headers; the SDK's own exception is its ``__cause__``. Whether one is worth another request is the agent's
to say (``Agent.is_retryable``: ``definitions/model_requests.py`` for a pydantic-ai model).
"""

from __future__ import annotations

from typing import Any

from ...errors import (
    HelixError,
    ModelAuthFailedError,
    ModelProviderUnavailableError,
    ModelRateLimitedError,
    ModelRequestInvalidError,
)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` or ``Retry-After``), as pydantic-ai read them."""
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def request_id(exc: BaseException) -> str | None:
    """The provider's id of the failed request: its response header, or the SDK exception's own."""
    headers: Any = getattr(exc, "headers", None) or {}
    for key in ("x-request-id", "request-id", "openai-request-id", "x-amzn-requestid"):
        if isinstance(headers, dict) and headers.get(key):
            return str(headers[key])
    cause = exc.__cause__
    found = getattr(cause, "request_id", None) if cause is not None else None
    return str(found) if found else None


def typed(exc: BaseException, requests: int, seconds: float) -> HelixError | None:
    """The typed error a run fails with for provider error ``exc`` after ``requests`` requests over
    ``seconds``; ``None`` for anything that is not a provider's error (it fails as it is)."""
    from pydantic_ai.exceptions import (
        ModelAPIError,
        ModelAuthenticationError,
        ModelHTTPError,
        ModelQuotaExceededError,
        ModelRateLimitError,
        ModelRequestRejectedError,
    )

    if not isinstance(exc, ModelAPIError):
        return None
    status = status_of(exc)
    cls: type[HelixError]
    if isinstance(exc, (ModelRateLimitError, ModelQuotaExceededError)) or status == 429:
        cls, what = ModelRateLimitedError, "rate limited the request"
    elif isinstance(exc, ModelAuthenticationError) or status in (401, 403):
        cls, what = ModelAuthFailedError, "refused the credentials"
    elif isinstance(exc, ModelRequestRejectedError) or (isinstance(exc, ModelHTTPError) and status is not None and 400 <= status < 500 and status not in (408, 409)):
        cls, what = ModelRequestInvalidError, "refused the request"
    else:
        cls, what = ModelProviderUnavailableError, "was unavailable"
    rid = request_id(exc)
    facts = ", ".join(x for x in (
        f"HTTP {status}" if status is not None else None,
        f"request id {rid}" if rid else None,
        f"model {exc.model_name}" if getattr(exc, "model_name", None) else None,
    ) if x)
    asked = retry_after(exc)
    waited = f"; it asked to wait {asked:g} s" if asked is not None else ""
    plural = "s" if requests != 1 else ""
    message = f"the model provider {what} ({facts}) after {requests} request{plural} in {seconds:.1f} s{waited}: {exc.message}"
    detail = {"provider_status": status, "request_id": rid, "provider_error_code": exc.provider_error_code,
              "model": getattr(exc, "model_name", None), "requests": requests, "retry_after": asked}
    typed_error = cls(message, detail=detail)
    typed_error.__cause__ = exc
    return typed_error
