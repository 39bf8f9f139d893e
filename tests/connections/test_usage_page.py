"""The usage pages: tokens by bot and day as server-drawn SVG bars, compaction's savings."""

import pytest

from bots.models import Message
from compaction.models import CompactionEvent
from connections import pages, usage
from connections.models import UserQuota
from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _reply(session, seq, prompt, completion):
    return Message.objects.create(
        session=session,
        seq=seq,
        role="assistant",
        content="x",
        status="complete",
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


def test_chart_bars_scale_to_the_largest_day():
    days = [usage.today()]
    assert pages.chart_bars({}, days)[0].height == 0
    import datetime as dt

    two = [usage.today() - dt.timedelta(days=1), usage.today()]
    bars = pages.chart_bars({two[0]: 50, two[1]: 100}, two)
    assert [(b.height, b.y, b.value) for b in bars] == [
        (pages.CHART_HEIGHT // 2, pages.CHART_HEIGHT // 2, 50),
        (pages.CHART_HEIGHT, 0, 100),
    ]


def test_a_user_sees_their_tokens_by_bot_and_what_compaction_saved(owner, other_user, client):
    writer = BotFactory(owner=owner, name="Writer")
    mine = SessionFactory(user=owner, bot=writer)
    _reply(mine, 2, 30, 12)
    _reply(mine, 4, 50, 8)
    theirs = SessionFactory(user=other_user, bot=BotFactory(owner=other_user, name="Theirs"))
    _reply(theirs, 2, 1000, 1000)
    CompactionEvent.objects.create(
        session=mine, trigger="soft", outcome="compacted", tokens_before=900, tokens_after=300
    )
    UserQuota.objects.create(user=owner, daily_token_limit=5000)
    client.force_login(owner)
    page = client.get("/usage/").content.decode()
    assert "<td>Writer</td><td>100</td>" in page
    assert "Theirs" not in page
    assert "<span data-usage-total>100</span>" in page
    assert "<span data-saved-total>600</span>" in page
    assert f'data-day="{usage.today().isoformat()}" data-value="100"' in page
    assert 'data-limit="5000"' in page


def test_the_all_users_page_is_for_staff(owner, staff, client):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner))
    _reply(session, 2, 7, 3)
    client.force_login(owner)
    assert client.get("/usage/all/").status_code == 302  # to the admin login
    client.force_login(staff)
    page = client.get("/usage/all/").content.decode()
    assert "<td>owner</td><td>10</td>" in page
