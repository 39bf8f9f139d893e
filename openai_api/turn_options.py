"""The OpenAI-compatible API's part in a turn (``turns.hooks``): the options of a reply asked
for through ``/v1/`` or through an API key on ``/api/v1/`` — the call's parameters, the key's daily
limit and the bots the key is limited to (docs/openai-api.md "Keys")."""

from bots.models import Message
from connections import usage
from openai_api.identity import is_api_turn
from openai_api.models import ApiKey, ApiTurn
from turns.hooks import TurnOptions


def turn_options(reply: Message) -> TurnOptions | None:
    if reply.charged_to:
        return key_charge_options(reply.charged_to)
    if not is_api_turn(reply.reply_to):
        return None
    row = (
        ApiTurn.objects.filter(reply_id=reply.pk)
        .values_list("options", "key_id", "key__daily_token_limit", "key__all_bots")
        .first()
    )
    if row is None:
        return None
    options, key_id, key_limit, all_bots = row
    stop = options.get("stop") or ()
    exchange = options.get("exchange") or []
    # The client tool exchange a continuation sends whole (ids and counts are what it takes).
    messages = (
        tuple(Message.objects.filter(pk__in=exchange).only("pk", "token_count").order_by("seq"))
        if exchange
        else ()
    )
    return TurnOptions(
        temperature=options.get("temperature"),
        max_tokens=options.get("max_tokens"),
        stop=tuple(stop),
        system=options.get("system") or "",
        # The key's daily limit counts this turn too (the user's own is the turn's to add).
        quota=tuple(usage.key_limit(key_id=key_id, limit=key_limit)) if key_id else (),
        tools=tuple(options.get("tools") or ()),
        exchange=messages,
        bots=None if key_id is None or all_bots else _keys_bots([key_id]),
    )


def key_charge_options(charged_to: str) -> TurnOptions:
    """A reply asked for through an API key on ``/api/v1/`` (``connections.usage
    .charge_subject``): the key's daily limit as it stands now counts this turn too, as on
    ``/v1/`` (docs/openai-api.md "Keys"), and a key limited to some bots keeps the reply's
    hand-overs to them. One statement for such replies, two for a bot-limited key's; a key that
    was deleted meanwhile (or whose limit was lifted) charges nothing more.

    Why a column on the reply and not the ``client_id`` marker ``/v1/`` uses: a REST client
    chooses its own ``client_id`` (idempotency), so a marker there could be spoofed or collide;
    ``Message.charged_to`` is written by the send alone, and the claim loads it with the reply
    at no extra statement, so a turn without a key costs exactly what it did."""
    key_ids = [
        subject.removeprefix("key:") for subject in charged_to.split() if subject.startswith("key:")
    ]
    rows = (
        ApiKey.objects.filter(pk__in=key_ids)
        .order_by("pk")
        .values_list("pk", "daily_token_limit", "all_bots")
        if key_ids
        else []
    )
    limits = [limit for pk, cap, _ in rows for limit in usage.key_limit(key_id=pk, limit=cap)]
    # A key limited to some bots keeps the reply's hand-overs to them; one deleted meanwhile
    # hands the floor to none (what it was allowed is no longer known).
    found = {pk for pk, _, _ in rows}
    scoped = [pk for pk, _, every in rows if not every]
    bots = None
    if scoped or len(found) < len(set(key_ids)):
        bots = _keys_bots(scoped)
    return TurnOptions(quota=tuple(limits), bots=bots)


def _keys_bots(key_ids: list[str]) -> frozenset[int]:
    """The bots every one of the keys ``key_ids`` may use (one statement; none: no bot)."""
    if not key_ids:
        return frozenset()
    pairs = ApiKey.bots.through.objects.filter(apikey_id__in=key_ids).values_list(
        "apikey_id", "bot_id"
    )
    allowed: dict[str, set[int]] = {key_id: set() for key_id in key_ids}
    for key_id, bot_id in pairs:
        allowed[key_id].add(bot_id)
    return frozenset(set.intersection(*allowed.values()))
