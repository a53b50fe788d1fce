"""Exceptions: one class per API error code (docs/api.md, common/errors.c).

Every error the controller answers has the body
``{"error": {"code": ..., "message": ...}}``; :func:`error_from` turns it into
the class named after its code. An operation that ends ``failed`` or
``cancelled`` raises the class of ``operation.error.code`` with
``.operation`` set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Type

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .operation import Operation

__all__ = [
    "SandboxError",
    "SandboxConnectionError",
    "InvalidArgument",
    "InvalidJson",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "Conflict",
    "StaleLease",
    "PayloadTooLarge",
    "PolicyDenied",
    "IsolationUnavailable",
    "QuotaExceeded",
    "Unavailable",
    "InternalError",
    "ImageUnavailable",
    "SandboxRuntimeError",
    "OperationTimeout",
    "WorkerLost",
    "Cancelled",
    "BadGateway",
    "HeadersTooLarge",
    "SandboxExited",
    "RateLimited",
    "RequestTimeout",
    "ERROR_CLASSES",
    "error_from",
]


class SandboxError(Exception):
    """Base of every error of this package.

    ``code`` is the API's error code (``"not_found"``), ``message`` its text,
    ``status`` the HTTP status (None for an operation's error or a failure
    before any answer), ``request_id`` the answer's ``X-Request-Id`` (quote
    it when asking an operator: the controller logs it), ``operation`` the
    :class:`Operation` whose error this is, when it is one.
    """

    code: str = "error"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        request_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        operation: Optional["Operation"] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.request_id = request_id
        self.operation = operation
        self.body = body
        self._retry_after = retry_after

    def __str__(self) -> str:
        parts = [f"{self.code}: {self.message}"]
        if self.status is not None:
            parts.append(f"(HTTP {self.status}")
            parts[-1] += f", request {self.request_id})" if self.request_id else ")"
        if self.operation is not None:
            parts.append(f"(operation {self.operation.id})")
        return " ".join(parts)


class SandboxConnectionError(SandboxError):
    """The controller could not be reached or its answer was cut off
    (connection refused or reset, TLS verification failed, a timeout, a
    download that ended early). Retried for safe requests before it is
    raised."""

    code = "connection_error"


class _RetryAfterMixin(SandboxError):
    @property
    def retry_after(self) -> Optional[float]:
        """Seconds the server asked to wait (its ``Retry-After``), or None."""
        return self._retry_after


class InvalidArgument(SandboxError):
    code = "invalid_argument"


class InvalidJson(SandboxError):
    code = "invalid_json"


class Unauthorized(SandboxError):
    code = "unauthorized"


class Forbidden(SandboxError):
    code = "forbidden"


class NotFound(SandboxError):
    code = "not_found"


class MethodNotAllowed(SandboxError):
    code = "method_not_allowed"


class Conflict(SandboxError):
    code = "conflict"


class StaleLease(SandboxError):
    code = "stale_lease"


class PayloadTooLarge(SandboxError):
    code = "payload_too_large"


class PolicyDenied(SandboxError):
    code = "policy_denied"


class IsolationUnavailable(SandboxError):
    code = "isolation_unavailable"


class QuotaExceeded(_RetryAfterMixin):
    code = "quota_exceeded"


class Unavailable(_RetryAfterMixin):
    code = "unavailable"


class InternalError(SandboxError):
    code = "internal"


class ImageUnavailable(SandboxError):
    code = "image_unavailable"


class SandboxRuntimeError(SandboxError):
    code = "runtime_error"


class OperationTimeout(SandboxError):
    """The server's ``timeout``: an operation not placed before its deadline
    (not a client-side wait running out, which is :class:`TimeoutError`)."""

    code = "timeout"


class WorkerLost(SandboxError):
    code = "worker_lost"


class Cancelled(SandboxError):
    code = "cancelled"


class BadGateway(SandboxError):
    code = "bad_gateway"


class HeadersTooLarge(SandboxError):
    code = "headers_too_large"


class SandboxExited(SandboxError):
    code = "sandbox_exited"


class RateLimited(_RetryAfterMixin):
    code = "rate_limited"


class RequestTimeout(SandboxError):
    code = "request_timeout"


ERROR_CLASSES: Dict[str, Type[SandboxError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        InvalidJson,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        StaleLease,
        PayloadTooLarge,
        PolicyDenied,
        IsolationUnavailable,
        QuotaExceeded,
        Unavailable,
        InternalError,
        ImageUnavailable,
        SandboxRuntimeError,
        OperationTimeout,
        WorkerLost,
        Cancelled,
        BadGateway,
        HeadersTooLarge,
        SandboxExited,
        RateLimited,
        RequestTimeout,
    )
}


def error_from(
    code: Optional[str],
    message: str,
    *,
    status: Optional[int] = None,
    request_id: Optional[str] = None,
    retry_after: Optional[float] = None,
    operation: Optional["Operation"] = None,
    body: Any = None,
) -> SandboxError:
    """The exception for an API error code; an unknown code (a newer server)
    gives a plain :class:`SandboxError` carrying that code."""
    cls = ERROR_CLASSES.get(code or "", SandboxError)
    return cls(
        message,
        code=code or "error",
        status=status,
        request_id=request_id,
        retry_after=retry_after,
        operation=operation,
        body=body,
    )
