"""A 60-turn chat with the seeded "Recall, tight budget" demo bot through the real turn
(services -> turn task, eager -> pipeline -> gateway -> litellm -> builtin/recall; compaction by
builtin/extractive): facts said between small talk come back clean and correct."""

import re

import pytest
from django.db.models import Max

from bots.management.commands.seed_demo import TIGHT_BOT
from bots.models import Bot, Message
from compaction.models import CompactionEvent, Summary
from turns.services.send import session_message_send
from turns.services.session import session_create

pytestmark = pytest.mark.django_db(transaction=True)

FACTS = [
    ("My sister Clara plays the cello.", "What instrument does my sister play?", "cello"),
    ("I live in Porto, near the Ribeira.", "Where do I live?", "Porto"),
    ("My locker code is 4471.", "What is my locker code?", "4471"),
    (
        "My dentist appointment is on 14 March at 10:30.",
        "When is my dentist appointment?",
        "14 March",
    ),
    ("The rent is 1,250 euros a month.", "How much is the rent?", "1,250"),
    ("My manager is called Henrik Dahl.", "Who is my manager?", "Henrik Dahl"),
    ("I prefer aisle seats on flights.", "Which seats do I prefer on flights?", "aisle"),
    (
        "The wifi password at the cabin is maple-7731.",
        "What is the wifi password at the cabin?",
        "maple-7731",
    ),
]
SMALL_TALK = [
    "The weather turned grey again this afternoon.",
    "I watched a documentary about deep sea creatures yesterday.",
    "Traffic was slow on the way home.",
    "I tried a new recipe with lentils and it went fine.",
    "The neighbours are repainting their fence.",
]
# Levels: with this bot a summary pass covers ~25 turns of this chat, and fusion starts only
# once the active summaries pass 20 % of B (358 tokens); extractive fuses to at most half.
MAX_LEVEL = 3
SUMMARY_HEADER = re.compile(r"\[Summary of|Summary of messages \d")
NESTED_QUOTE = re.compile(r"^\s*>.*(?:^|\s)>", re.MULTILINE)


def _nested_or_header(text: str) -> bool:
    lines = text.splitlines()
    if SUMMARY_HEADER.search(text) or NESTED_QUOTE.search(text):
        return True
    return any(re.match(r"^\s*>\s*>|^\s*>\s*\[\d+\]", line) for line in lines)


def test_sixty_turns_with_the_tight_demo_bot_stay_coherent(owner, eager_tasks):
    bot = Bot.objects.create(owner=owner, **TIGHT_BOT)
    session = session_create(user=owner, bot_id=bot.pk)
    script = []
    for i, (statement, _, _) in enumerate(FACTS):
        script.append(statement)
        script.extend(SMALL_TALK[(i + k) % len(SMALL_TALK)] for k in range(3))
    script.extend(SMALL_TALK[k % len(SMALL_TALK)] for k in range(60 - len(FACTS) - len(script)))
    answers = {}
    for content in script + [question for _, question, _ in FACTS]:
        reply = session_message_send(user=owner, session_id=session.pk, content=content)
        answers[content] = Message.objects.get(pk=reply.assistant_message.pk)
    assert len(script) + len(FACTS) == 60

    replies = Message.objects.filter(session=session, role="assistant")
    assert set(replies.values_list("status", flat=True)) == {"complete"}
    for reply in replies:
        assert not _nested_or_header(reply.content), reply.content
        assert not reply.content.lstrip().startswith("{"), reply.content  # no leaked request
    compactions = CompactionEvent.objects.filter(session=session, outcome="compacted")
    assert compactions.exclude(trigger="fusion").count() >= 2
    for summary in Summary.objects.filter(session=session):
        assert not _nested_or_header(summary.text), summary.text
    assert Summary.objects.filter(session=session).aggregate(v=Max("level"))["v"] <= MAX_LEVEL
    for statement, question, expected in FACTS:
        answer = answers[question].content
        assert answer.startswith("From earlier in our conversation:\n> "), (question, answer)
        assert expected in answer, (question, statement, answer)
        assert "user:" not in answer and "assistant:" not in answer
