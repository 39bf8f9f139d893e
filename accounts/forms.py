from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from accounts import services

PENDING_MESSAGE = (
    "This account is waiting for an administrator's approval. You can sign in once it is approved."
)


class SignInForm(AuthenticationForm):
    """Django's login form (fields ``username``, ``password``), which also tells a pending account
    that it waits for approval, once the password is right."""

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except forms.ValidationError:
            pending = services.pending_user_for_credentials(
                username=self.cleaned_data.get("username"),
                password=self.cleaned_data.get("password"),
            )
            if pending is not None:
                raise forms.ValidationError(PENDING_MESSAGE, code="pending") from None
            raise
