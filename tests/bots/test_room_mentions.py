"""Who a message mentions and who a bot's reply hands the floor to (turns/room.py,
docs/rooms.md "Who answers"): only an explicit @mention outside quotes and code; never the room
header, an echo of what was just said, or the bot's own name; every stop of one reply in one
notice."""

import pytest

from bots.models import SessionParticipant
from compaction.seats import ROOM_HEADER_ECHO, room_view
from tests.factories import BotFactory, SessionFactory
from turns.room import addressed_bots, handovers, mention_text, mentioned_bots


@pytest.fixture
def people(owner):
    """Planner, Critic and Ann Lee (a name with a space), as unsaved participant rows."""
    bots = [BotFactory(owner=owner, name=name) for name in ("Planner", "Critic", "Ann Lee")]
    return [SessionParticipant(bot=bot) for bot in bots]


def slugs(bots):
    return [bot.slug for bot in bots]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Over to you, @critic.", ["critic"]),
        ("@Critic and @PLANNER", ["critic", "planner"]),
        ("@ann lee, then @Ann Lee again", ["ann-lee"]),
        ("mail critic@critic.example or @criticism", []),
        ("> @critic said so", []),
        ("   > quoted\n> @planner too\nbut @critic here", ["critic"]),
        ('As they put it, "ask @planner" — so I ask @critic', ["critic"]),
        ("\u201cask @planner\u201d and \u00ab@critic\u00bb", []),
        ("Use `@planner` in code, not @critic", ["critic"]),
        ("``@planner`` twice", []),
        ("```\n@planner\n```\n@critic", ["critic"]),
        ("~~~python\n@planner\n~~~", []),
        ("```\n@planner never closed", []),
        ('a stray " mark\n\nthen @critic', ["critic"]),
        ("it's @planner's turn", ["planner"]),
    ],
)
def test_mentions_outside_quotes_and_code(people, text, expected):
    assert slugs(mentioned_bots(text, people)) == expected


def test_mention_text_blanks_cited_stretches_and_keeps_positions():
    text = "a `@x` b\n> @y\nc"
    assert mention_text(text) == "a      b\n    \nc"
    assert len(mention_text(text)) == len(text)


def test_the_room_header_as_written_is_recognised_whole_and_cut(owner, people):
    session = SessionFactory(user=owner, bot=people[0].bot, is_room=True)
    for participant in people:
        SessionParticipant.objects.create(
            session=session, bot=participant.bot, joined_seq=0, is_default=participant is people[0]
        )
    header = room_view(session).header
    assert ROOM_HEADER_ECHO.fullmatch(header)
    first_sentence = header.split(". Messages")[0] + "."
    assert mentioned_bots(header, people) == []
    assert mentioned_bots(f"> {first_sentence} — context", people) == []
    assert mentioned_bots(f"Recall: {first_sentence}\nso @critic", people) == [people[1].bot]


@pytest.mark.parametrize(
    "reply, earlier, expected",
    [
        ("Over to you, @critic.", [], ["critic"]),
        # the sentence repeats what was asked: an echo
        ("You said: ask @critic about it. Done.", ["Please ask @critic about it"], []),
        ("Ask @critic about it!", ["ask  @Critic about it."], []),
        # the same mention in a sentence of the bot's own
        ("I agree, so @critic, your view?", ["ask @critic about it"], ["critic"]),
        # a bare mention is never an echo
        ("@critic", ["@critic"], ["critic"]),
        (
            "Planner: ask @critic about it\n@planner, what now?",
            ["ask @critic about it"],
            ["planner"],
        ),
    ],
)
def test_an_echoed_mention_is_no_hand_over(people, reply, earlier, expected):
    assert slugs(addressed_bots(reply, people, earlier=earlier)) == expected


def _floor(people, text, *, speaker=0, answered=(), waiting=(), hops=0, earlier=()):
    from bots.models import Message

    bots = [p.bot for p in people]
    return handovers(
        reply=Message(content=text),
        speaker=bots[speaker],
        participants=people,
        answered_bot_ids={bots[i].pk for i in answered} | {bots[speaker].pk},
        waiting_bot_ids={bots[i].pk for i in waiting},
        hops_so_far=hops,
        earlier=list(earlier),
    )


def test_a_bots_own_name_hands_nothing_over_and_says_nothing(people):
    decided = _floor(people, "I, @planner, decide.")
    assert (decided.bots, decided.notice) == ([], None)


def test_a_waiting_bot_answers_anyway_without_a_notice(people):
    decided = _floor(people, "@critic first", waiting=[1])
    assert (decided.bots, decided.notice) == ([], None)


def test_hand_over_then_the_hop_limit(people, settings):
    settings.ROOM_MAX_HOPS = 1
    decided = _floor(people, "@critic and @ann lee")
    assert slugs(decided.bots) == ["critic"]
    assert decided.notice == (
        "Planner mentioned Ann Lee, but this message already led to 1 bot-to-bot replies (the "
        "room's limit); Ann Lee does not answer."
    )


def test_several_stops_of_one_reply_are_one_notice(people, settings):
    settings.ROOM_MAX_HOPS = 1
    decided = _floor(people, "@planner? @critic? @ann lee?", speaker=1, answered=[0], hops=1)
    assert decided.bots == []
    assert decided.notice == (
        "Critic mentioned Planner and Ann Lee; the chain stops here: Planner already answered "
        "this message, and it already led to 1 bot-to-bot replies (the room's limit)."
    )
    cycles = _floor(people, "@planner and @ann lee", speaker=1, answered=[0, 2])
    assert cycles.notice == (
        "Critic handed the floor back to Planner and Ann Lee, who already answered this "
        "message; the chain stops here to avoid a loop."
    )


def test_cited_stretches_are_found_in_one_pass_over_a_megabyte():
    """A 1 MB message (the largest one) of unclosed backticks, quotation marks or header starts
    ("You are "): every opening mark once tried itself against the whole rest of its text
    (20,000 backticks took 2.3 s, 8,000 "You are " 2.2 s; a megabyte, hours of a worker). Each
    is now scanned once; the exact blanking is unchanged."""
    megabyte = 1024 * 1024
    unclosed = ["`" * megabyte, "\u201c" * megabyte, "\u00ab" * megabyte, "```" + "`" * megabyte]
    for text in [*unclosed, "You are " * (megabyte // 8)]:
        assert mention_text(text + " @critic").endswith(" @critic")
    distinct_runs = "".join("`" * n + " @critic " for n in range(1, 1400))
    assert mention_text(distinct_runs).count("@critic") == 1399
    assert mention_text("say `@a` and ``x ` @b`` then @c") == "say      and            then @c"
    assert mention_text("`unclosed @a") == "`unclosed @a"
    assert mention_text('"@a" \u201c@b\u201d \u00ab@c\u00bb @d') == " " * 15 + "@d"


def test_only_the_first_mentions_of_a_reply_are_weighed(people):
    """A reply naming bots thousands of times weighs its first ``MENTIONS_WEIGHED_MAX`` (50)
    mentions, each bot once: a mention past them hands the floor to no one."""
    text = "@planner. " * 50 + "@critic."
    assert slugs(addressed_bots(text, people, earlier=[])) == ["planner"]
    text = "@planner. " * 49 + "@critic."
    assert slugs(addressed_bots(text, people, earlier=[])) == ["planner", "critic"]
