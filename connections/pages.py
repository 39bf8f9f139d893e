"""Usage pages: ``/usage/`` (the signed-in user's tokens by bot and day, what compaction saved,
today's limit) and ``/usage/all/`` (staff: the same across users). Charts are SVG drawn on the
server (bars computed here, no script, no CDN).

Tokens are the provider-reported prompt + completion tokens stored on each reply (the numbers
the daily limits count); "saved by compaction" is, per compaction that succeeded, the context
tokens it took off every later call (``tokens_before - tokens_after``).
"""

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.db.models import F, Q, Sum
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


def _window() -> tuple[list[dt.date], dt.datetime]:
    today = usage.today()
    days = [today - dt.timedelta(days=DAYS - 1 - i) for i in range(DAYS)]
    since = dt.datetime.combine(days[0], dt.time(0), tzinfo=dt.UTC)
    return days, since


def usage_report(*, user_filter: Q, group_by: str) -> dict[str, Any]:
    """Tokens by day and by ``group_by`` (``session__bot__name`` or ``session__user__username``)
    for the replies and compaction events matching ``user_filter`` (a filter on ``session__``,
    which both have), and compaction's savings."""
    days, since = _window()
    replies = Message.objects.filter(
        user_filter, role=Message.Role.ASSISTANT, created_at__gte=since
    ).annotate(
        day=TruncDate("created_at", tzinfo=dt.UTC),
        tokens=Coalesce(F("prompt_tokens"), 0) + Coalesce(F("completion_tokens"), 0),
    )
    per_day = {
        row["day"]: int(row["total"] or 0)
        for row in replies.values("day").annotate(total=Sum("tokens"))
    }
    rows = [
        {"label": row[group_by], "day": row["day"], "tokens": int(row["total"] or 0)}
        for row in replies.values(group_by, "day")
        .annotate(total=Sum("tokens"))
        .order_by("-day", group_by)
        if row["total"]
    ]
    saved_rows = (
        CompactionEvent.objects.filter(user_filter, outcome="compacted", created_at__gte=since)
        .annotate(day=TruncDate("created_at", tzinfo=dt.UTC))
        .values("day")
        .annotate(saved=Sum(F("tokens_before") - F("tokens_after")))
    )
    saved = {row["day"]: max(0, int(row["saved"] or 0)) for row in saved_rows}
    return {
        "days": days,
        "bars": chart_bars(per_day, days),
        "saved_bars": chart_bars(saved, days),
        "rows": rows,
        "total": sum(per_day.values()),
        "saved_total": sum(saved.values()),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
    }


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    report = usage_report(user_filter=Q(session__user=request.user), group_by="session__bot__name")
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
