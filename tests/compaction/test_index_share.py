"""The memory index takes at most MEMORY_INDEX_MAX_PERCENT of B (issue 16, item 3).

In the tight demo bot the index took 316 of 1,164 context tokens (18 % of a 1,792-token B) while
history had 638. Search reaches every record the index leaves out, so the index keeps only its
newest lines within its share, and always the newest one.
"""

import pytest

from compaction.measure import index_block_tokens, index_within_share
from compaction.pipeline import context_measure
from memory.models import MemoryRecord
from memory.queries import IndexLine, memory_index_lines
from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _lines(*tokens: int) -> list[IndexLine]:
    return [
        IndexLine(name=f"r{i}", text=f"- r{i} (info): x", tokens=t) for i, t in enumerate(tokens)
    ]


def test_newest_lines_within_the_share_block_included(settings):
    settings.MEMORY_INDEX_MAX_PERCENT = 10
    # share 100 of B=1000: block 40 + 30 + 30 = 100 fits; the next line would pass it.
    kept = index_within_share(_lines(30, 30, 5, 30), budget=1000, block_tokens=40)
    assert [line.name for line in kept] == ["r0", "r1"]


def test_the_newest_line_is_kept_even_over_the_share(settings):
    settings.MEMORY_INDEX_MAX_PERCENT = 10
    kept = index_within_share(_lines(500, 10), budget=1000, block_tokens=40)
    assert [line.name for line in kept] == ["r0"]


def test_a_larger_share_keeps_more(settings):
    settings.MEMORY_INDEX_MAX_PERCENT = 50
    kept = index_within_share(_lines(30, 30, 5, 30), budget=1000, block_tokens=40)
    assert [line.name for line in kept] == ["r0", "r1", "r2", "r3"]


def test_a_tight_bot_measures_the_capped_index(settings, owner):
    settings.MEMORY_INDEX_MAX_PERCENT = 10
    bot = BotFactory(owner=owner, context_window=2048, max_output_tokens=256, memory_index_size=8)
    session = SessionFactory(user=owner, bot=bot)
    for i in range(8):
        MemoryRecord.objects.create(
            session=session,
            name=f"note-{i}",
            kind="info",
            description=f"A note about the {i}th trip to the coast with the whole family",
            body="text",
        )
    measure = context_measure(session=session)
    share = measure.budget.budget * 10 // 100
    used = index_block_tokens(bot.model) + sum(line.tokens for line in measure.index_lines)
    assert 1 <= len(measure.index_lines) < 8
    assert used <= share
    every = memory_index_lines(session=session, limit=8)
    assert [line.name for line in measure.index_lines] == [
        line.name for line in every[: len(measure.index_lines)]
    ]
    assert used + every[len(measure.index_lines)].tokens > share  # the next one would not fit
    # newest first: the last written note leads
    assert measure.index_lines[0].name == "note-7"
