"""Daily token limits: one counter design for users, their groups and API keys.

A limit is a ``Limit(subject, limit)``: ``user:<id>`` (the user's own ``UserQuota``, else the
most generous of their groups' ``GroupQuota``), ``key:<id>`` (an API key's
``daily_token_limit``). Each subject has one ``TokenCounter`` row per UTC day in the database,
so a restart loses nothing (docs/connections.md "Daily token limits").

* ``quota_check`` — before a message is stored or an action that calls a model starts (REST,
  websocket, ``/v1/chat/completions``, ``/compact``, re-summarise): a spent limit is a
  ``QuotaExceeded`` (429 ``quota_exceeded``, ``details.resets_at``) and nothing is written.
* ``quota_reserve`` — before a model call (a turn, a summary, an embedding): one conditional
  ``UPDATE`` per subject holds what the call *sends* in ``reserved``, only while it fits beside
  what is used and what the calls running now send (``used + reserved + sends <= limit``).
  The output reserve is never held: it cannot make a limit with room refuse, so concurrent
  turns never fail with nothing used because of what they might still write; the day may end
  over its limit by the outputs of the calls that ran at once.
* ``quota_settle`` — when the call ends (any way): its hold is released and the tokens the
  provider reported (prompt + completion) are added.
* ``quota_charge`` — the three above around one provider call of any kind, for the session's
  user plus whatever ``quota_scope`` adds (the API key the action came through); a call made
  inside a running turn fits in the turn's own hold (``quota_scope(within=...)``).

A hold of a worker that died is released by nothing but the day's end (the counter of the next
day starts at 0).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from chat_platform.compiled import CompiledValues
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


def _user_limit_query(user_id: int) -> Any:
    User = get_user_model()
    return (
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
    )


# Read on every send and every turn: compiled once per process (chat_platform/compiled.py).
_USER_LIMIT = CompiledValues(_user_limit_query, name="user_limit")


def user_limit(user_id: int) -> int | None:
    """The user's own daily limit, else the most generous of their groups' (one statement)."""
    rows = _USER_LIMIT.rows(user_id=user_id)
    if not rows:
        return None
    own, best_group = rows[0]
    found = own if own is not None else best_group
    return int(found) if found is not None else None


def user_limits(user_id: int) -> list[Limit]:
    limit = user_limit(user_id)
    return [] if limit is None else [Limit(f"user:{user_id}", limit)]


def key_limit(*, key_id: object, limit: int | None) -> list[Limit]:
    return [] if limit is None else [Limit(f"key:{key_id}", int(limit))]


def charge_subject(limits: Sequence[Limit], *, scope: str = "") -> str:
    """What a reply asked for through an API key is charged to beside its user's own limit:
    the subject of the key's limit, kept on the pending reply (``Message.charged_to``) for the
    turn, which runs later in a worker that does not know the request. The turn's options hook
    (``openai_api``) reads the key's limit again from it (docs/openai-api.md "Keys"). Blank
    without a key: the turn costs what it always did.

    ``scope``: the subject of a key limited to some bots (``bots.queries.user_scope_subject``),
    kept there even when the key has no daily limit: the hook reads the key's bots from it too,
    and a room's hand-overs keep to them."""
    subjects = [limit.subject for limit in limits]
    if scope and scope not in subjects:
        subjects.append(scope)
    return " ".join(subjects)


def _refusal(
    limit: Limit, used: int, *, needs: int | None = None, what: str = "this turn's context"
) -> QuotaExceeded:
    whose = "this API key's" if limit.subject.startswith("key:") else "your"
    reset = resets_at()
    if needs is not None and used < limit.limit:
        # Not spent, but what this turn must send does not fit in what is left (or running
        # turns hold it).
        state = (
            f"has {limit.limit - used:,} left ({used:,} used, some of it held by running turns "
            f"or too little for {what} of {needs:,})"
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


# ``_refusal``'s own words, read back: a stored failed reply keeps the message, not the details.
_REFUSAL_WORDS = re.compile(
    r"^(?P<whose>Your|This API key's) daily limit of (?P<limit>[\d,]+) tokens "
    r"(?:is spent|has [\d,]+ left) \((?P<used>[\d,]+) used.*; it resets at (?P<reset>\S+)\.$",
    re.S,
)


def refusal_details(message: str, *, at: dt.datetime) -> dict[str, Any]:
    """The ``details`` of a refusal whose message a failed reply stored (``_refusal`` wrote it):
    ``{resets_at, limit, used, scope}``, so the chat can say what ran out and when it resets.
    Text in another shape still gets ``resets_at``: the next 00:00 UTC after ``at``, when it
    failed (docs/connections.md "Daily token limits")."""
    found = _REFUSAL_WORDS.match(message)
    if found is None:
        return {"resets_at": resets_at(at.astimezone(dt.UTC).date()).isoformat()}
    return {
        "resets_at": found["reset"],
        "limit": int(found["limit"].replace(",", "")),
        "used": int(found["used"].replace(",", "")),
        "scope": "key" if found["whose"] != "Your" else "user",
    }


def limit_words(details: dict[str, Any], *, what: str) -> str:
    """A refusal's ``details`` in a sentence for a stored notice (the chat's ``/compact``), as the
    chat page words a failed reply (``static/chat/lib/quota.js``): whose daily limit, how much
    of it is used, when it resets (in UTC: a notice is stored text, read in any time zone)."""
    whose = "this API key's" if details.get("scope") == "key" else "your"
    limit, used = details.get("limit"), details.get("used")
    if isinstance(limit, int) and isinstance(used, int):
        state = (
            f"is used up ({used:,} of {limit:,} tokens today)"
            if used >= limit
            else f"has too little left for {what} ({used:,} of {limit:,} tokens used today)"
        )
    else:
        state = "is used up"
    try:
        reset = dt.datetime.fromisoformat(str(details.get("resets_at"))).astimezone(dt.UTC)
    except ValueError:
        reset = resets_at()
    when = f"{reset:%H:%M} UTC on {reset:%a} {reset.day} {reset:%b}"
    return f"{whose} daily token limit {state}; it resets at {when}"


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
    limits: Sequence[Limit],
    *,
    tokens: int,
    may_exceed: int | None = None,
    within: Reservation | None = None,
    what: str = "this turn's context",
) -> Reservation | None:
    """Hold what a call sends on every limited subject, or on none of them (``QuotaExceeded``).

    ``tokens``: what the call may spend; ``may_exceed``: the part of it that is output (the
    output reserve), which is never held and never refuses. The rest, what the call sends, must
    fit beside what is used and what running calls send: ``used + reserved + sends <= limit``.
    ``within``: the hold of the call this one runs inside (a turn's, for the hard compaction
    it needs): what that hold already counts is not counted twice."""
    if not limits:
        return None
    day = today()
    sends = max(0, int(tokens) - max(0, int(may_exceed or 0)))
    mine = within.tokens if within is not None else 0
    subjects = [limit.subject for limit in limits]
    _ensure_rows(subjects, day)
    with transaction.atomic():
        for limit in sorted(limits, key=_locked_first):
            own = mine if within is not None and limit.subject in within.subjects else 0
            claimed = TokenCounter.objects.filter(
                Q(used__lte=Value(limit.limit - sends + own) - F("reserved")),
                subject=limit.subject,
                day=day,
                used__lt=limit.limit,
            ).update(reserved=F("reserved") + sends)
            if claimed != 1:
                raise _refusal(limit, tokens_today(limit.subject)[0], needs=sends, what=what)
    return Reservation(day=day, subjects=tuple(subjects), tokens=sends)


def _locked_first(limit: Limit) -> str:
    return limit.subject


def counters_update(subjects: Sequence[str], day: dt.date, **values: Any) -> None:
    """One update of several subjects' counters (a user's and a key's), row by row in the
    order every writer locks them (by subject, as ``quota_reserve`` does): one UPDATE of them
    all locked them in whatever order its plan read the rows, and two turns of one key and user,
    one reserving while the other settled, deadlocked (tests/connections/
    test_quota_lock_order.py). One statement per subject, in one transaction."""
    with transaction.atomic():
        for subject in sorted(subjects):
            TokenCounter.objects.filter(subject=subject, day=day).update(**values)


def quota_settle(reservation: Reservation | None, *, used: int) -> None:
    """Release the reservation and count what the turn spent (on the day it started)."""
    if reservation is None:
        return
    counters_update(
        reservation.subjects,
        reservation.day,
        reserved=Greatest(F("reserved") - reservation.tokens, Value(0)),
        used=F("used") + max(0, int(used)),
    )


# --- charging any provider call ---------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Who else pays for the calls made in this context, beside the session's user."""

    # Limits beyond the user's own (the API key the action came through).
    extra: tuple[Limit, ...] = ()
    # The hold of the call these calls run inside (a turn's): they fit in it.
    within: Reservation | None = None


_scope: ContextVar[Scope | None] = ContextVar("quota_scope", default=None)
_NO_SCOPE = Scope()


def _current() -> Scope:
    return _scope.get() or _NO_SCOPE


@contextmanager
def quota_scope(
    *, extra: Sequence[Limit] = (), within: Reservation | None = None
) -> Iterator[None]:
    """Provider calls made inside count against ``extra`` too (an API key's limit) and fit in
    ``within``. A context variable: one request's or one task's scope, never another's."""
    token = _scope.set(Scope(extra=tuple(extra), within=within))
    try:
        yield
    finally:
        _scope.reset(token)


def scope_limits() -> tuple[Limit, ...]:
    return _current().extra


def scope_pairs() -> list[list[Any]]:
    """The scope's extra limits as a task's JSON argument: a call the scope's action causes
    later, on a worker or another thread, is charged to them too (``limits_from_pairs``)."""
    return limits_pairs(scope_limits())


def limits_pairs(limits: Sequence[Limit]) -> list[list[Any]]:
    return [[limit.subject, limit.limit] for limit in limits]


def limits_from_pairs(pairs: Sequence[Sequence[Any]] | None) -> list[Limit]:
    """``scope_pairs``'s list read back in the task."""
    return [Limit(subject=str(subject), limit=int(limit)) for subject, limit in pairs or ()]


def payer_limits(*, user_id: int) -> list[Limit]:
    """The limits a call made for ``user_id`` now counts against (the scope's key's too)."""
    return [*user_limits(user_id), *scope_limits()]


def payer_check(*, user_id: int, extra: Sequence[Limit] = ()) -> None:
    """``quota_check`` for an action of ``user_id`` (through a key: ``extra``), before it starts."""
    quota_check([*user_limits(user_id), *extra, *scope_limits()])


@dataclass
class Meter:
    """A held call's account: what the provider reported (prompt + completion tokens), settled
    once (``settle``: the hold released, the tokens counted), as soon as the caller knows the
    last of them — before its answer is shown, so the next request sees them counted."""

    reservation: Reservation | None = None
    used: int = 0
    settled: bool = field(default=False, repr=False)
    counted: int = field(default=0, repr=False)  # of ``used``, what ``count_so_far`` counted

    def add(self, tokens: int) -> None:
        self.used += max(0, int(tokens))

    def count_so_far(self) -> None:
        """Count what the calls so far spent, keeping the hold: a turn's tool loop, before its
        next call, so a limit checked then sees them (one statement; none without a hold)."""
        if self.reservation is None or self.settled or self.used <= self.counted:
            return
        counters_update(
            self.reservation.subjects,
            self.reservation.day,
            used=F("used") + (self.used - self.counted),
        )
        self.counted = self.used

    def settle(self) -> None:
        """Once; a settle that failed (the database did not answer) may be tried again."""
        if not self.settled:
            quota_settle(self.reservation, used=self.used - self.counted)
            self.settled = True


@contextmanager
def quota_charge(
    *, user_id: int, sends: int, output: int = 0, purpose: str = "call"
) -> Iterator[Meter]:
    """One provider call of any kind (summary, fusion, embedding, tool…) charged to ``user_id``
    and the scope's limits: held before the call (``QuotaExceeded`` and no call when it does
    not fit), settled with what the ``Meter`` was told when the block ends, however it ends.
    A user and key without limits are not counted (no statement beyond reading the limit)."""
    limits = payer_limits(user_id=user_id)
    reservation = quota_reserve(
        limits,
        tokens=sends + output,
        may_exceed=output,
        within=_current().within,
        what=f"this {purpose}'s input",
    )
    meter = Meter(reservation)
    try:
        yield meter
    finally:
        meter.settle()
