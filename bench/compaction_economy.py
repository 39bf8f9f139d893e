"""Is compaction economical? (issue: compaction engine)

Drives a scripted 1,000-turn conversation through the real chat turn (services -> Celery task,
run in-process -> context pipeline -> gateway -> litellm -> a local fake OpenAI server) for one
bot with a 32k window, summariser = the same fake model. Prints, from one run:

- summariser calls vs the hysteresis bound: tokens added / (soft - target) span;
- tokens sent to the summariser vs tokens compacted (goal <= 1.1), and the same including fusion
  re-reads of summaries (goal <= 1.15);
- how often a turn had to wait for blocking (hard) compaction.

    .venv/bin/python bench/compaction_economy.py   # DATABASE_URL defaults to .../chat_bench
"""

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _django import fake_bot, setup  # noqa: E402

setup(fake_key=True)

from django.contrib.auth import get_user_model  # noqa: E402

from bots.models import Bot, ChatSession  # noqa: E402
from chat_platform.llm.tokens import count_message_tokens  # noqa: E402
from compaction.engine import SUMMARY_INSTRUCTIONS  # noqa: E402
from compaction.models import CompactionEvent  # noqa: E402
from compaction.pipeline import bot_budget  # noqa: E402
from tests.fakeopenai import FakeOpenAI, Reply  # noqa: E402
from turns.services.send import session_message_send  # noqa: E402
from turns.services.session import session_create  # noqa: E402

TURNS = 1_000
MODEL = "openai/fake-model"
WORDS = str.split(
    "we agreed to ship the invoice service on Tuesday after Alice reviews ticket #4471 and "
    "the budget of 12,500 EUR stays fixed while Bob migrates the database to eu-west-1 next "
    "week because latency matters more than cost for the Berlin customers this quarter"
)


def summary_reply(body: dict) -> Reply:
    """A summariser that keeps roughly one word in eight of the transcript, with its facts."""
    transcript = body["messages"][-1]["content"]
    words = [w for w in transcript.split() if not w.startswith("[")]
    kept = [w for i, w in enumerate(words) if i % 8 == 0 or any(c.isdigit() for c in w)]
    return Reply(text="Summary: " + " ".join(kept[: max(12, len(words) // 6)]))


def main() -> None:
    rng = random.Random(7)
    summariser_inputs: list[int] = []
    fusion_inputs: list[int] = []

    def responder(body: dict) -> Reply:
        if body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS:
            sent = sum(count_message_tokens(m["content"], model=MODEL) for m in body["messages"])
            fusing = "[Summary of messages" in body["messages"][-1]["content"]
            (fusion_inputs if fusing else summariser_inputs).append(sent)
            return summary_reply(body)
        return Reply(text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 160))))

    user, _ = get_user_model().objects.get_or_create(username="bench-economy")
    Bot.objects.filter(owner=user).delete()
    with FakeOpenAI(responder=responder) as fake:
        bot = fake_bot(
            user,
            fake,
            name="economy",
            model=MODEL,
            context_window=32_000,
            max_output_tokens=1_000,
            system_prompt="You are a project assistant.",
        )
        session = session_create(user=user, bot_id=bot.pk)
        added = 0
        for turn in range(TURNS):
            content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
            result = session_message_send(user=user, session_id=session.pk, content=content)
            reply = result.assistant_message
            reply.refresh_from_db()
            if reply.status != "complete":
                raise SystemExit(f"turn {turn} did not complete: {reply.error_message}")
            added += result.user_message.token_count + reply.token_count

    budget = bot_budget(bot)
    events = CompactionEvent.objects.filter(session=session)
    compacted = events.filter(outcome="compacted")
    calls = len(summariser_inputs) + len(fusion_inputs)
    compacted_tokens = sum(e.source_tokens for e in compacted if e.trigger != "fusion")
    fused_tokens = sum(e.source_tokens for e in compacted if e.trigger == "fusion")
    fusions = compacted.filter(trigger="fusion").count()
    span = budget.soft - budget.target
    bound = (added - budget.soft) / span
    hard = events.filter(trigger__in=["hard", "fallback"]).count()
    session = ChatSession.objects.get(pk=session.pk)
    print(
        f"turns: {TURNS}, tokens added: {added:,}, budget B={budget.budget:,} "
        f"S={budget.soft:,} T={budget.target:,} H={budget.hard:,}"
    )
    print(
        f"summariser calls: {calls} = {len(summariser_inputs)} compactions + "
        f"{len(fusion_inputs)} fusions ({compacted.count() - fusions} + {fusions} succeeded, "
        f"{events.exclude(outcome='compacted').count()} other events); "
        f"hysteresis bound (added - S) / (S - T) = {bound:.1f}"
    )
    sent = sum(summariser_inputs)
    print(
        f"compaction: sent to the summariser {sent:,} tokens for {compacted_tokens:,} "
        f"compacted -> ratio {sent / max(1, compacted_tokens):.2f}  (goal <= 1.1)"
    )
    sent_all = sent + sum(fusion_inputs)
    fusion_sent = sum(fusion_inputs)
    print(
        f"with fusion: {fusions} fusions re-read {fusion_sent:,} tokens for {fused_tokens:,} "
        f"summary tokens fused; summariser tokens per compacted token, fusion included: "
        f"{sent_all:,} / {compacted_tokens + fused_tokens:,} = "
        f"{sent_all / max(1, compacted_tokens + fused_tokens):.2f}  (goal <= 1.15; before 1.34)"
    )
    print(
        f"  per token of history compacted once (fusion re-reads as pure overhead): "
        f"{sent_all / max(1, compacted_tokens):.2f}"
    )
    print(f"turns that waited for blocking compaction: {hard} of {TURNS} ({hard / TURNS:.1%})")


if __name__ == "__main__":
    main()
