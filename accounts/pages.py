"""``/settings/`` (docs/accounts.md): one page for the signed-in user's account — profile, links
to the password, email and two-factor pages, API keys (create, shown once; list; revoke) and
today's usage. Keys are made and revoked by ``openai_api.keys``, the same service functions the
``/api/v1/api-keys/`` endpoints call; this page only turns form posts into their arguments."""

import datetime as dt
import secrets
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from bots.queries import bot_list_for_user
from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.textcheck import text_is_storable
from connections import usage
from connections.pages import replies_tokens_today
from openai_api import keys
from openai_api.models import ApiKey


def _handle(bot: Any, user: Any) -> str:
    return bot.slug if bot.owner_id == user.pk else f"{bot.owner.get_username()}/{bot.slug}"


class ApiKeyForm(forms.Form):
    """Shapes and types only; ``keys.key_create`` checks the values (as for the REST API)."""

    name = forms.CharField(label="Name", max_length=keys.NAME_MAX_CHARS)
    bots = forms.TypedMultipleChoiceField(
        label="Bots",
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every bot you may use, now and later.",
    )
    expires_at = forms.DateTimeField(
        label="Expires (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Optional: the key stops working then.",
    )
    daily_token_limit = forms.IntegerField(
        label="Daily token limit",
        required=False,
        help_text="Optional: tokens this key may use per day (UTC), on top of your own limit.",
    )
    access = forms.ChoiceField(
        label="Access",
        choices=[
            (ApiKey.Access.FULL, "Full: chat and read"),
            (ApiKey.Access.READ, "Read: read only; cannot chat"),
        ],
        initial=ApiKey.Access.FULL,
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["bots"]
        assert isinstance(field, forms.TypedMultipleChoiceField)
        # Another user's shared bot is named as /v1 names it when it must: ``owner/slug``.
        field.choices = [
            (bot.pk, f"{bot.name} ({_handle(bot, user)})")
            for bot in bot_list_for_user(user=user).order_by("name", "id")
        ]

    def clean_expires_at(self) -> dt.datetime | None:
        value = self.cleaned_data["expires_at"]
        # The form's time is UTC, as the page says, whatever the server's time zone.
        if value is not None and timezone.is_naive(value):
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC) if value is not None else None


class ProfileForm(forms.ModelForm):
    """The user's own name (the username is how they sign in, the email has its own page)."""

    class Meta:
        model = get_user_model()
        fields = ["first_name", "last_name"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for field in self.Meta.fields:
            value = data.get(field)
            if isinstance(value, str) and not text_is_storable(value):
                self.add_error(field, "Text only: no control characters.")
        return data


def _render(
    request: HttpRequest,
    form: ApiKeyForm,
    *,
    created: tuple[ApiKey, str] | None,
    status: int,
    profile: ProfileForm | None = None,
) -> HttpResponse:
    user = request.user
    limit = usage.user_limit(user.pk)
    # The limit's counter; with no limit there is none: what the usage page counts today.
    used = (
        usage.tokens_today(f"user:{user.pk}")[0] if limit else replies_tokens_today(user_id=user.pk)
    )
    response = render(
        request,
        "accounts/settings.html",
        {
            "form": form,
            "profile_form": profile or ProfileForm(instance=user),
            "created": created,
            "keys": keys.key_list_for_user(user=user),
            "limit": limit,
            "used_today": used,
            "resets_at": usage.resets_at(),
            "form_once": _form_once(request),
        },
        status=status,
    )
    # The page may hold a key's text (once): never kept by a browser or a proxy.
    response["Cache-Control"] = "no-store"
    return response


# The key form carries a token good for one creation: a reload of the page that showed a new
# key posts the form again, and made a second full-access key each time. The newest few are
# kept (several tabs may be open).
FORM_ONCE_KEPT = 5
_FORM_ONCE = "api_key_form_once"


def _form_once(request: HttpRequest) -> str:
    token = secrets.token_urlsafe(16)
    kept = request.session.get(_FORM_ONCE, [])
    request.session[_FORM_ONCE] = [*kept, token][-FORM_ONCE_KEPT:]
    return token


def _form_once_spent(request: HttpRequest) -> bool:
    """Whether the form's token was used already (a form without one, a script's, is let be)."""
    token = request.POST.get("once")
    if not token:
        return False
    kept = request.session.get(_FORM_ONCE, [])
    if token not in kept:
        return True
    request.session[_FORM_ONCE] = [t for t in kept if t != token]
    return False


@login_required
@require_GET
def settings_page(request: HttpRequest) -> HttpResponse:
    return _render(request, ApiKeyForm(user=request.user), created=None, status=200)


@login_required
@require_POST
def api_key_create_page(request: HttpRequest) -> HttpResponse:
    """Create a key and show its text in this answer only (no redirect: it is never stored)."""
    if _form_once_spent(request):
        messages.info(
            request,
            "That form was sent already: its key is listed below (a key's text is shown once).",
        )
        return redirect("settings")
    form = ApiKeyForm(request.POST, user=request.user)
    if not form.is_valid():
        return _render(request, form, created=None, status=400)
    data = form.cleaned_data
    try:
        created = keys.key_create(
            user=request.user,
            name=data["name"],
            bots=data["bots"] or None,
            expires_at=data["expires_at"],
            daily_token_limit=data["daily_token_limit"],
            access=data["access"],
        )
    except ValidationFailed as exc:
        details = exc.details if isinstance(exc.details, dict) else {}
        for field, problems in details.items():
            form.add_error(field if field in form.fields else None, problems)
        return _render(request, form, created=None, status=400)
    return _render(request, ApiKeyForm(user=request.user), created=created, status=200)


@login_required
@require_POST
def profile_update_page(request: HttpRequest) -> HttpResponse:
    """Change the user's name; a bad value shows the page again with its error, nothing saved."""
    form = ProfileForm(request.POST, instance=request.user)
    if not form.is_valid():
        keys_form = ApiKeyForm(user=request.user)
        return _render(request, keys_form, created=None, status=400, profile=form)
    form.save()
    messages.success(request, "Profile saved.")
    return redirect("settings")


@login_required
@require_POST
def api_key_revoke_page(request: HttpRequest, prefix: str) -> HttpResponse:
    """Revoke one of the user's keys; another user's (or an unknown) key answers 404."""
    try:
        keys.key_revoke(user=request.user, prefix=prefix)
    except NotFound:
        raise Http404("API key not found.") from None
    messages.success(request, f"Key {prefix} revoked: it no longer works.")
    return redirect("settings")
