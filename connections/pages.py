"""Usage pages: ``/usage/`` (the signed-in user's tokens by bot and day, what compaction saved,
today's limit) and ``/usage/all/`` (staff: the same across users). Charts are SVG drawn on the
server (bars computed here, no script, no CDN).

Tokens are the provider-reported prompt + completion tokens stored on each reply (the numbers
the daily limits count). "Saved by compaction" is what later calls did not re-send because it
was summarised: for each reply, the sum of ``tokens_before - tokens_after`` of every compaction
of its session that succeeded before the reply finished (a compaction that ran before five later
replies saved its difference five times), counted on the reply's day.
"""

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.db.models import F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, TruncDate
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from bots.models import Message
from compaction.models import CompactionEvent
from connections import usage

DAYS = 14
CHART_WIDTH = 560
CHART_HEIGHT = 140
# The "by bot" / "by user" chart: one horizontal bar per label, the largest ones first.
LABEL_BARS = 10
LABEL_BAR_HEIGHT = 18
LABEL_WIDTH = 160


@dataclass(frozen=True)
class Bar:
    x: int
    y: int
    width: int
    height: int
    day: dt.date
    value: int


def chart_bars(values: dict[dt.date, int], days: list[dt.date]) -> list[Bar]:
    """One bar per day, scaled to the largest value (a day without tokens has no height)."""
    top = max([values.get(d, 0) for d in days] + [1])
    slot = CHART_WIDTH // max(1, len(days))
    bars = []
    for i, day in enumerate(days):
        value = values.get(day, 0)
        height = round(value * CHART_HEIGHT / top)
        bars.append(
            Bar(
                x=i * slot + 2,
                y=CHART_HEIGHT - height,
                width=max(1, slot - 4),
                height=height,
                day=day,
                value=value,
            )
        )
    return bars


@dataclass(frozen=True)
class LabelBar:
    y: int
    width: int
    label: str
    value: int


def label_bars(totals: dict[str, int]) -> list[LabelBar]:
    """The ``LABEL_BARS`` largest totals as horizontal bars (largest first, then by label),
    scaled so the largest fills the chart's width beside the labels."""
    ranked = sorted(((v, k) for k, v in totals.items() if v > 0), key=lambda t: (-t[0], t[1]))
    ranked = ranked[:LABEL_BARS]
    top = ranked[0][0] if ranked else 1
    room = CHART_WIDTH - LABEL_WIDTH
    return [
        LabelBar(
            y=i * LABEL_BAR_HEIGHT,
            width=max(1, round(value * room / top)),
            label=label,
            value=value,
        )
        for i, (value, label) in enumerate(ranked)
    ]


def _window() -> tuple[list[dt.date], dt.datetime]:
    today = usage.today()
    days = [today - dt.timedelta(days=DAYS - 1 - i) for i in range(DAYS)]
    since = dt.datetime.combine(days[0], dt.time(0), tzinfo=dt.UTC)
    return days, since


def _replies(user_filter: Q, since: dt.datetime) -> QuerySet[Message]:
    """The replies that called a model since ``since``: what the usage page counts."""
    return Message.objects.filter(
        user_filter,
        role=Message.Role.ASSISTANT,
        created_at__gte=since,
        prompt_tokens__isnull=False,
    )


def replies_tokens_today(*, user_id: int) -> int:
    """Today's (UTC) reply tokens of ``user_id``'s chats, as the usage page's chart counts them:
    what a user with no daily limit (so no counter) has spent today."""
    since = dt.datetime.combine(usage.today(), dt.time(0), tzinfo=dt.UTC)
    tokens = Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0)
    total = _replies(Q(session__user_id=user_id), since).aggregate(total=Sum(tokens))["total"]
    return int(total or 0)


def usage_report(*, user_filter: Q, group_by: str) -> dict[str, Any]:
    """Tokens by day and by ``group_by`` (``bot_label`` or ``session__user__username``)
    for the replies and compaction events matching ``user_filter`` (a filter on ``session__``,
    which both have), and compaction's savings."""
    days, since = _window()
    # What the compactions of the reply's session that succeeded before the reply finished took
    # off its context (one correlated sum per reply; only replies that called a model count).
    saved_before = (
        CompactionEvent.objects.filter(
            session=OuterRef("session"),
            outcome=CompactionEvent.Outcome.COMPACTED,
            created_at__lt=OuterRef("updated_at"),
            tokens_before__gt=F("tokens_after"),
        )
        .order_by()
        .values("session")
        .annotate(total=Sum(F("tokens_before") - F("tokens_after")))
        .values("total")[:1]
    )
    replies = _replies(user_filter, since).annotate(
        day=TruncDate("created_at", tzinfo=dt.UTC),
        # The bot that wrote the reply (in a room, each its own; a reply from before the chat
        # became a room carries none: the session's bot).
        bot_label=Coalesce(F("bot__name"), F("session__bot__name")),
        tokens=Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0),
        saved=Coalesce(Subquery(saved_before, output_field=IntegerField()), Value(0)),
    )
    per_day: dict[dt.date, int] = {}
    saved: dict[dt.date, int] = {}
    for row in replies.values("day").annotate(total=Sum("tokens"), saved_total=Sum("saved")):
        per_day[row["day"]] = int(row["total"] or 0)
        saved[row["day"]] = int(row["saved_total"] or 0)
    rows = [
        {
            "label": row[group_by],
            "day": row["day"],
            "tokens": int(row["total"] or 0),
            "saved": int(row["saved_total"] or 0),
        }
        for row in replies.values(group_by, "day")
        .annotate(total=Sum("tokens"), saved_total=Sum("saved"))
        .order_by("-day", group_by)
        if row["total"]
    ]
    by_label: dict[str, int] = {}
    for row in rows:
        by_label[row["label"]] = by_label.get(row["label"], 0) + row["tokens"]
    label_chart = label_bars(by_label)
    return {
        "days": days,
        "bars": chart_bars(per_day, days),
        "saved_bars": chart_bars(saved, days),
        "label_bars": label_chart,
        "label_chart_height": max(1, len(label_chart)) * LABEL_BAR_HEIGHT,
        "label_width": LABEL_WIDTH,
        "rows": rows,
        "total": sum(per_day.values()),
        "saved_total": sum(saved.values()),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
    }


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    report = usage_report(user_filter=Q(session__user=request.user), group_by="bot_label")
    limit = usage.user_limit(request.user.pk)
    used, reserved = usage.tokens_today(f"user:{request.user.pk}")
    return render(
        request,
        "connections/usage.html",
        {
            **report,
            "heading": "Your usage",
            "group_label": "Bot",
            "limit": limit,
            "used_today": used,
            "resets_at": usage.resets_at(),
            "now": timezone.now(),
        },
    )


@staff_member_required
def usage_all_page(request: HttpRequest) -> HttpResponse:
    report = usage_report(user_filter=Q(), group_by="session__user__username")
    return render(
        request,
        "connections/usage.html",
        {**report, "heading": "Usage of all users", "group_label": "User", "limit": None},
    )
