"""The errors of ``/v1/``, in OpenAI's shape: the platform's errors and a reply that did not
complete, said the OpenAI way (docs/openai-api.md)."""

from bots.models import Message
from chat_platform import errors


class OpenAIError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.message, self.status, self.type_, self.code, self.param = (
            message,
            status,
            type_,
            code,
            param,
        )


def invalid(message: str, param: str | None, code: str | None = None) -> OpenAIError:
    return OpenAIError(message, param=param, code=code)


def from_platform(exc: errors.PlatformError) -> OpenAIError:
    """The platform's errors, said the OpenAI way."""
    if isinstance(exc, errors.ContextTooLarge):
        return OpenAIError(exc.message, code="context_length_exceeded", param="messages")
    if isinstance(exc, errors.NotFound):
        return OpenAIError(exc.message, status=404, code="not_found")
    if isinstance(exc, errors.PermissionDenied):
        return OpenAIError(exc.message, status=403, code="permission_denied")
    if isinstance(exc, errors.PayloadTooLarge):
        return OpenAIError(exc.message, status=413, code="payload_too_large", param="messages")
    if isinstance(exc, errors.ValidationFailed):
        param = exc.details.get("param") if isinstance(exc.details, dict) else None
        return OpenAIError(exc.message, param=param if isinstance(param, str) else None)
    if isinstance(exc, errors.ServiceUnavailable):
        return OpenAIError(
            exc.message, status=503, type_="server_error", code="service_unavailable"
        )
    if isinstance(exc, errors.RateLimited):  # the user's heavy requests (chat_platform/heavy.py)
        return OpenAIError(
            exc.message,
            status=429,
            type_="requests",
            code="rate_limit_exceeded",
            retry_after=exc.retry_after,
        )
    if isinstance(exc, errors.ModelUnavailable):
        return OpenAIError(exc.message, status=502, type_="server_error", code="model_unavailable")
    return OpenAIError(exc.message, status=500, type_="server_error", code=exc.code)


def quota_error(message: str) -> OpenAIError:
    """A spent daily token limit (the key's or its user's), as OpenAI says a spent token rate
    limit (docs/openai-api.md: ``rate_limit_exceeded``, 429); the message says when it resets."""
    return OpenAIError(message, status=429, type_="tokens", code="rate_limit_exceeded")


def reply_error(reply: Message) -> OpenAIError:
    """A reply that ended without completing, as the call's error."""
    code = reply.error_code or "internal_error"
    message = reply.error_message or "The reply did not complete."
    if code == errors.ContextTooLarge.code:
        return OpenAIError(message, code="context_length_exceeded", param="messages")
    if code == errors.ModelUnavailable.code:
        return OpenAIError(message, status=502, type_="server_error", code="model_unavailable")
    if code in (errors.ServiceUnavailable.code, "interrupted"):
        return OpenAIError(message, status=503, type_="server_error", code=code)
    if code == errors.NotFound.code:
        return OpenAIError(message, status=404, code="model_not_found", param="model")
    if code == errors.QuotaExceeded.code:
        return quota_error(message)
    return OpenAIError(message, status=500, type_="server_error", code=code)
