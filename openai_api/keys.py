"""API keys: create (shown once), list, revoke, authenticate, and what a key may use.

Hashing and verification are djangorestframework-api-key's (``ApiKey.objects``): only the
hash and an 8-character prefix are stored; the prefix is the key's public id. A key's text
never reaches a log line, an error message or an answer other than the one that created it.
"""

import datetime as dt
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from attachments.models import Attachment
from bots.models import Bot, ChatSession, Message
from bots.queries import bot_list_for_user
from chat_platform.account_gate import account_refusal
from chat_platform.errors import NotFound, PermissionDenied, ValidationFailed
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from compaction.models import Summary
from connections import usage
from openai_api.models import ApiKey

log = structlog.get_logger(__name__)

# last_used_at is written at most this often per key: a busy key must not write on every call.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
NAME_MAX_CHARS = 50


class KeyRefused(Exception):
    """No such key, revoked, expired, or its user may not act now (inactive, waiting for
    approval, email unverified under mandatory verification: ``account_gate``): one answer for
    all of them."""


def key_authenticate(*, raw: str) -> ApiKey:
    if not raw or len(raw) > 200 or not text_is_storable(raw) or "." not in raw:
        raise KeyRefused()
    try:
        key = ApiKey.objects.get_from_key(raw)
    except ApiKey.DoesNotExist:
        raise KeyRefused() from None
    if key.has_expired or account_refusal(key.user) is not None:
        raise KeyRefused()
    now = timezone.now()
    if key.last_used_at is None or key.last_used_at < now - LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        key.last_used_at = now
    return key


# --- what a key may use -----------------------------------------------------------------------


def key_bots(*, key: ApiKey) -> list[Bot]:
    """The bots the key may use now: the user's usable bots (own or shared; un-sharing revokes
    at once), narrowed to the key's list unless it covers all."""
    bots = bot_list_for_user(user=key.user).select_related("owner").order_by("created_at", "id")
    if not key.all_bots:
        bots = bots.filter(pk__in=key.bots.values("pk"))
    return list(bots)


def _qualified(bot: Bot) -> str:
    """``<owner>/<slug>``: a shared bot's id when its slug is taken among the key's bots (a
    slug is unique per owner only, docs/rooms.md; ``/`` never occurs in a slug)."""
    return f"{bot.owner.get_username()}/{bot.slug}"


def key_models(*, key: ApiKey) -> dict[str, Bot]:
    """Model id -> bot. The id is the bot's own slug (``Bot.slug``, the one a room mentions).
    The key user's own bots keep it always; of other owners' shared bots with one slug, the one
    shared with the user first keeps it (unless one of the user's bots has it), and the others
    are listed as ``<owner>/<slug>``, which names any of them. So a client's model id does not
    stop working because someone else later shared a bot with the same slug."""
    bots = key_bots(key=key)  # oldest first
    own = {bot.slug for bot in bots if bot.owner_id == key.user_id}
    plain_taken = set(own)
    models: dict[str, Bot] = {}
    for bot in bots:
        if bot.owner_id == key.user_id:
            models[bot.slug] = bot
        elif bot.slug not in plain_taken:
            plain_taken.add(bot.slug)
            models[bot.slug] = bot
        else:
            models[_qualified(bot)] = bot
    return models


def key_bot_for_model(*, key: ApiKey, model: str) -> Bot:
    models = key_models(key=key)
    bot = models.get(model)
    if bot is None and "/" in model:
        # ``<owner>/<slug>`` always names a shared bot, even when its slug alone would do.
        bot = next(
            (b for b in models.values() if b.owner_id != key.user_id and _qualified(b) == model),
            None,
        )
    if bot is None:
        raise NotFound(f"The model {model!r} does not exist or this key may not use it.")
    return bot


READ_ONLY_MESSAGE = "This API key is read-only."


def key_check_write(*, key: ApiKey) -> None:
    """A ``read`` key may not post, create or change anything (``permission_denied``)."""
    if key.access == ApiKey.Access.READ:
        raise PermissionDenied(READ_ONLY_MESSAGE)


def key_bot_scope(*, key: ApiKey) -> frozenset[int] | None:
    """The ids of the bots a key is limited to, or None for a key that covers all of them."""
    if key.all_bots:
        return None
    return frozenset(key.bots.values_list("pk", flat=True))


# Path parameters that name an object under /api/v1/, and where its bot is read from.
_SCOPED_KWARGS: dict[str, tuple[Any, str]] = {
    "session_id": (ChatSession, "bot_id"),
    "message_id": (Message, "session__bot_id"),
    "summary_id": (Summary, "session__bot_id"),
    "attachment_id": (Attachment, "session__bot_id"),
}


def key_scope_holds(*, user: AbstractBaseUser, scope: frozenset[int], kwargs: dict) -> bool:
    """Whether every object a request's path names (a session, message, summary, attachment or
    bot) belongs to a bot in ``scope``. A missing object, or another user's, is left to the
    view's own ``not_found``; a path that names none holds trivially."""
    for name, value in kwargs.items():
        if name == "bot_id":
            if int(value) not in scope:
                return False
            continue
        if name not in _SCOPED_KWARGS:
            continue
        model, field = _SCOPED_KWARGS[name]
        owner = "user" if model is ChatSession else "session__user"
        bot_ids = list(
            model.objects.filter(pk=int(value), **{owner: user}).values_list(field, flat=True)[:1]
        )
        if bot_ids and bot_ids[0] not in scope:
            return False
    return True


# --- the daily token budget -------------------------------------------------------------------


def key_limits(*, key: ApiKey) -> list[usage.Limit]:
    """The daily limits a call with ``key`` counts against: the key's own and its user's
    (one counter design for both, ``connections.usage``)."""
    return [
        *usage.key_limit(key_id=key.pk, limit=key.daily_token_limit),
        *usage.user_limits(key.user_id),
    ]


def request_key_limits(auth: object) -> tuple[usage.Limit, ...]:
    """The daily limit of the API key a ``/api/v1/`` request came through (``request.auth``),
    or none (a session, a DRF token): an action through a key counts against its limit on every
    endpoint it reaches, as on ``/v1/`` (docs/openai-api.md)."""
    if isinstance(auth, ApiKey):
        return tuple(usage.key_limit(key_id=auth.pk, limit=auth.daily_token_limit))
    return ()


def key_budget_check(*, key: ApiKey) -> None:
    """``QuotaExceeded`` when the key's or its user's daily limit is spent."""
    usage.quota_check(key_limits(key=key))


# --- management (the user's own keys) ----------------------------------------------------------


def check_key_fields(
    *,
    user: AbstractBaseUser,
    name: object,
    bots: object,
    expires_at: dt.datetime | None,
    daily_token_limit: object,
    access: object,
) -> tuple[str, list[Bot] | None]:
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name.strip():
        errors["name"] = ["A key needs a name."]
    elif not text_is_storable(name):
        errors["name"] = [UNSTORABLE_MESSAGE]
    elif len(name.strip()) > NAME_MAX_CHARS:
        errors["name"] = [f"At most {NAME_MAX_CHARS} characters."]
    chosen: list[Bot] | None = None
    if bots is not None:
        if not isinstance(bots, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) for b in bots
        ):
            errors["bots"] = ["A list of bot ids."]
        else:
            usable = {b.pk: b for b in bot_list_for_user(user=user).filter(pk__in=bots)}
            unknown = sorted({b for b in bots if b not in usable})
            if unknown:
                # The same answer for a missing bot and another user's private one.
                errors["bots"] = [f"Unknown bot id {b}." for b in unknown]
            elif not bots:
                errors["bots"] = ["Name at least one bot, or leave the field out for all."]
            else:
                chosen = [usable[b] for b in dict.fromkeys(bots)]
    if expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = ["The expiry must be in the future."]
    if daily_token_limit is not None and (
        not isinstance(daily_token_limit, int)
        or isinstance(daily_token_limit, bool)
        or not 1 <= daily_token_limit <= 2_000_000_000
    ):
        errors["daily_token_limit"] = ["A whole number of tokens from 1 to 2,000,000,000."]
    if access not in ApiKey.Access.values:
        errors["access"] = ['"full" or "read".']
    if errors:
        raise ValidationFailed(details=errors)
    assert isinstance(name, str)
    return name.strip(), chosen


def key_create(
    *,
    user: AbstractBaseUser,
    name: object,
    bots: object = None,
    expires_at: dt.datetime | None = None,
    daily_token_limit: object = None,
    access: object = ApiKey.Access.FULL,
) -> tuple[ApiKey, str]:
    """A new key; its text is returned here once and never stored."""
    clean_name, chosen = check_key_fields(
        user=user,
        name=name,
        bots=bots,
        expires_at=expires_at,
        daily_token_limit=daily_token_limit,
        access=access,
    )
    with transaction.atomic():
        key, raw = ApiKey.objects.create_key(
            user=user,
            name=clean_name,
            all_bots=chosen is None,
            expiry_date=expires_at,
            daily_token_limit=daily_token_limit,
            access=access,
        )
        if chosen:
            key.bots.set(chosen)
    log.info("api_key_created", user_id=user.pk, prefix=key.prefix, all_bots=chosen is None)
    return key, raw


def key_list_for_user(*, user: AbstractBaseUser) -> list[ApiKey]:
    return list(
        ApiKey.objects.filter(user=user, revoked=False)
        .prefetch_related("bots")
        .order_by("-created", "prefix")
    )


def key_revoke(*, user: AbstractBaseUser, prefix: object) -> None:
    """Revoke (for good: the library refuses to un-revoke). Another user's key is not_found."""
    if not isinstance(prefix, str) or not prefix:
        raise NotFound("API key not found.")
    updated = ApiKey.objects.filter(user=user, prefix=prefix, revoked=False).update(revoked=True)
    if not updated:
        raise NotFound("API key not found.")
    log.info("api_key_revoked", user_id=user.pk, prefix=prefix)
