"""The admin: summary audit (snapshot beside summary, dropped lines, missing facts), read-only
compaction and memory records, counters that cannot be edited, the bot fieldsets, and the demo
user's read-only staff access in embedded mode."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from bots.models import Bot, ChatSession, Message, SessionParticipant
from compaction.audit import source_lines
from compaction.facts import retention_score
from compaction.models import CompactionEvent, Summary
from memory.models import MemoryRecord
from tests.coverage import message_covering
from tests.factories import BotFactory, SessionFactory, UserFactory, message_add

pytestmark = pytest.mark.django_db

SNAPSHOT = "\n".join(
    [
        "[1] user: My flight to Lisbon leaves on 14 March at 09:40.",
        "[2] assistant: Noted, the Lisbon flight leaves 14 March.",
        "[3] user: The booking code is QX7-4471 and Maria Santos pays.",
        "[4] assistant: thanks, anything else?",
    ]
)
SUMMARY_TEXT = "The user flies to Lisbon on 14 March; the booking was discussed."


@pytest.fixture
def admin_web(db) -> Client:
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def audited(owner, bot):
    session = SessionFactory(user=owner, bot=bot, title="Trip planning")
    for line in SNAPSHOT.splitlines():
        role = "user" if "] user:" in line else "assistant"
        message_add(session, role=role, content=line.split(": ", 1)[1])
    retention, missing = retention_score(SNAPSHOT, SUMMARY_TEXT)
    summary = Summary.objects.create(
        session=session,
        level=1,
        text=SUMMARY_TEXT,
        token_count=20,
        first_seq=1,
        last_seq=4,
        source_tokens=80,
        model="builtin/extractive",
        trigger="manual",
        retention=retention,
        missing_facts=missing,
    )
    snapshot = MemoryRecord.objects.create(
        session=session,
        name="snapshot_1_4",
        kind="snapshot",
        description="Pre-compaction snapshot of messages 1–4: Lisbon",
        body=SNAPSHOT,
        token_count=80,
        first_seq=1,
        last_seq=4,
    )
    event = CompactionEvent.objects.create(
        session=session,
        trigger="manual",
        outcome="compacted",
        tokens_before=12_412,
        tokens_after=137,
        source_tokens=80,
        summary_tokens=20,
        model="builtin/extractive",
        duration_ms=1234,
        snapshot=snapshot,
        summary=summary,
    )
    return session, summary, snapshot, event


def test_audit_marks_dropped_and_partial_lines_with_quality_fact_extraction():
    lines = source_lines(SNAPSHOT, SUMMARY_TEXT)
    assert [line.status for line in lines] == ["partial", "kept", "dropped", "plain"]
    assert lines[0].missing == ["09:40"]
    assert set(lines[2].missing) == {"QX7-4471", "Maria Santos"}
    highlighted = [seg.text for seg in lines[2].segments if seg.missing]
    assert highlighted == ["QX7-4471", "Maria Santos"]


def test_summary_audit_detail_shows_snapshot_and_summary_side_by_side(admin_web, audited):
    _session, summary, snapshot, event = audited

    response = admin_web.get(f"/admin/compaction/summary/{summary.pk}/change/")

    assert response.status_code == 200
    html = response.content.decode()
    side = html.index('id="audit-side-by-side"')
    assert html.index('id="audit-snapshot"') > side and html.index('id="audit-summary"') > side
    assert SUMMARY_TEXT in html
    assert "My flight to Lisbon leaves on 14 March at" in html
    assert '<li class="line-dropped" data-status="dropped"' in html
    assert '<mark class="missing-fact">QX7-4471</mark>' in html
    assert '<mark class="missing-fact">Maria Santos</mark>' in html
    assert '<mark class="missing-fact">09:40</mark>' in html
    assert "messages 1–4" in html
    # Numbers read with thousands separators (issue 32).
    assert "12,412 → 137" in html and "12412" not in html
    assert "builtin/extractive" in html
    assert f"/admin/memory/memoryrecord/{snapshot.pk}/change/" in html
    assert f"/admin/compaction/compactionevent/{event.pk}/change/" in html
    # Read-only: no save buttons.
    assert 'name="_save"' not in html


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?trigger__exact=manual",
        "?status__exact=active",
        "?level__exact=1",
        "?created_at__gte=2000-01-01",
        "?session__bot__id__exact={bot}",
        "?session__user__id__exact={user}",
    ],
)
def test_summary_list_filters(admin_web, audited, query):
    session, summary, _snapshot, _event = audited
    url = "/admin/compaction/summary/" + query.format(bot=session.bot_id, user=session.user_id)
    response = admin_web.get(url)
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == [summary]


def test_event_list_links_snapshot_and_summary_and_filters_by_outcome(admin_web, audited):
    _session, summary, snapshot, event = audited
    response = admin_web.get("/admin/compaction/compactionevent/?outcome__exact=compacted")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="/admin/memory/memoryrecord/{snapshot.pk}/change/"' in html
    assert f'href="/admin/compaction/summary/{summary.pk}/change/"' in html
    assert "1.23 s" in html
    empty = admin_web.get("/admin/compaction/compactionevent/?outcome__exact=failed")
    assert list(empty.context["cl"].result_list) == []


def test_summaries_events_and_records_cannot_be_changed_by_post(admin_web, audited):
    session, summary, snapshot, event = audited
    posts = [
        (f"/admin/compaction/summary/{summary.pk}/change/", {"text": "forged", "retention": "1"}),
        (f"/admin/compaction/compactionevent/{event.pk}/change/", {"tokens_after": "1"}),
        (f"/admin/memory/memoryrecord/{snapshot.pk}/change/", {"body": "forged"}),
    ]
    for url, data in posts:
        assert admin_web.post(url, data).status_code == 403
    assert admin_web.post(f"/admin/memory/memoryrecord/{snapshot.pk}/delete/").status_code == 403
    # A superuser deleted a summary here (302): its messages left the model's context while
    # the seat still counted them covered.
    for url in (
        f"/admin/compaction/summary/{summary.pk}/delete/",
        f"/admin/compaction/compactionevent/{event.pk}/delete/",
    ):
        assert admin_web.get(url).status_code == 403
        assert admin_web.post(url, {"post": "yes"}).status_code == 403
    bulk = admin_web.post(
        "/admin/compaction/compactionevent/",
        {"action": "delete_selected", "_selected_action": [event.pk], "post": "yes"},
    )
    assert bulk.status_code in (200, 302)
    assert Summary.objects.filter(pk=summary.pk).exists()
    assert CompactionEvent.objects.filter(pk=event.pk).exists()
    summary.refresh_from_db()
    snapshot.refresh_from_db()
    event.refresh_from_db()
    assert (summary.text, snapshot.body, event.tokens_after) == (SUMMARY_TEXT, SNAPSHOT, 137)


def test_session_counters_and_message_status_are_read_only(admin_web, audited):
    session, summary, _snapshot, _event = audited
    message = Message.objects.get(session=session, seq=1)
    before = ChatSession.objects.values("last_seq", "context_tokens", "context_messages").get(
        pk=session.pk
    )

    response = admin_web.post(
        f"/admin/bots/chatsession/{session.pk}/change/",
        {
            "title": "Renamed",
            "last_seq": "999",
            "context_tokens": "0",
            "context_messages": "0",
            "user": str(session.user_id),
            "bot": str(session.bot_id),
        },
    )
    assert response.status_code == 302
    session.refresh_from_db()
    assert session.title == "Renamed"
    assert {
        "last_seq": session.last_seq,
        "context_tokens": session.context_tokens,
        "context_messages": session.context_messages,
    } == before

    page = admin_web.get(f"/admin/bots/message/{message.pk}/change/")
    assert page.status_code == 200
    assert 'name="token_count"' not in page.content.decode()
    forged = admin_web.post(
        f"/admin/bots/message/{message.pk}/change/",
        {"token_count": "1", "status": "failed", "seq": "50", "compacted_by_id": str(summary.pk)},
    )
    assert forged.status_code == 403
    message.refresh_from_db()
    assert (message.status, message.seq, message_covering(message)) == ("complete", 1, None)
    assert admin_web.get("/admin/bots/message/add/").status_code == 403
    assert admin_web.get("/admin/bots/chatsession/add/").status_code == 403


def test_bot_admin_has_the_pages_sections_and_the_same_validation(admin_web, owner):
    page = admin_web.get("/admin/bots/bot/add/")
    assert page.status_code == 200
    html = page.content.decode()
    for heading in ("Basic settings", "Advanced: Compaction", "Advanced: Memory"):
        assert heading in html

    response = admin_web.post(
        "/admin/bots/bot/add/",
        {
            "owner": str(owner.pk),
            "name": "No budget",
            "model": "builtin/recall",
            "temperature": "0.7",
            "max_output_tokens": "1000",
            "context_window": "1000",
            "compaction_threshold": "0",
            "compaction_kept_percent": "40",
            "memory_index_size": "50",
            "api_key_env": "SECRET_KEY",
        },
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "api_key_env" in errors
    assert not Bot.objects.filter(name="No budget").exists()


def test_seed_demo_makes_demo_read_only_staff_in_embedded_mode(settings, audited):
    _session, summary, _snapshot, _event = audited
    settings.EMBEDDED = True
    settings.DEBUG = True
    out = StringIO()
    call_command("seed_demo", stdout=out)
    call_command("seed_demo", stdout=out)  # idempotent

    demo = UserFactory._meta.model.objects.get(username="demo")
    assert (demo.is_staff, demo.is_superuser) == (True, False)
    assert "demo is staff" in out.getvalue()
    client = Client()
    assert client.login(username="demo", password="demo")
    assert client.get("/admin/").status_code == 200
    detail = client.get(f"/admin/compaction/summary/{summary.pk}/change/")
    assert detail.status_code == 200
    assert 'id="audit-side-by-side"' in detail.content.decode()
    assert client.get("/admin/compaction/compactionevent/").status_code == 200
    assert client.get("/admin/memory/recallevent/").status_code == 200
    # The audit's links to the replies made from a summary open (they answered 403).
    assert client.get("/admin/compaction/contextrecord/").status_code == 200
    # View only: nothing to change, not even bots or users.
    assert client.get("/admin/bots/bot/add/").status_code == 403
    assert client.get("/admin/auth/user/").status_code == 403


def test_seed_demo_in_real_mode_leaves_demo_an_ordinary_user(settings):
    settings.EMBEDDED = False
    settings.DEBUG = True
    call_command("seed_demo", stdout=StringIO())
    demo = UserFactory._meta.model.objects.get(username="demo")
    assert (demo.is_staff, demo.is_superuser) == (False, False)
    assert not demo.user_permissions.exists()


# --- a room's audit: each bot's summaries side by side -----------------------------------------


def _summary(session, bot, first, last, text, **fields):
    return Summary.objects.create(
        session=session,
        bot=bot,
        level=1,
        text=text,
        token_count=12,
        first_seq=first,
        last_seq=last,
        source_tokens=60,
        model="builtin/extractive",
        trigger="soft",
        retention=0.5,
        **fields,
    )


@pytest.fixture
def audited_room(owner):
    planner = BotFactory(owner=owner, name="Planner")
    critic = BotFactory(owner=owner, name="Critic")
    session = SessionFactory(user=owner, bot=planner, title="Launch room", is_room=True)
    SessionParticipant.objects.create(session=session, bot=planner, is_default=True)
    SessionParticipant.objects.create(session=session, bot=critic, joined_seq=2)
    late = _summary(session, planner, 5, 8, "Planner: budget is 40k.")
    early = _summary(session, planner, 1, 4, "Planner: launch on 3 May.", status="superseded")
    critic_early = _summary(session, critic, 1, 4, "Critic: the 3 May date is risky.")
    critic_next = _summary(session, critic, 3, 6, "Critic: QA needs 2 weeks.")
    return session, planner, critic, [early, critic_early, critic_next, late]


def _table(html, part):
    table = html[html.index('id="room-audit-table"') :]
    return table[table.index(f"<{part}>") : table.index(f"</{part}>")]


def _rows(html):
    """The room table's body as [(range, [[summary ids per bot column]])]."""
    body = _table(html, "tbody")
    rows = []
    for chunk in body.split('<tr data-range="')[1:]:
        cells = chunk.split("<td>")[1:]
        rows.append(
            (
                chunk.split('"', 1)[0],
                [[int(i) for i in re.findall(r'data-summary-id="(\d+)"', cell)] for cell in cells],
            )
        )
    return rows


def test_room_audit_sets_each_bots_summaries_side_by_side_with_links(admin_web, audited_room):
    session, planner, critic, (early, critic_early, critic_next, late) = audited_room

    response = admin_web.get(f"/admin/compaction/summary/room/{session.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    head = _table(html, "thead")
    assert re.findall(r'<th scope="col"[^>]*>([^<]+)', head) == ["Messages", "Planner ", "Critic "]
    assert _rows(html) == [
        ("1-4", [[early.pk], [critic_early.pk]]),
        ("3-6", [[], [critic_next.pk]]),
        ("5-8", [[late.pk], []]),
    ]
    for summary in (early, critic_early, critic_next, late):
        assert f'<a href="/admin/compaction/summary/{summary.pk}/change/">' in html
    assert "Critic: the 3 May date is risky." in html
    assert "level 1, soft, superseded, 12 tokens, retention 50 %" in html
    assert "4 summaries by 2 bots" in html
    assert f"/admin/compaction/summary/?session__exact={session.pk}" in html

    # Each room summary's own audit links back to the room's.
    page = admin_web.get(f"/admin/compaction/summary/{critic_next.pk}/change/")
    assert f'href="/admin/compaction/summary/room/{session.pk}/" id="audit-room-link"' in (
        page.content.decode()
    )


def test_room_audit_keeps_a_removed_bots_column(admin_web, audited_room):
    session, _planner, critic, _summaries = audited_room
    SessionParticipant.objects.filter(session=session, bot=critic).update(removed_at=timezone.now())
    html = admin_web.get(f"/admin/compaction/summary/room/{session.pk}/").content.decode()
    head = _table(html, "thead")
    assert (
        f'<th scope="col" data-bot-id="{critic.pk}">Critic <span class="audit-sub">@critic</span>'
        in head
    )
    assert '<span class="audit-sub">(left)</span>' in head


def test_a_one_bot_sessions_audit_has_no_room_view_link(admin_web, audited):
    _session, summary, _snapshot, _event = audited
    html = admin_web.get(f"/admin/compaction/summary/{summary.pk}/change/").content.decode()
    assert "audit-room-link" not in html
    assert "/admin/compaction/summary/room/" not in html
    assert 'id="audit-side-by-side"' in html


def test_room_audit_is_refused_to_non_staff_and_unknown_sessions_are_not_found(
    admin_web, audited_room, owner
):
    session, *_rest = audited_room
    url = f"/admin/compaction/summary/room/{session.pk}/"
    visitor = Client()
    visitor.force_login(owner)
    refused = visitor.get(url)
    assert (refused.status_code, refused["Location"]) == (302, f"/admin/login/?next={url}")
    anonymous = Client().get(url)
    assert (anonymous.status_code, anonymous["Location"]) == (302, f"/admin/login/?next={url}")
    staff_without_view = Client()
    staff_without_view.force_login(UserFactory(username="helpdesk", is_staff=True))
    assert staff_without_view.get(url).status_code == 403
    assert admin_web.get("/admin/compaction/summary/room/999999/").status_code == 404
