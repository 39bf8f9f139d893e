"""The checks a bot's settings pass before they are saved, by every writer (API, pages, admin).

``check_bot_settings`` runs after the model's own ``full_clean`` and knows who is acting:

* provider credentials and endpoint (docs/bots.md, ``chat_platform.provider_policy``):
  ``api_key_env`` only from ``PROVIDER_KEY_ENV_ALLOWED`` (everyone, staff included); ``api_base``
  an http(s) URL, any for staff, otherwise under ``PROVIDER_API_BASES``. An api_base staff set
  stays usable when its non-staff owner edits other fields (it is only re-checked when changed).
* tools (docs/tools.md): ``"<server>/<tool>"`` or ``"<server>/*"``, a server the acting user
  may use (staff: any) — checked for the entries they add, so what staff gave a bot stays while
  its owner edits — a tool the server listed (once its tools were read), and schemas that take at
  most ``TOOL_SCHEMAS_MAX_PERCENT`` of B (``check_bot_tools``).
* a usable budget: B > 0 (docs/compaction.md), else every message would be refused, and a system
  prompt under the hard threshold H = 75 % of B (``check_bot_system_prompt``), else it leaves
  no room for the conversation.
"""

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser

from bots.model_config import connection_serves
from bots.models import Bot
from chat_platform import provider_policy
from chat_platform.errors import ValidationFailed
from chat_platform.llm.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message_tokens,
    count_tools_tokens,
)
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from compaction.budget import THRESHOLD_MARGIN_PERCENT, Budget, threshold_minimum
from compaction.measure import bot_budget
from connections.queries import (
    connection_model_ids,
    connection_model_string,
    connection_model_window,
    connection_usable_by,
)
from memory.recall import TOOLS as RECALL_TOOLS
from tools.offer import entry_parts, entry_servers, tools_offered
from tools.queries import tool_servers_named, tool_servers_usable_named
from turns.bot_model_names import check_bot_builtin_models, check_bot_embedding_model


def _is_staff(user: AbstractBaseUser | None) -> bool:
    return bool(getattr(user, "is_staff", False))


def check_bot_connection(
    *, user: AbstractBaseUser | None, bot: Bot, changed: set[str] | None = None
) -> None:
    """A bot on a provider connection: the acting user may use it (staff: any), it replaces
    ``api_base`` / ``api_key_env`` (not both), and every model name it sets (``MODEL_FIELDS``)
    is one the connection lists (staff may name any model of its provider). A listed id
    (``fake-model``) is stored as the litellm string (``openai/fake-model``); the context window
    fills in from what discovery reported when the caller left it at 0."""
    connection = bot.connection
    assert connection is not None
    errors: dict[str, list[str]] = {}
    changed = changed if changed is not None else set()
    touched = bot.pk is None or "connection" in changed
    if touched and (user is None or not connection_usable_by(connection=connection, user=user)):
        raise ValidationFailed(
            details={"connection": ["No such connection, or you may not use it."]}
        )
    if bot.api_base or bot.api_key_env:
        errors["connection"] = [
            "A bot uses either a connection or its own api_base / api_key_env, not both."
        ]
    if _check_allowed_models_shape(bot=bot, errors=errors):
        _check_connection_models(
            user=user,
            bot=bot,
            errors=errors,
            checked={f for f in MODEL_FIELDS if touched or f in changed},
        )
    if errors:
        raise ValidationFailed(details=errors)
    if "context_window" not in changed and not bot.context_window:
        window = connection_model_window(connection, bot.model)
        if window:
            bot.context_window = window
    # The connection is what staff approved: no per-bot approvals are kept beside it.
    bot.api_base_approved = ""
    bot.models_approved = ""


# Every field that names a model a bot's calls use (tool choices will join them): one rule each.
MODEL_FIELDS = ("model", "allowed_models", "compaction_model", "embedding_model")


def _check_connection_models(
    *, user: AbstractBaseUser | None, bot: Bot, errors: dict, checked: set[str]
) -> None:
    """The one rule for every model name of a bot on a connection (docs/connections.md): a
    listed id becomes its litellm string; the name is one of the connection's provider; and
    unless the user is staff, one the connection lists (when discovery listed any). Only the
    fields in ``checked`` are held to the list, so what staff set stays usable while the owner
    edits other fields. A built-in compaction model is always allowed; blank fields are unset."""
    connection = bot.connection
    assert connection is not None
    listed = [connection_model_string(connection, m) for m in connection_model_ids(connection)]
    shown = ", ".join(m.partition("/")[2] or m for m in listed[:20])
    not_listed = f"Not a model of the connection {connection.name}: pick one of {shown}."

    def refusal(field: str, model: str) -> str | None:
        if field in ("compaction_model", "embedding_model") and model.startswith("builtin/"):
            return None
        if not connection_serves(connection, model):
            return _NOT_SERVED[field].format(name=connection.name)
        if listed and model not in listed and not _is_staff(user) and field in checked:
            return not_listed
        return None

    bot.model = connection_model_string(connection, bot.model)
    bot.allowed_models = [connection_model_string(connection, m) for m in bot.allowed_models]
    for field in ("compaction_model", "embedding_model"):
        value = getattr(bot, field)
        if value and not value.startswith("builtin/"):
            setattr(bot, field, connection_model_string(connection, value))
    problem = refusal("model", bot.model)
    if problem:
        errors["model"] = [problem]
    for model in bot.allowed_models:
        problem = refusal("allowed_models", model)
        if problem:
            errors.setdefault("allowed_models", []).append(f"{model}: {problem}")
    for field in ("compaction_model", "embedding_model"):
        value = getattr(bot, field)
        problem = refusal(field, value) if value else None
        if problem:
            errors[field] = [problem]


_NOT_SERVED = {
    "model": "Not a model of the connection {name}.",
    "allowed_models": "Not a model of the connection {name}.",
    "compaction_model": (
        "With a connection, the compaction model is a built-in one or one of the connection's."
    ),
    "embedding_model": (
        "With a connection, the embedding model is the built-in one or one of the connection's."
    ),
}


def check_bot_provider(
    *, user: AbstractBaseUser | None, bot: Bot, previous_api_base: str | None
) -> None:
    """Validate ``api_key_env`` and ``api_base`` for ``user``; record a staff-set api_base as
    approved on ``bot``. ``previous_api_base`` is the stored value (``None`` on create)."""
    errors: dict[str, list[str]] = {}
    # The allow-list is checked before any environment lookup: the answer is the same whether
    # or not the named variable exists.
    if bot.api_key_env and not provider_policy.key_env_allowed(bot.api_key_env):
        errors["api_key_env"] = [
            "Not an allowed provider key variable (PROVIDER_KEY_ENV_ALLOWED): ask an administrator."
        ]
    if not bot.api_base:
        bot.api_base_approved = ""
    elif not provider_policy.api_base_is_http(bot.api_base):
        errors["api_base"] = [
            "Must be a plain http(s) URL: no user name or password, query or fragment."
        ]
    elif _is_staff(user):
        bot.api_base_approved = bot.api_base
    elif bot.api_base != previous_api_base:
        if not provider_policy.api_base_listed(bot.api_base):
            errors["api_base"] = [
                "Not an allowed provider address (PROVIDER_API_BASES): ask an administrator."
            ]
        bot.api_base_approved = ""
    if _check_allowed_models_shape(bot=bot, errors=errors):
        _check_models(user=user, bot=bot, errors=errors)
    if errors:
        raise ValidationFailed(details=errors)


_PROVIDER_NOT_ALLOWED = (
    "Not a provider your bots may use: name one of {providers} (e.g. openai/<model> with an "
    "allowed api_base), or ask an administrator."
)
_DEFAULT_NOT_LISTED = (
    "This provider's default address is not allowed (PROVIDER_API_BASES): set an allowed "
    "api_base, or ask an administrator."
)


ALLOWED_MODELS_MAX = 20


def _check_allowed_models_shape(*, bot: Bot, errors: dict) -> bool:
    """``allowed_models``: a list of at most ``ALLOWED_MODELS_MAX`` distinct model names (text of
    at most 200 characters, no NUL). Refused whole, never trimmed."""
    value = bot.allowed_models
    problem = None
    if not isinstance(value, list):
        problem = "Must be a list of model names."
    elif len(value) > ALLOWED_MODELS_MAX:
        problem = f"At most {ALLOWED_MODELS_MAX} models."
    elif not all(isinstance(m, str) and m.strip() == m and 0 < len(m) <= 200 for m in value):
        problem = "Each model must be a non-empty name of at most 200 characters, no spaces."
    elif not all(text_is_storable(m) and "\n" not in m for m in value):
        problem = UNSTORABLE_MESSAGE
    elif len(set(value)) != len(value):
        problem = "A model is listed twice."
    if problem:
        errors["allowed_models"] = [problem]
        return False
    return True


def _check_models(*, user: AbstractBaseUser | None, bot: Bot, errors: dict) -> None:
    """Staff approve what they save; anyone else's models (chat, compaction and the models a
    chat may pick) must name a provider of ``USER_PROVIDERS``, and without an api_base its
    default must be listed. A model staff approved stays usable while the owner edits other
    fields."""
    models = [
        m for m in (bot.model, bot.compaction_model, *bot.allowed_models, bot.embedding_model) if m
    ]
    if _is_staff(user):
        bot.models_approved = "\n".join(dict.fromkeys(models))
        return
    approved = [
        m for m in models if bot.model_trusted(m) and (bot.api_base_trusted or not bot.api_base)
    ]
    checked = [("model", bot.model), ("compaction_model", bot.compaction_model)]
    checked += [("allowed_models", m) for m in bot.allowed_models]
    checked.append(("embedding_model", bot.embedding_model))
    for field, model in checked:
        if not model or model in approved:
            continue
        refusal = provider_policy.provider_refusal(model=model, api_base=bot.api_base)
        if refusal == provider_policy.PROVIDER_NOT_ALLOWED:
            providers = ", ".join(f"{p}/" for p in sorted(provider_policy.USER_PROVIDERS))
            errors.setdefault(field, []).append(_PROVIDER_NOT_ALLOWED.format(providers=providers))
        elif refusal is not None and "api_base" not in errors:
            errors.setdefault(field, []).append(_DEFAULT_NOT_LISTED)
    bot.models_approved = "\n".join(dict.fromkeys(approved))


def check_bot_budget(*, bot: Bot, changed: set[str] | None = None) -> None:
    """Refuse settings whose budget B = min(W - R, CAP) is 0: nothing could ever be sent.

    The error names the field to change: the one the caller changed (max_output_tokens first),
    else context_window when it is set, else max_output_tokens.
    """
    budget = bot_budget(bot)
    if budget.budget > 0:
        check_bot_system_prompt(bot=bot, budget=budget, changed=changed)
        check_bot_compaction(bot=bot, budget=budget, changed=changed)
        _check_allowed_budgets(bot=bot)
        return
    changed = changed or set()
    if "max_output_tokens" in changed or not ("context_window" in changed or bot.context_window):
        field = "max_output_tokens"
    else:
        field = "context_window"
    message = (
        f"max_output_tokens ({budget.reserve:,}) must be smaller than the context window "
        f"({budget.window:,} tokens), or no message could ever be sent."
    )
    raise ValidationFailed(details={field: [message]})


def _check_allowed_budgets(*, bot: Bot) -> None:
    """Every model a chat may pick leaves a budget B > 0 (its own window; see ``bot_budget``)."""
    for model in bot.chat_models[1:]:
        budget = bot_budget(bot, model=model)
        if budget.budget <= 0:
            raise ValidationFailed(
                details={
                    "allowed_models": [
                        f"{model}: max_output_tokens ({budget.reserve:,}) must be smaller than "
                        f"its context window ({budget.window:,} tokens)."
                    ]
                }
            )


def check_bot_system_prompt(*, bot: Bot, budget: Budget, changed: set[str] | None = None) -> None:
    """Refuse a system prompt that leaves no room for the conversation.

    The system prompt is sent with every call and no compaction can shorten it, so a non-empty
    one must stay under the hard threshold H = 75 % of B (docs/compaction.md): at H every message
    waits for a blocking compaction that cannot bring the pressure down, and a prompt near B leaves
    every message a ``context_too_large``. Tokens are counted as the turn counts them (the one
    counter, with the message overhead). The error names ``system_prompt``, unless the caller
    changed only what sets B (then that field: max_output_tokens, context_window, model).
    """
    prompt = bot.system_prompt
    if not prompt:
        return
    limit = budget.hard
    # A token is at least one byte: a prompt with fewer bytes than the limit needs no count.
    if len(prompt.encode("utf-8", "surrogatepass")) + MESSAGE_OVERHEAD_TOKENS < limit:
        return
    tokens = count_message_tokens(prompt, model=bot.model)
    if tokens < limit:
        return
    changed = changed or set()
    field = "system_prompt"
    if "system_prompt" not in changed:
        field = next(
            (f for f in ("max_output_tokens", "context_window", "model") if f in changed), field
        )
    message = (
        f"The system prompt is {tokens:,} tokens; this bot's budget is {budget.budget:,} tokens "
        f"and the system prompt must stay under {limit:,} (75 % of it), or no room is left for "
        "the conversation. Shorten the prompt or give the bot a larger context window."
    )
    raise ValidationFailed(details={field: [message]})


# What S, T and B are computed from (docs/bots.md): a change to none of them leaves them as they
# were.
_COMPACTION_INPUTS = frozenset(
    {
        "compaction_enabled",
        "compaction_threshold",
        "compaction_kept_percent",
        "context_window",
        "max_output_tokens",
        "model",
        "connection",
    }
)


def check_bot_compaction(*, bot: Bot, budget: Budget, changed: set[str] | None = None) -> None:
    """Refuse a background threshold (set by hand, not 0) that does not lie above where
    compaction lands by ``THRESHOLD_MARGIN_PERCENT`` of B (docs/bots.md): below that, the
    context is over the threshold again a turn or two after each compaction. The error names
    ``compaction_threshold``, or ``compaction_kept_percent`` when that is what was changed or
    when no threshold could satisfy it (above the hard threshold S acts as H).

    A saved bot is checked when a change could move S or T (``changed``): one that holds
    settings from before this rule is renamed, shared or given tools as it is."""
    if not bot.compaction_enabled or bot.compaction_threshold == 0:
        return
    if bot.pk is not None and changed is not None and not changed & _COMPACTION_INPUTS:
        return
    minimum = threshold_minimum(budget)
    if budget.soft >= minimum:
        return
    margin = budget.budget * THRESHOLD_MARGIN_PERCENT // 100
    changed = changed or set()
    kept_field = minimum > budget.hard or (
        "compaction_kept_percent" in changed and "compaction_threshold" not in changed
    )
    lands = (
        f"compaction lands at {budget.target:,} tokens ({bot.compaction_kept_percent} % of this "
        f"bot's budget of {budget.budget:,}), and the threshold must lie at least "
        f"{THRESHOLD_MARGIN_PERCENT} % of the budget ({margin:,} tokens) above that, or the "
        "context would be over it again a turn or two after every compaction."
    )
    if kept_field:
        message = (
            f"Kept after compaction is too high for a threshold of "
            f"{bot.compaction_threshold:,} tokens: {lands} Lower it, or raise the threshold "
            "(0 = automatic)."
        )
        if minimum > budget.hard:
            message = (
                f"Kept after compaction is too high: {lands} That is above where it compacts "
                f"before replying ({budget.hard:,}). Lower it."
            )
        raise ValidationFailed(details={"compaction_kept_percent": [message]})
    message = (
        f"The threshold must be at least {minimum:,} tokens: {lands} Raise it, lower kept "
        "after compaction, or set 0 (automatic)."
    )
    raise ValidationFailed(details={"compaction_threshold": [message]})


TOOLS_MAX = 100
RECALL_TOOL_NAMES = tuple(t["function"]["name"] for t in RECALL_TOOLS)


def _check_tools_shape(value: object) -> str | None:
    if not isinstance(value, list):
        return 'A list of "<server>/<tool>" or "<server>/*".'
    if len(value) > TOOLS_MAX:
        return f"At most {TOOLS_MAX} entries."
    bad = [str(e)[:60] for e in value if not isinstance(e, str) or entry_parts(e) is None]
    if bad:
        return f'Not "<server>/<tool>" or "<server>/*": {", ".join(bad)}.'
    if len(set(value)) != len(value):
        return "A tool is listed twice."
    return None


def check_bot_tools(
    *, user: AbstractBaseUser | None, bot: Bot, previous_tools: list | None = None
) -> None:
    """The bot's ``tools``: well formed; each entry added now names a server ``user`` may use
    (one error whether it does not exist or is not theirs: ``validation_error``) and, once the
    server's tools were read, a tool it listed; and the offered schemas take at most
    ``TOOL_SCHEMAS_MAX_PERCENT`` of B (they go with every call, like the memory tools)."""
    entries = bot.tools
    if entries == []:
        return
    problem = _check_tools_shape(entries)
    if problem:
        raise ValidationFailed(details={"tools": [problem]})
    added = [e for e in entries if e not in (previous_tools or [])]
    usable = tool_servers_usable_named(user=user, names=entry_servers(added))
    errors = []
    for entry in added:
        server_name, tool = entry.split("/", 1)
        server = usable.get(server_name)
        if server is None:
            errors.append(f"{entry}: no such tool server, or you may not use it.")
        elif tool != "*" and server.tools_refreshed_at and server.tool_named(tool) is None:
            errors.append(f"{entry}: the server {server_name} lists no tool {tool}.")
    if errors:
        raise ValidationFailed(details={"tools": errors})
    _check_tools_budget(bot=bot)


def _check_tools_budget(*, bot: Bot) -> None:
    servers = tool_servers_named(entry_servers(bot.tools))
    offered = tools_offered(bot.tools, servers, taken=RECALL_TOOL_NAMES)
    if not offered:
        return
    budget = bot_budget(bot)
    limit = budget.budget * settings.TOOL_SCHEMAS_MAX_PERCENT // 100
    tokens = count_tools_tokens([t.schema for t in offered], model=bot.model)
    if tokens > limit:
        raise ValidationFailed(
            details={
                "tools": [
                    f"These tools' schemas take {tokens:,} tokens; this bot's budget is "
                    f"{budget.budget:,} tokens and tool schemas may take at most {limit:,} "
                    f"({settings.TOOL_SCHEMAS_MAX_PERCENT} % of it). Choose fewer tools or give "
                    "the bot a larger context window."
                ]
            }
        )


def check_bot_slug(*, bot: Bot, user: AbstractBaseUser | None = None) -> None:
    """A slug is unique among its owner's bots (the model's ``bot_owner_slug_unique``, which
    ``full_clean`` skips while the owner is excluded): a taken one is a field error, not a
    database error. Its shape is the model's ``slug_validator``; blank is filled from the name."""
    if not bot.slug:
        return
    taken = Bot.objects.filter(owner_id=bot.owner_id, slug=bot.slug, retired_at__isnull=True)
    taken = taken.exclude(pk=bot.pk)
    if taken.exists():
        # Staff editing another user's bot: the clash is with the owner's bots, not theirs.
        others = user is not None and user.pk != bot.owner_id
        raise slug_taken(bot.slug, owner=bot.owner.get_username() if others else None)


def slug_taken(slug: str, *, owner: str | None = None) -> ValidationFailed:
    whose = "Another of your bots" if owner is None else f"Another bot of {owner}"
    return ValidationFailed(details={"slug": [f"{whose} already has the slug {slug!r}."]})


def check_bot_settings(
    *,
    user: AbstractBaseUser | None,
    bot: Bot,
    previous_api_base: str | None,
    changed: set[str] | None = None,
    previous_tools: list | None = None,
) -> None:
    check_bot_slug(bot=bot, user=user)
    check_bot_builtin_models(bot=bot)
    check_bot_embedding_model(bot=bot)
    if bot.connection_id is not None:
        check_bot_connection(user=user, bot=bot, changed=changed)
    else:
        check_bot_provider(user=user, bot=bot, previous_api_base=previous_api_base)
    check_bot_budget(bot=bot, changed=changed)
    check_bot_tools(user=user, bot=bot, previous_tools=previous_tools)
