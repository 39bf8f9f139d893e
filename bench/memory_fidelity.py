"""Does the built-in bot bring every fact back? (issue 8, item 8)

Drives a scripted 300-turn conversation through the real chat turn (services -> turn, tasks run
in-process -> context pipeline -> gateway -> litellm -> ``builtin/recall``, compaction by
``builtin/extractive``) with the seeded "Recall, tight budget" demo bot: 40 facts (names, dates,
amounts, codes, preferences), stated plainly between small talk, then each fact asked back.
Prints facts recovered / 40, compaction rounds, recall rounds (``RecallEvent`` rows), mean
retention of the summaries, and the largest summary level.

``--scale``: one fact per turn over 3,000 turns (``--quick``: 600), printing the mean turn time
of the last 100 turns over the first 100 (history length must not slow a turn down).

    .venv/bin/python bench/memory_fidelity.py [--scale] [--quick]
    # DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/chat_bench
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _django import setup  # noqa: E402

setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db.models import Avg, Max  # noqa: E402

from bots.management.commands.seed_demo import TIGHT_BOT  # noqa: E402
from bots.models import Bot, Message  # noqa: E402
from compaction.models import CompactionEvent, Summary  # noqa: E402
from memory.models import RecallEvent  # noqa: E402
from turns.services.send import session_message_send  # noqa: E402
from turns.services.session import session_create  # noqa: E402

TURNS = 300
# (statement, question, the answer's key words)
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
    ("Our wedding anniversary is on 9 June.", "When is our wedding anniversary?", "9 June"),
    ("I am allergic to penicillin.", "Which medicine am I allergic to?", "penicillin"),
    ("My car is a blue Skoda Octavia.", "What car do I drive?", "Skoda"),
    ("The project deadline is 30 September.", "When is the project deadline?", "30 September"),
    ("My gym membership costs 39 euros.", "How much does my gym membership cost?", "39"),
    ("Our cat is named Miso.", "What is our cat's name?", "Miso"),
    ("My passport number is X4829103.", "What is my passport number?", "X4829103"),
    ("I drink my coffee black without sugar.", "How do I take my coffee?", "black"),
    ("The plumber Marek charges 60 euros an hour.", "How much does the plumber charge?", "60"),
    (
        "My daughter's school is Greenfield Primary.",
        "Which school does my daughter attend?",
        "Greenfield",
    ),
    (
        "The invoice number for the laptop is INV-5532.",
        "What is the laptop invoice number?",
        "INV-5532",
    ),
    ("My favourite author is Ursula Le Guin.", "Who is my favourite author?", "Le Guin"),
    ("The book club meets every second Thursday.", "When does the book club meet?", "Thursday"),
    ("My bike lock combination is 0612.", "What is my bike lock combination?", "0612"),
    ("Grandma's birthday is on 22 November.", "When is grandma's birthday?", "22 November"),
    ("I ran the half marathon in 1:52.", "What was my half marathon time?", "1:52"),
    ("My landlord is Mrs Okafor.", "Who is my landlord?", "Okafor"),
    (
        "The parking permit expires on 31 January.",
        "When does the parking permit expire?",
        "31 January",
    ),
    ("My bank branch sort code is 20-45-77.", "What is my bank sort code?", "20-45-77"),
    ("I am learning Portuguese on Tuesdays.", "Which language am I learning?", "Portuguese"),
    ("My brother Tomasz lives in Gdansk.", "Where does my brother live?", "Gdansk"),
    ("The boiler was serviced by HeatCo.", "Which company serviced the boiler?", "HeatCo"),
    ("My shoe size is 43.", "What is my shoe size?", "43"),
    (
        "I prefer green tea over coffee in the evening.",
        "What do I drink in the evening?",
        "green tea",
    ),
    ("The electricity bill was 84 euros in May.", "How much was the electricity bill?", "84"),
    ("My doctor is Dr Feldman at the Alameda clinic.", "Who is my doctor?", "Feldman"),
    ("The garage door code is 7-7-2-1.", "What is the garage door code?", "7-7-2-1"),
    ("My niece Aiko turns 8 in April.", "How old does my niece turn?", "8"),
    ("I am vegetarian but I eat fish.", "Am I vegetarian?", "vegetarian"),
    ("Our flight to Oslo is SK1472.", "What is our flight number to Oslo?", "SK1472"),
    ("The spare key is with neighbour Ines.", "Who has the spare key?", "Ines"),
    ("My pension contribution is 6 percent.", "How much is my pension contribution?", "6 percent"),
]
SMALL_TALK = [
    "The weather turned grey again this afternoon.",
    "I watched a documentary about deep sea creatures yesterday.",
    "Traffic was slow on the way home.",
    "I tried a new recipe with lentils and it went fine.",
    "The neighbours are repainting their fence.",
    "I need more sleep this week.",
    "There was a nice sunset over the hills.",
    "I cleaned out the kitchen drawers.",
    "A podcast episode about volcanoes kept me busy.",
    "The train was a few minutes late.",
    "I found an old photo album in the attic.",
    "My plants on the balcony look happier now.",
    "We played a board game after dinner.",
    "I walked along the river for an hour.",
    "The supermarket moved the bread aisle again.",
    "I reorganised my desk and it feels better.",
]


def demo_bot(user) -> Bot:
    Bot.objects.filter(owner=user).delete()
    return Bot.objects.create(owner=user, **TIGHT_BOT)


def say(user, session, content: str) -> Message:
    result = session_message_send(user=user, session_id=session.pk, content=content)
    reply = result.assistant_message
    assert reply is not None
    reply.refresh_from_db()
    if reply.status != "complete":
        raise SystemExit(f"turn failed: {reply.error_code} {reply.error_message}")
    return reply


def script(turns: int, rng: random.Random) -> list[str | int]:
    """``turns`` user messages: small talk, with fact i (an int) at evenly spread positions."""
    messages: list[str | int] = [rng.choice(SMALL_TALK) for _ in range(turns)]
    step = turns / len(FACTS)
    for i in range(len(FACTS)):
        messages[int(i * step + rng.random() * (step - 1))] = i
    return messages


def fidelity() -> None:
    rng = random.Random(8)
    user, _ = get_user_model().objects.get_or_create(username="bench-fidelity")
    bot = demo_bot(user)
    session = session_create(user=user, bot_id=bot.pk)
    started = time.monotonic()
    for item in script(TURNS, rng):
        say(user, session, FACTS[item][0] if isinstance(item, int) else item)
    recovered = 0
    misses = []
    for statement, question, expected in FACTS:
        reply = say(user, session, question)
        if expected.lower() in reply.content.lower():
            recovered += 1
        else:
            misses.append((question, statement, reply.content))
    elapsed = time.monotonic() - started
    compacted = CompactionEvent.objects.filter(session=session, outcome="compacted")
    summaries = Summary.objects.filter(session=session)
    print(f"bot: {bot.name}: window {bot.context_window}, reserve {bot.max_output_tokens}")
    print(f"turns: {TURNS} + {len(FACTS)} questions in {elapsed:.0f} s")
    print(f"facts recovered: {recovered} / {len(FACTS)}")
    print(
        f"compaction rounds: {compacted.exclude(trigger='fusion').count()} "
        f"(+ {compacted.filter(trigger='fusion').count()} fusions, "
        f"{CompactionEvent.objects.filter(session=session).exclude(outcome='compacted').count()}"
        " other events)"
    )
    print(f"recall rounds: {RecallEvent.objects.filter(session=session).count()}")
    print(f"mean retention: {summaries.aggregate(v=Avg('retention'))['v'] or 0:.3f}")
    print(f"largest summary level: {summaries.aggregate(v=Max('level'))['v'] or 0}")
    for question, statement, answer in misses:
        print(f"  miss: {question!r} (said: {statement!r})\n    -> {answer!r}")


def scale(turns: int) -> None:
    user, _ = get_user_model().objects.get_or_create(username="bench-fidelity-scale")
    bot = demo_bot(user)
    session = session_create(user=user, bot_id=bot.pk)
    times: list[float] = []
    for n in range(turns):
        content = f"Note {n}: the parcel for order {1000 + n} goes to shelf {chr(65 + n % 26)}{n}."
        started = time.perf_counter()
        say(user, session, content)
        times.append(time.perf_counter() - started)
    window = min(100, turns // 4)
    first = sum(times[:window]) / window
    last = sum(times[-window:]) / window
    print(f"turns: {turns}, one fact each; bot window {bot.context_window}")
    print(
        f"mean turn time: first {window} {first * 1000:.1f} ms, last {window} {last * 1000:.1f} ms"
    )
    print(f"ratio end / start: {last / first:.2f}")
    print(
        f"compaction rounds: "
        f"{CompactionEvent.objects.filter(session=session, outcome='compacted').count()}, "
        f"largest summary level: "
        f"{Summary.objects.filter(session=session).aggregate(v=Max('level'))['v'] or 0}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", action="store_true", help="one fact per turn, turn time ratio")
    parser.add_argument("--quick", action="store_true", help="--scale over 600 turns, not 3,000")
    options = parser.parse_args()
    if options.scale:
        scale(600 if options.quick else 3_000)
    else:
        fidelity()


if __name__ == "__main__":
    main()
