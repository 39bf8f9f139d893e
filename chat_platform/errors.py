"""Domain errors with the stable codes of docs/api.md.

Services raise these; the REST exception handler and the websocket consumer turn them into the
same ``{"error": {"code", "message", "details"}}`` shape.
"""

from typing import Any


class PlatformError(Exception):
    code = "error"
    http_status = 400
    default_message = "Something went wrong."

    def __init__(self, message: str | None = None, *, details: Any = None) -> None:
        self.message = message or self.default_message
        self.details = details if details is not None else {}
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class ValidationFailed(PlatformError):
    code = "validation_error"
    http_status = 400
    default_message = "The request is not valid."


class NotAuthenticated(PlatformError):
    code = "not_authenticated"
    http_status = 401
    default_message = "Authentication credentials were not provided or are invalid."


class PermissionDenied(PlatformError):
    code = "permission_denied"
    http_status = 403
    default_message = "Only the owner or staff can change this."


class NotFound(PlatformError):
    code = "not_found"
    http_status = 404
    default_message = "Not found."


class PayloadTooLarge(PlatformError):
    code = "payload_too_large"
    http_status = 413
    default_message = "The message is larger than 1 MB."


class ContextTooLarge(PlatformError):
    code = "context_too_large"
    http_status = 422
    default_message = "The message does not fit in the bot's context budget."


class ModelUnavailable(PlatformError):
    code = "model_unavailable"
    http_status = 502
    default_message = "The model provider did not answer."


class CompactionBusy(PlatformError):
    code = "compaction_busy"
    http_status = 409
    default_message = "Another compaction of this session did not finish in time."


class QuotaExceeded(PlatformError):
    """A daily token limit (the user's, a group's or an API key's) is spent; ``details`` carry
    ``resets_at`` (ISO 8601, the next 00:00 UTC), ``limit`` and ``used``."""

    code = "quota_exceeded"
    http_status = 429
    default_message = "The daily token limit is spent."


class RateLimited(PlatformError):
    """Too many of the user's requests at once (``chat_platform/heavy.py``); the answer carries
    ``Retry-After`` and ``details.retry_after_seconds``."""

    code = "rate_limited"
    http_status = 429
    default_message = "Too many requests at once; try again shortly."

    def __init__(self, message: str | None = None, *, retry_after: int, details: Any = None):
        self.retry_after = retry_after
        super().__init__(message, details={"retry_after_seconds": retry_after, **(details or {})})


class ServiceUnavailable(PlatformError):
    code = "service_unavailable"
    http_status = 503
    default_message = (
        "A service this request needs is down; nothing was changed. Try again shortly."
    )


class InternalError(PlatformError):
    code = "internal_error"
    http_status = 500
    default_message = "Something went wrong on our side; it has been logged."


class SignInRefused(PlatformError):
    """The password was right, but the account may not have a credential this way (yet):
    ``account_pending`` and ``email_unverified`` (403), ``mfa_required`` and ``mfa_invalid``
    (401: the request lacks its second factor). docs/accounts.md, "The token endpoint"."""

    code = "sign_in_refused"
    http_status = 403

    def __init__(self, code: str, message: str, *, http_status: int = 403) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status
