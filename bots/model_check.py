"""Check a bot's model: one tiny call through the gateway, reported in plain words.

The call is keyed off the *saved* bot (its model, api_base and api_key_env), never off anything
in the request, so the provider policy the gateway applies to every call (allow-listed key
variables, approved or listed api_base) holds here too: the check cannot be pointed at an
arbitrary address. Only the bot's owner or staff may run it (``bot_get_for_edit``).
"""

import dataclasses
import time
from dataclasses import asdict, dataclass

import structlog
from django.contrib.auth.base_user import AbstractBaseUser

from bots.model_config import bot_model_config
from bots.queries import bot_get_for_edit
from chat_platform.dbconn import connection_release
from chat_platform.heavy import heavy_request
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens
from connections import usage

log = structlog.get_logger(__name__)

CHECK_MAX_OUTPUT_TOKENS = 5
CHECK_PROMPT = "Reply with the single word: ok"
# A check answers within seconds or says so; it never holds a request for a turn's full timeout.
CHECK_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class ModelCheck:
    ok: bool
    model: str
    latency_ms: int
    reply: str = ""
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def bot_model_check(*, user: AbstractBaseUser, bot_id: object) -> ModelCheck:
    """One call of at most ``CHECK_MAX_OUTPUT_TOKENS`` tokens with one short user message.

    Raises ``NotFound`` / ``PermissionDenied`` like every edit path; a provider failure is not an
    exception here but a result (``ok=False`` with the gateway's short, key-free reason).
    """
    bot = bot_get_for_edit(user=user, bot_id=bot_id)
    config = dataclasses.replace(
        bot_model_config(bot),
        max_output_tokens=CHECK_MAX_OUTPUT_TOKENS,
        timeout=CHECK_TIMEOUT_SECONDS,
    )
    messages = [{"role": "user", "content": CHECK_PROMPT}]
    started = time.monotonic()
    # A provider call like any other: one of the user's heavy-request slots while it waits
    # (``RateLimited`` when all are taken), charged to the user's daily limit
    # (``QuotaExceeded``, no call, when it has no room), and no database connection held
    # while the provider thinks (docs/security.md).
    try:
        with (
            heavy_request(user_id=user.pk, kind="model_check"),
            usage.quota_charge(
                user_id=user.pk,
                sends=count_message_tokens(CHECK_PROMPT, model=bot.model),
                output=CHECK_MAX_OUTPUT_TOKENS,
                purpose="check",
            ) as meter,
        ):
            connection_release()
            completion = gateway.complete(config, messages, max_tokens=CHECK_MAX_OUTPUT_TOKENS)
            meter.add(completion.prompt_tokens + completion.completion_tokens)
    except gateway.ModelCallFailed as exc:
        result = ModelCheck(
            ok=False,
            model=bot.model,
            latency_ms=int((time.monotonic() - started) * 1000),
            error=exc.message,
        )
    else:
        result = ModelCheck(
            ok=True,
            model=completion.model or bot.model,
            latency_ms=int((time.monotonic() - started) * 1000),
            reply=completion.text.strip()[:200],
        )
    log.info(
        "bot_model_checked",
        bot_id=bot.pk,
        user_id=user.pk,
        model=bot.model,
        ok=result.ok,
        latency_ms=result.latency_ms,
    )
    return result
