"""The bot pages (docs/architecture.md): list, create, edit, delete, and the Check model endpoint.

The form only checks shapes and types; saving goes through ``turns.services.bot`` (``bot_create`` /
``bot_update`` / ``bot_delete``), which run the model's full validation and the provider and
budget checks of ``turns.bot_validation`` — the very code the REST API and the admin run — and
the service's ``validation_error`` details are shown inline, field by field.

Access follows ``bots.queries``: someone else's private bot is a 404 whether or not it exists.
A *shared* bot the user does not own is shown read-only: it is in their list and in ``GET
/api/v1/bots/{id}/`` already; its ``api_base`` and ``api_key_env`` are left out, as in the API
(docs/bots.md). Writing to it (edit, delete, Check model) is 403 — nothing is revealed.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from bots.model_check import bot_model_check
from bots.models import Bot
from bots.queries import bot_can_edit, bot_get_for_user, bot_list_for_user
from bots.tool_choices import tool_choices
from chat_platform.errors import NotFound, PlatformError, ValidationFailed
from chat_platform.llm import gateway
from compaction.budget import (
    THRESHOLD_MARGIN_PERCENT,
    Budget,
    budget_compute,
    threshold_minimum,
)
from connections.queries import (
    connection_list_for_user,
    connection_model_ids,
    connection_model_string,
)
from turns.services.bot import (
    BOT_BASIC_FIELDS,
    BOT_COMPACTION_FIELDS,
    BOT_FIELDS,
    BOT_MEMORY_FIELDS,
    BOT_PRIVATE_FIELDS,
    BOT_TOOLS_FIELDS,
    bot_chats_deleted,
    bot_create,
    bot_delete,
    bot_update,
)

# Suggestions only (a <datalist>): any litellm model string is accepted.
MODEL_SUGGESTIONS = [
    "builtin/recall",
    "openai/gpt-4o-mini",
    "openai/gpt-4o",
    "anthropic/claude-3-5-sonnet-latest",
    "ollama/llama3.1",
]
COMPACTION_MODEL_SUGGESTIONS = ["builtin/extractive", "openai/gpt-4o-mini"]

BASIC_FIELDS = list(BOT_BASIC_FIELDS)
COMPACTION_FIELDS = list(BOT_COMPACTION_FIELDS)
MEMORY_FIELDS = list(BOT_MEMORY_FIELDS)
TOOLS_FIELDS = list(BOT_TOOLS_FIELDS)


class BotForm(forms.ModelForm):
    """Shapes and types only; ``save`` hands the values to the service that validates them."""

    api_base = forms.URLField(
        label="API base URL",
        help_text="Optional: an Ollama or OpenAI-compatible server.",
        required=False,
        max_length=500,
        assume_scheme="https",
        widget=forms.URLInput(attrs={"list": "api-base-suggestions"}),
    )
    # One model per line on the page; a list for the service (which checks each like ``model``).
    allowed_models = forms.CharField(
        label="Other models a chat may use",
        help_text="Optional, one per line: a user may pick one in a chat's settings.",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "autocomplete": "off", "spellcheck": "false"}),
    )

    class Meta:
        model = Bot
        fields = list(BOT_FIELDS)
        labels = {
            "system_prompt": "System prompt",
            "connection": "Provider connection",
            "api_base": "API base URL",
            "api_key_env": "API key variable",
            "max_output_tokens": "Max output tokens",
            "context_window": "Context window (tokens)",
            "is_shared": "Shared with every signed-in user",
            "compaction_enabled": "Compact long conversations",
            "compaction_threshold": "Compact in the background at (tokens)",
            "compaction_kept_percent": "Kept after compaction (% of what a call may send)",
            "compaction_model": "Compaction model",
            "compaction_fallback_extractive": "Fall back to builtin/extractive under pressure",
            "memory_index_size": "Memory index size (records)",
            "recall_enabled": "Let the bot recall records",
            "embedding_model": "Embedding model (search by meaning)",
        }
        help_texts = {
            "connection": "A provider an administrator set up: pick it, then one of its models. "
            "Its base URL and key are used; leave API base URL and key variable empty.",
            "model": "One of the connection's models, or (without a connection) any litellm model "
            "string, e.g. openai/gpt-4o-mini or ollama/llama3.1.",
            "api_base": "Optional: an Ollama or OpenAI-compatible server.",
            "api_key_env": (
                "The NAME of the environment variable holding the key; keys are never stored."
            ),
            "context_window": "0 = the model's own window (or the cap when litellm does not "
            "know the model).",
            "compaction_threshold": "0 = automatic (half of what a call may send). Set by "
            f"hand, at least {THRESHOLD_MARGIN_PERCENT} % of what a call may send above where "
            "background compaction lands.",
            "compaction_kept_percent": "1–99: where background compaction lands.",
            "compaction_model": 'Empty = follow the chat model ("builtin/extractive" for '
            "built-in models).",
            "memory_index_size": "0–200; 0 turns the index and recall off.",
            "embedding_model": "builtin/embed (the default) runs on this server; or a litellm "
            "embedding model (e.g. openai/text-embedding-3-small), called like the chat model. "
            "Recall finds messages by meaning, not only by their words. Empty = word search "
            "only.",
        }
        widgets = {
            "system_prompt": forms.Textarea(attrs={"rows": 4}),
            "model": forms.TextInput(attrs={"list": "model-suggestions", "autocomplete": "off"}),
            "compaction_model": forms.TextInput(
                attrs={"list": "compaction-model-suggestions", "autocomplete": "off"}
            ),
        }

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        models = self.initial.get("allowed_models")
        if isinstance(models, list):
            self.initial["allowed_models"] = "\n".join(str(m) for m in models)
        # Only allow-listed names can be picked (the service refuses any other anyway). A stored
        # name no longer on the list stays selectable so the page shows it and says why it fails.
        allowed = list(settings.PROVIDER_KEY_ENV_ALLOWED)
        current = self.instance.api_key_env if self.instance.pk else ""
        if current and current not in allowed:
            allowed.append(current)
        self.fields["api_key_env"] = forms.ChoiceField(
            label=self.Meta.labels["api_key_env"],
            help_text=self.Meta.help_texts["api_key_env"],
            choices=[("", "— none —"), *[(name, name) for name in allowed]],
            required=False,
        )
        # Only the connections this user may use (the service refuses any other anyway).
        self.fields["connection"].queryset = connection_list_for_user(user=user)
        self.fields["connection"].empty_label = "— none: the model string and api_base below —"
        self.fields["temperature"].widget.attrs.update({"step": "0.1", "min": "0", "max": "2"})
        self.fields["compaction_kept_percent"].widget.attrs.update({"min": "1", "max": "99"})
        self.fields["memory_index_size"].widget.attrs.update({"min": "0", "max": "200"})
        self.fields["max_output_tokens"].widget.attrs.update({"min": "1"})
        # A checklist per tool server the user may use (static/bots/tool_checklist.js).
        current = self.instance.tools if isinstance(self.instance.tools, list) else []
        self.fields["tools"] = forms.MultipleChoiceField(
            label="Tools",
            choices=tool_choices(user=user, current=current),
            required=False,
            widget=forms.CheckboxSelectMultiple(attrs={"class": "tool-choice"}),
            help_text="Tools from the MCP servers you may use: the model may call them while "
            'it replies. "All tools" follows the server\'s list as staff refresh it.',
        )

    def clean_allowed_models(self) -> list[str]:
        return [
            line.strip()
            for line in self.cleaned_data["allowed_models"].splitlines()
            if line.strip()
        ]

    def _post_clean(self) -> None:
        # ModelForm would copy the values onto the instance and run full_clean here; the
        # service does both (and more), so the form never validates a bot on its own.
        pass

    def save(self, commit: bool = True) -> Bot | None:  # type: ignore[override]
        """Create or update through the service; on ``validation_error`` add its details to
        the fields they name and return ``None`` (nothing was saved)."""
        values = {name: self.cleaned_data[name] for name in BOT_FIELDS}
        try:
            if self.instance.pk:
                return bot_update(user=self.user, bot_id=self.instance.pk, **values)
            return bot_create(owner=self.user, **values)
        except ValidationFailed as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            for field, problems in details.items():
                self.add_error(field if field in self.fields else None, problems)
            if not details:
                self.add_error(None, exc.message)
            return None

    def section(self, names: list[str]) -> list[forms.BoundField]:
        return [self[name] for name in names if name in self.fields]


# --- budget preview ---------------------------------------------------------------------------


def _as_int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _model_max(model: str) -> int | None:
    return gateway.model_max_input_tokens(model) if model else None


def _budget_for(values: dict[str, Any]) -> Budget | None:
    """docs/compaction.md for the values on the page (the same ``budget_compute`` the turn uses);
    ``None`` when they are not numbers in range yet."""
    context_window = _as_int(values.get("context_window"), 0)
    try:
        return budget_compute(
            context_window=context_window,
            model_max_input_tokens=None if context_window else _model_max(values["model"]),
            max_output_tokens=_as_int(values.get("max_output_tokens"), 0),
            compaction_threshold=_as_int(values.get("compaction_threshold"), 0),
            compaction_kept_percent=_as_int(values.get("compaction_kept_percent"), 0),
            absolute_cap=settings.CONTEXT_ABSOLUTE_CAP_TOKENS,
        )
    except (TypeError, ValueError):
        return None


def _page_values(form: BotForm | None, bot: Bot) -> dict[str, Any]:
    """What the page shows: the submitted values after a refused POST, else the bot's."""
    values = {name: getattr(bot, name) for name in BOT_FIELDS}
    if form is not None and form.is_bound:
        for name in BOT_FIELDS:
            if name in form.data:
                values[name] = form.data.get(name)
    return values


def model_warning(model: str, *, context_window: int = 0) -> str:
    """A warning for a model litellm does not know (its window falls back to the cap) — none
    once a context window is set, since the cap then does not apply."""
    if context_window > 0:
        return ""
    if not model or model.startswith(gateway.BUILTIN_PREFIX) or _model_max(model):
        return ""
    cap = settings.CONTEXT_ABSOLUTE_CAP_TOKENS
    return (
        f'litellm does not know the model "{model}": its context window falls back to the cap '
        f"of {cap:,} tokens unless you set Context window. Check the spelling "
        '(provider/model, e.g. "openai/gpt-4o-mini") and use Check model after saving.'
    )


def budget_note(
    budget: Budget | None, *, context_window: int, model_max: int | None, threshold: int = 0
) -> str:
    """The line under the numbers; static/bots/bot_form.js writes the same sentences, in words a
    person reads (no W, B, S, H). A soft threshold above the hard one is kept as entered and
    said to act as the hard one, never changed silently."""
    if budget is None:
        return "Enter whole numbers (max output tokens at least 1, kept 1–99) to see them."
    if budget.budget == 0:
        return "No budget: max output tokens must be smaller than the window."
    if context_window > 0:
        source = "The window is the one set above."
    elif model_max:
        source = "The window is the model's, according to litellm."
    else:
        source = (
            "The window is the cap (CONTEXT_ABSOLUTE_CAP_TOKENS): the model's window is not known."
        )
    note = (
        f"{source} A call sends at most the window minus the max output tokens "
        "(never more than the cap)."
    )
    minimum = threshold_minimum(budget)
    if 0 < threshold < minimum and minimum <= budget.hard:
        note += (
            f" Compacting in the background at {threshold:,} is too low: set it to at least "
            f"{minimum:,} tokens (where background compaction lands, {budget.target:,}, plus "
            f"{THRESHOLD_MARGIN_PERCENT} % of what a call may send, {minimum - budget.target:,}), "
            "or to 0 (automatic)."
        )
    elif threshold > 0 and minimum > budget.hard:
        note += (
            f" Background compaction lands at {budget.target:,}, too close to where it compacts "
            f"before replying ({budget.hard:,}): lower what is kept after compaction, or set the "
            "threshold to 0 (automatic)."
        )
    if threshold > budget.hard:
        note += (
            f" Compacting in the background is set to start at {threshold:,}, above where it "
            f"compacts before replying ({budget.hard:,}): it will compact before replying at "
            f"{budget.hard:,} tokens, never in the background. Lower it to compact in the "
            "background first."
        )
    return note


def _form_context(
    request: HttpRequest, form: BotForm, bot: Bot, *, editable: bool = True
) -> dict[str, Any]:
    values = _page_values(form, bot)
    model = str(values.get("model") or "")
    context_window = _as_int(values.get("context_window"), 0)
    model_max = _model_max(model)  # also when a window is set: the page may clear it
    budget = _budget_for(values)
    display_names = ("window", "budget", "soft", "hard", "target", "target_blocking")
    return {
        "form": form,
        "bot": bot,
        "editable": editable,
        "show_private": editable,
        "basic_fields": form.section(BASIC_FIELDS if editable else _public(BASIC_FIELDS)),
        "compaction_fields": form.section(COMPACTION_FIELDS),
        "memory_fields": form.section(MEMORY_FIELDS),
        "tools_fields": form.section(TOOLS_FIELDS),
        "budget": budget,
        "budget_display": {
            name: f"{getattr(budget, name):,}" if budget else "—" for name in display_names
        },
        "budget_note": budget_note(
            budget,
            context_window=context_window,
            model_max=model_max,
            threshold=_as_int(values.get("compaction_threshold"), 0),
        ),
        "model_max": model_max,
        "model_warning": model_warning(model, context_window=context_window),
        "model_warning_text": model_warning(model),
        "cap": settings.CONTEXT_ABSOLUTE_CAP_TOKENS,
        "model_suggestions": connection_model_suggestions(request.user) + MODEL_SUGGESTIONS,
        "compaction_model_suggestions": COMPACTION_MODEL_SUGGESTIONS,
        "api_base_suggestions": list(settings.PROVIDER_API_BASES),
        "is_staff": bool(request.user.is_staff),
        # Advanced opens by itself when something in it needs attention.
        "advanced_open": any(
            name in form.errors for name in (*COMPACTION_FIELDS, *MEMORY_FIELDS, *TOOLS_FIELDS)
        ),
    }


def connection_model_suggestions(user: Any) -> list[str]:
    """Every model of the connections ``user`` may use, as the litellm strings a bot stores
    (the model list the bot form offers once a connection is picked)."""
    found: list[str] = []
    for connection in connection_list_for_user(user=user):
        for model_id in connection_model_ids(connection):
            model = connection_model_string(connection, model_id)
            if model not in found:
                found.append(model)
    return found


def _public(names: list[str]) -> list[str]:
    return [name for name in names if name not in BOT_PRIVATE_FIELDS]


def _bot_or_404(request: HttpRequest, bot_id: int) -> Bot:
    try:
        return bot_get_for_user(user=request.user, bot_id=bot_id)
    except NotFound:
        raise Http404("Bot not found.") from None


def _forbidden(request: HttpRequest, bot: Bot) -> HttpResponse:
    return render(request, "bots/bot_forbidden.html", {"bot": bot}, status=403)


# --- pages ------------------------------------------------------------------------------------


@login_required
@require_GET
def bot_list_page(request: HttpRequest) -> HttpResponse:
    bots = [
        {"bot": bot, "editable": bot_can_edit(user=request.user, bot=bot)}
        for bot in bot_list_for_user(user=request.user)
    ]
    return render(request, "bots/bot_list.html", {"rows": bots})


@login_required
@require_http_methods(["GET", "POST"])
def bot_new_page(request: HttpRequest) -> HttpResponse:
    blank = Bot(owner=request.user)
    if request.method == "POST":
        form = BotForm(request.POST, instance=blank, user=request.user)
        if form.is_valid():
            bot = form.save()
            if bot is not None:
                messages.success(request, f"Bot “{bot.name}” created.")
                return redirect("bot-page-edit", bot_id=bot.pk)
        return render(
            request, "bots/bot_form.html", _form_context(request, form, blank), status=400
        )
    form = BotForm(instance=blank, user=request.user)
    return render(request, "bots/bot_form.html", _form_context(request, form, blank))


@login_required
@require_http_methods(["GET", "POST"])
def bot_edit_page(request: HttpRequest, bot_id: int) -> HttpResponse:
    bot = _bot_or_404(request, bot_id)
    if not bot_can_edit(user=request.user, bot=bot):
        if request.method == "POST":
            return _forbidden(request, bot)
        form = BotForm(instance=bot, user=request.user)
        for field in form.fields.values():
            field.disabled = True
        return render(
            request, "bots/bot_form.html", _form_context(request, form, bot, editable=False)
        )
    if request.method == "POST":
        form = BotForm(request.POST, instance=bot, user=request.user)
        if form.is_valid():
            try:
                saved = form.save()
            except NotFound:
                raise Http404("Bot not found.") from None
            if saved is not None:
                messages.success(request, f"Saved “{saved.name}”.")
                return redirect("bot-page-edit", bot_id=saved.pk)
        return render(request, "bots/bot_form.html", _form_context(request, form, bot), status=400)
    form = BotForm(instance=bot, user=request.user)
    return render(request, "bots/bot_form.html", _form_context(request, form, bot))


@login_required
@require_http_methods(["GET", "POST"])
def bot_delete_page(request: HttpRequest, bot_id: int) -> HttpResponse:
    bot = _bot_or_404(request, bot_id)
    if not bot_can_edit(user=request.user, bot=bot):
        return _forbidden(request, bot)
    if request.method == "POST":
        try:
            bot_delete(user=request.user, bot_id=bot.pk)
        except NotFound:
            raise Http404("Bot not found.") from None
        messages.success(request, f"Deleted “{bot.name}” and your chats with it.")
        return redirect("bot-page-list")
    sessions = bot_chats_deleted(bot).count()
    return render(request, "bots/bot_confirm_delete.html", {"bot": bot, "sessions": sessions})


# --- JSON endpoints used by static/bots/bot_form.js ---------------------------------------------


def _json_error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "details": {}}}, status=status)


def _json_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return _json_error("not_authenticated", "Sign in first.", 401)
        return view(request, *args, **kwargs)

    return wrapper


@_json_login_required
@require_POST
def bot_check_page(request: HttpRequest, bot_id: int) -> HttpResponse:
    """POST /bots/<id>/check/: one tiny call with the SAVED bot's settings (owner/staff)."""
    try:
        result = bot_model_check(user=request.user, bot_id=bot_id)
    except PlatformError as exc:  # not found, not the owner's; no slot or quota: no call made
        return _json_error(exc.code, exc.message, exc.http_status)
    return JsonResponse(result.as_dict())


@_json_login_required
@require_GET
def model_info_page(request: HttpRequest) -> HttpResponse:
    """GET /bots/model-info/?model=…: what litellm's local model map says (no network)."""
    model = request.GET.get("model", "").strip()[:200]
    return JsonResponse(
        {
            "model": model,
            "max_input_tokens": _model_max(model),
            "warning": model_warning(model),
            "cap": settings.CONTEXT_ABSOLUTE_CAP_TOKENS,
        }
    )
