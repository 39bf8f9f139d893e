"""What every service of the chat shares: model validation as the platform's error."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError

from chat_platform.errors import ValidationFailed


def full_clean(instance: Any, **kwargs: Any) -> None:
    try:
        instance.full_clean(**kwargs)
    except DjangoValidationError as exc:
        raise ValidationFailed(details=exc.message_dict) from None
