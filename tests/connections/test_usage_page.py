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


def _at(message_or_event, when):
    """Stamp a row's times (auto_now/auto_now_add ignore what create() is given)."""
    model = type(message_or_event)
    fields = {"created_at": when}
    if model is Message:
        fields["updated_at"] = when
    model.objects.filter(pk=message_or_event.pk).update(**fields)


def test_a_user_sees_their_tokens_by_bot_and_what_compaction_saved(owner, other_user, client):
    import datetime as dt

    # One hour into today (UTC), so every stamp below falls on today whatever the clock says.
    now = dt.datetime.combine(usage.today(), dt.time(1), tzinfo=dt.UTC)
    writer = BotFactory(owner=owner, name="Writer")
    mine = SessionFactory(user=owner, bot=writer)
    _at(_reply(mine, 2, 30, 12), now - dt.timedelta(minutes=50))
    compaction = CompactionEvent.objects.create(
        session=mine, trigger="soft", outcome="compacted", tokens_before=900, tokens_after=300
    )
    _at(compaction, now - dt.timedelta(minutes=40))
    # Two replies after the compaction: each did not re-send its 600 tokens.
    _at(_reply(mine, 4, 50, 8), now - dt.timedelta(minutes=30))
    _at(_reply(mine, 6, 20, 5), now - dt.timedelta(minutes=20))
    failed = CompactionEvent.objects.create(
        session=mine, trigger="soft", outcome="failed", tokens_before=900, tokens_after=100
    )
    _at(failed, now - dt.timedelta(minutes=25))
    reader = BotFactory(owner=owner, name="Reader")
    other_chat = SessionFactory(user=owner, bot=reader)
    _at(_reply(other_chat, 2, 70, 30), now - dt.timedelta(minutes=10))
    theirs = SessionFactory(user=other_user, bot=BotFactory(owner=other_user, name="Theirs"))
    _reply(theirs, 2, 1000, 1000)
    UserQuota.objects.create(user=owner, daily_token_limit=5000)
    client.force_login(owner)
    page = client.get("/usage/").content.decode()
    assert "<td>Writer</td><td>125</td><td>1,200</td>" in page
    assert "<td>Reader</td><td>100</td><td>0</td>" in page
    assert "Theirs" not in page
    assert "<span data-usage-total>225</span>" in page
    assert "<span data-saved-total>1,200</span>" in page
    today = usage.today().isoformat()
    assert f'data-day="{today}" data-value="225"' in page
    assert f'data-day="{today}" data-value="1200"' in page
    assert 'data-limit="5000"' in page
    # The by-bot chart: the largest first, the largest as wide as the chart beside the labels.
    room = pages.CHART_WIDTH - pages.LABEL_WIDTH
    assert '<g data-label="Writer" data-value="125"><text x="0" y="13"' in page
    assert f'<rect x="{pages.LABEL_WIDTH}" y="2" width="{room}" height="14"' in page
    assert '<g data-label="Reader" data-value="100"><text x="0" y="31"' in page
    assert f'<rect x="{pages.LABEL_WIDTH}" y="20" width="{round(100 * room / 125)}"' in page


def test_label_bars_rank_the_largest_and_keep_ten():
    totals = {f"bot{i:02d}": i * 10 for i in range(12)}
    bars = pages.label_bars(totals)
    assert [(b.label, b.value, b.y) for b in bars[:2]] == [("bot11", 110, 0), ("bot10", 100, 18)]
    assert len(bars) == pages.LABEL_BARS
    assert "bot00" not in [b.label for b in bars]  # zero is no bar
    assert bars[0].width == pages.CHART_WIDTH - pages.LABEL_WIDTH
    assert pages.label_bars({}) == []
    assert [(b.label, b.width) for b in pages.label_bars({"b": 1, "a": 1})] == [
        ("a", pages.CHART_WIDTH - pages.LABEL_WIDTH),
        ("b", pages.CHART_WIDTH - pages.LABEL_WIDTH),
    ]


def test_the_all_users_page_is_for_staff(owner, staff, client):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner))
    _reply(session, 2, 7, 3)
    client.force_login(owner)
    assert client.get("/usage/all/").status_code == 302  # to the admin login
    client.force_login(staff)
    page = client.get("/usage/all/").content.decode()
    assert "<td>owner</td><td>10</td><td>0</td>" in page
    assert '<g data-label="owner" data-value="10">' in page
    assert 'href="/usage/"' in page
    client.force_login(owner)
    assert client.get("/usage/").status_code == 200
    assert 'href="/usage/all/"' not in client.get("/usage/").content.decode()


def test_numbers_people_read_have_thousands_separators(owner, client):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner, name="Big"))
    _reply(session, 2, 180000, 1125)
    UserQuota.objects.create(user=owner, daily_token_limit=2500000)
    client.force_login(owner)
    page = client.get("/usage/").content.decode()
    assert "Today: 0 of 2,500,000 tokens" in page  # the day's counter, not these rows
    assert "<span data-usage-total>181,125</span>" in page
    assert "<td>Big</td><td>181,125</td><td>0</td>" in page
    assert "<title>Big: 181,125 tokens</title>" in page
    # what scripts and tests read stays a plain number
    assert 'data-limit="2500000" data-used="0"' in page
    assert 'data-value="181125"' in page


def test_a_rooms_replies_count_for_the_bot_that_wrote_each(owner, client):
    """In a room each reply is its own bot's (they all went to the room's default bot)."""
    planner = BotFactory(owner=owner, name="Planner")
    critic = BotFactory(owner=owner, name="Critic")
    room = SessionFactory(user=owner, bot=planner, is_room=True)
    first = _reply(room, 2, 30, 10)
    second = _reply(room, 4, 60, 20)
    Message.objects.filter(pk=first.pk).update(bot=planner)
    Message.objects.filter(pk=second.pk).update(bot=critic)
    client.force_login(owner)
    page = client.get("/usage/").content.decode()
    assert "<td>Planner</td><td>40</td>" in page
    assert "<td>Critic</td><td>80</td>" in page
