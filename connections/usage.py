"""Daily token limits: one counter design for users, their groups and API keys.

A limit is a ``Limit(subject, limit)``: ``user:<id>`` (the user's own ``UserQuota``, else the
most generous of their groups' ``GroupQuota``), ``key:<id>`` (an API key's
``daily_token_limit``). Each subject has one ``TokenCounter`` row per UTC day in the database,
so a restart loses nothing.

* ``quota_check`` — before a message is stored (REST, websocket, ``/v1/chat/completions``):
  a spent limit is a ``QuotaExceeded`` (429 ``quota_exceeded``, ``details.resets_at``) and
  nothing is written.
* ``quota_reserve`` — when a turn starts: one conditional ``UPDATE`` per subject adds what the
  turn may spend (the context it sends plus its output reserve) to ``reserved``, only while
  the context fits beside what is used and what running turns reserved
  (``used + reserved + context <= limit``; only the output reserve, ``may_exceed``, may cross
  it). Concurrent turns therefore cannot all pass on the same remaining budget, and the day
  ends over its limit by at most one turn's output (as long as a turn spends what it reserved;
  recall rounds re-send the context and may spend more).
* ``quota_settle`` — when the turn ends (any way): its reservation is released and the tokens
  the provider reported (prompt + completion, the numbers stored on the reply) are added.

A reservation of a worker that died is released by nothing but the day's end (the counter of
the next day starts at 0).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from chat_platform.errors import QuotaExceeded
from connections.models import GroupQuota, TokenCounter, UserQuota


@dataclass(frozen=True)
class Limit:
    subject: str
    limit: int


@dataclass(frozen=True)
class Reservation:
    day: dt.date
    subjects: tuple[str, ...]
    tokens: int


def today() -> dt.date:
    return timezone.now().astimezone(dt.UTC).date()


def resets_at(day: dt.date | None = None) -> dt.datetime:
    day = day or today()
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(0), tzinfo=dt.UTC)


def user_limit(user_id: int) -> int | None:
    """The user's own daily limit, else the most generous of their groups' (one statement)."""
    User = get_user_model()
    row = (
        User.objects.filter(pk=user_id)
        .annotate(
            own=Subquery(
                UserQuota.objects.filter(user_id=OuterRef("pk")).values("daily_token_limit")[:1]
            ),
            best_group=Subquery(
                GroupQuota.objects.filter(group__user=OuterRef("pk"))
                .order_by("-daily_token_limit")
                .values("daily_token_limit")[:1]
            ),
        )
        .values_list("own", "best_group")
        .first()
    )
    if row is None:
        return None
    own, best_group = row
    found = own if own is not None else best_group
    return int(found) if found is not None else None


def user_limits(user_id: int) -> list[Limit]:
    limit = user_limit(user_id)
    return [] if limit is None else [Limit(f"user:{user_id}", limit)]


def key_limit(*, key_id: object, limit: int | None) -> list[Limit]:
    return [] if limit is None else [Limit(f"key:{key_id}", int(limit))]


def _refusal(limit: Limit, used: int, *, needs: int | None = None) -> QuotaExceeded:
    whose = "this API key's" if limit.subject.startswith("key:") else "your"
    reset = resets_at()
    if needs is not None and used < limit.limit:
        # Not spent, but what this turn must send does not fit in what is left (or running
        # turns hold it).
        state = (
            f"has {limit.limit - used:,} left ({used:,} used, some of it held by running turns "
            f"or too little for this turn's context of {needs:,})"
        )
    else:
        state = f"is spent ({used:,} used)"
    return QuotaExceeded(
        f"{whose[0].upper()}{whose[1:]} daily limit of {limit.limit:,} tokens {state}; "
        f"it resets at {reset.isoformat()}.",
        details={
            "resets_at": reset.isoformat(),
            "limit": limit.limit,
            "used": used,
            "scope": "key" if limit.subject.startswith("key:") else "user",
        },
    )


def tokens_today(subject: str) -> tuple[int, int]:
    row = (
        TokenCounter.objects.filter(subject=subject, day=today())
        .values_list("used", "reserved")
        .first()
    )
    return (int(row[0]), int(row[1])) if row else (0, 0)


def quota_check(limits: Sequence[Limit]) -> None:
    """Raise ``QuotaExceeded`` for the first spent limit (what running turns reserved counts)."""
    for limit in limits:
        used, reserved = tokens_today(limit.subject)
        if used + reserved >= limit.limit:
            raise _refusal(limit, used)


def _ensure_rows(subjects: Sequence[str], day: dt.date) -> None:
    existing = set(
        TokenCounter.objects.filter(subject__in=subjects, day=day).values_list("subject", flat=True)
    )
    for subject in subjects:
        if subject in existing:
            continue
        try:
            with transaction.atomic():
                TokenCounter.objects.create(subject=subject, day=day)
        except IntegrityError:  # another turn made it first
            pass


def quota_reserve(
    limits: Sequence[Limit], *, tokens: int, may_exceed: int | None = None
) -> Reservation | None:
    """Reserve ``tokens`` on every limited subject, or none of them (``QuotaExceeded``).

    ``may_exceed`` (the turn's output reserve, part of ``tokens``): what may cross the limit.
    Then the rest (the context the turn sends) must fit beside what is used and what running
    turns reserved, alone or not, so the day ends over its limit by at most one turn's output.
    Without it, a turn running alone may cross the limit by all it spends."""
    if not limits:
        return None
    day = today()
    tokens = max(0, int(tokens))
    subjects = [limit.subject for limit in limits]
    _ensure_rows(subjects, day)
    with transaction.atomic():
        for limit in limits:
            under = TokenCounter.objects.filter(
                subject=limit.subject, day=day, used__lt=limit.limit
            )
            if may_exceed is not None:
                must_fit = max(0, tokens - max(0, int(may_exceed)))
                fits = Q(used__lte=Value(limit.limit - must_fit) - F("reserved"))
            else:
                # Either the only turn running (it may end over the limit by what it spends)
                # or fitting beside the others' reservations.
                fits = Q(reserved=0) | Q(used__lte=Value(limit.limit - tokens) - F("reserved"))
            claimed = under.filter(fits).update(reserved=F("reserved") + tokens)
            if claimed != 1:
                needs = tokens - max(0, int(may_exceed)) if may_exceed is not None else tokens
                raise _refusal(limit, tokens_today(limit.subject)[0], needs=max(0, needs))
    return Reservation(day=day, subjects=tuple(subjects), tokens=tokens)


def quota_settle(reservation: Reservation | None, *, used: int) -> None:
    """Release the reservation and count what the turn spent (on the day it started)."""
    if reservation is None:
        return
    TokenCounter.objects.filter(subject__in=reservation.subjects, day=reservation.day).update(
        reserved=Greatest(F("reserved") - reservation.tokens, Value(0)),
        used=F("used") + max(0, int(used)),
    )
