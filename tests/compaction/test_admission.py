"""docs/compaction.md admission, decided from token counts only (pure, no database)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from compaction.admission import (
    Admission,
    Entry,
    HistoryRow,
    HistoryTotals,
    PinnedEntry,
    admission_decide,
)


def row(
    row_id: int,
    tokens: int,
    role: str = "user",
    *,
    call: str | None = None,
    calls: tuple[str, ...] = (),
) -> HistoryRow:
    # seq == id keeps the tables readable; ordering is by seq.
    return HistoryRow(
        id=row_id, seq=row_id, tokens=tokens, role=role, tool_call_id=call, tool_call_ids=calls
    )


def decide(**overrides: Any) -> Admission:
    kwargs: dict[str, Any] = {
        "budget": 1_000,
        "system_tokens": 0,
        "new_message": None,
        "pinned": (),
        "summaries": (),
        "index_line_tokens": (),
        "history_newest_first": (),
    }
    kwargs.update(overrides)
    return admission_decide(**kwargs)


class Tap(Iterator[HistoryRow]):
    """A lazy row source (like a chunked DB cursor) that counts how many rows were pulled."""

    def __init__(self, rows: Iterable[HistoryRow]) -> None:
        self._rows = iter(rows)
        self.pulled = 0

    def __next__(self) -> HistoryRow:
        item = next(self._rows)
        self.pulled += 1
        return item


def admission(
    decision: str,
    *,
    budget: int,
    estimated: int,
    selected: int,
    ids: list[int],
    kept: int = 0,
    dropped: int,
    exhausted: bool,
) -> Admission:
    return Admission(
        decision=decision,  # type: ignore[arg-type]
        budget_tokens=budget,
        estimated_tokens=estimated,
        selected_tokens=selected,
        admitted_history_ids=ids,
        kept_index_lines=kept,
        dropped_messages=dropped,
        exhausted=exhausted,
    )


# --- REFERENCE.md worked examples ---------------------------------------------------------------

# [1000, pinned 50, 1000, 100(new)], budget 300 -> pinned + new only
REF1_PINNED = [PinnedEntry(id=2, seq=2, tokens=50)]
REF1_NEW = Entry(id=4, tokens=100)


@pytest.mark.parametrize(
    "history",
    [
        [row(3, 1000), row(2, 50), row(1, 1000)],  # pinned row present in the history list
        [row(3, 1000), row(1, 1000)],  # caller already excluded it
    ],
)
def test_reference_pinned_and_new_only(history: list[HistoryRow]) -> None:
    result = decide(
        budget=300, new_message=REF1_NEW, pinned=REF1_PINNED, history_newest_first=history
    )
    assert result == admission(
        "trim", budget=300, estimated=2150, selected=150, ids=[], dropped=2, exhausted=False
    )


def test_reference_pinned_and_new_only_lazy() -> None:
    tap = Tap([row(3, 1000), row(2, 50), row(1, 1000)])
    result = decide(budget=300, new_message=REF1_NEW, pinned=REF1_PINNED, history_newest_first=tap)
    # stops at the first misfit: the pinned row and the oldest are never read
    assert tap.pulled == 1
    assert result == admission(
        "trim", budget=300, estimated=1150, selected=150, ids=[], dropped=1, exhausted=False
    )


def test_reference_pinned_and_new_only_lazy_with_totals() -> None:
    tap = Tap([row(3, 1000), row(2, 50), row(1, 1000)])
    result = decide(
        budget=300,
        new_message=REF1_NEW,
        pinned=REF1_PINNED,
        history_newest_first=tap,
        history_totals=HistoryTotals(count=2, tokens=2000),
    )
    assert tap.pulled == 1
    assert result == admission(
        "trim", budget=300, estimated=2150, selected=150, ids=[], dropped=2, exhausted=False
    )


def test_reference_stop_at_first_misfit() -> None:
    # [10, 1000, 100(new)], budget 200 -> the new one only, although the 10 alone would fit
    result = decide(
        budget=200,
        new_message=Entry(id=3, tokens=100),
        history_newest_first=[row(2, 1000), row(1, 10)],
    )
    assert result == admission(
        "trim", budget=200, estimated=1110, selected=100, ids=[], dropped=2, exhausted=False
    )


def test_reference_context_too_large() -> None:
    # pinned 80 + new 80, budget 100 -> reject
    tap = Tap([row(2, 30)])
    result = decide(
        budget=100,
        new_message=Entry(id=3, tokens=80),
        pinned=[PinnedEntry(id=1, seq=1, tokens=80)],
        history_newest_first=tap,
    )
    assert tap.pulled == 0
    assert result == admission(
        "reject", budget=100, estimated=160, selected=0, ids=[], dropped=0, exhausted=False
    )


def test_reject_with_sequence_counts_all_candidates() -> None:
    result = decide(
        budget=100,
        new_message=Entry(id=3, tokens=80),
        pinned=[PinnedEntry(id=1, seq=1, tokens=80)],
        index_line_tokens=[7, 3],
        index_block_tokens=4,
        history_newest_first=[row(2, 30), row(1, 80)],
    )
    assert result == admission(
        "reject", budget=100, estimated=204, selected=0, ids=[], dropped=1, exhausted=False
    )


def test_reject_with_totals() -> None:
    result = decide(
        budget=100,
        system_tokens=101,
        history_newest_first=Tap([]),
        history_totals=HistoryTotals(count=5, tokens=500),
    )
    assert result == admission(
        "reject", budget=100, estimated=601, selected=0, ids=[], dropped=5, exhausted=False
    )


# --- the fixed part: system, new, pinned, summaries ---------------------------------------------


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        # 100 + 50 + 200 + 300 = 650 fits exactly; the history row does not
        (
            650,
            admission(
                "trim", budget=650, estimated=651, selected=650, ids=[], dropped=1, exhausted=False
            ),
        ),
        (
            651,
            admission(
                "admit", budget=651, estimated=651, selected=651, ids=[1], dropped=0, exhausted=True
            ),
        ),
        # one token short: summaries push the fixed part over B
        (
            649,
            admission(
                "reject", budget=649, estimated=651, selected=0, ids=[], dropped=1, exhausted=False
            ),
        ),
    ],
)
def test_summaries_are_counted_in_the_fixed_part(budget: int, expected: Admission) -> None:
    result = decide(
        budget=budget,
        system_tokens=100,
        new_message=Entry(id=2, tokens=50),
        summaries=[Entry(id=901, tokens=200), Entry(id=902, tokens=300)],
        history_newest_first=[row(1, 1)],
    )
    assert result == expected


def test_system_prompt_alone_over_budget_rejects() -> None:
    assert decide(budget=10, system_tokens=11) == admission(
        "reject", budget=10, estimated=11, selected=0, ids=[], dropped=0, exhausted=False
    )


def test_new_message_is_never_counted_twice() -> None:
    # the caller fetched "the latest rows" including the new user message itself
    result = decide(
        budget=1000,
        new_message=Entry(id=3, tokens=100),
        history_newest_first=[row(3, 100), row(2, 20), row(1, 30)],
    )
    assert result == admission(
        "admit", budget=1000, estimated=150, selected=150, ids=[1, 2], dropped=0, exhausted=True
    )


# --- admit vs trim, exact boundaries -------------------------------------------------------------

FULL = {
    "system_tokens": 100,
    "new_message": Entry(id=4, tokens=10),
    "pinned": [PinnedEntry(id=50, seq=0, tokens=20)],
    "summaries": [Entry(id=900, tokens=30)],
    "index_line_tokens": [5, 5],
}
FULL_HISTORY = [row(3, 40), row(2, 30), row(1, 20)]


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (
            1000,
            admission(
                "admit",
                budget=1000,
                estimated=260,
                selected=260,
                ids=[1, 2, 3],
                kept=2,
                dropped=0,
                exhausted=True,
            ),
        ),
        (
            260,
            admission(
                "admit",
                budget=260,
                estimated=260,
                selected=260,
                ids=[1, 2, 3],
                kept=2,
                dropped=0,
                exhausted=True,
            ),
        ),
        (
            259,
            admission(
                "trim",
                budget=259,
                estimated=260,
                selected=240,
                ids=[2, 3],
                kept=2,
                dropped=1,
                exhausted=False,
            ),
        ),
        (
            210,
            admission(
                "trim",
                budget=210,
                estimated=260,
                selected=210,
                ids=[3],
                kept=2,
                dropped=2,
                exhausted=False,
            ),
        ),
        # the index is served before history: history gets nothing
        (
            170,
            admission(
                "trim",
                budget=170,
                estimated=260,
                selected=170,
                ids=[],
                kept=2,
                dropped=3,
                exhausted=False,
            ),
        ),
        # the index is shortened newest-first: the older line goes
        (
            169,
            admission(
                "trim",
                budget=169,
                estimated=260,
                selected=165,
                ids=[],
                kept=1,
                dropped=3,
                exhausted=False,
            ),
        ),
        (
            164,
            admission(
                "trim",
                budget=164,
                estimated=260,
                selected=160,
                ids=[],
                kept=0,
                dropped=3,
                exhausted=False,
            ),
        ),
        (
            160,
            admission(
                "trim",
                budget=160,
                estimated=260,
                selected=160,
                ids=[],
                kept=0,
                dropped=3,
                exhausted=False,
            ),
        ),
        (
            159,
            admission(
                "reject", budget=159, estimated=260, selected=0, ids=[], dropped=3, exhausted=False
            ),
        ),
    ],
)
def test_admit_and_trim_boundaries(budget: int, expected: Admission) -> None:
    assert decide(budget=budget, history_newest_first=FULL_HISTORY, **FULL) == expected


# --- tool results never start the run without their call ----------------------------------------

# user 40, assistant calling c1 and c2 (50), result c1 (100), result c2 (100), assistant 20, new 10
U1 = row(1, 40)
A2 = row(2, 50, "assistant", calls=("c1", "c2"))
T3 = row(3, 100, "tool", call="c1")
T4 = row(4, 100, "tool", call="c2")
A5 = row(5, 20, "assistant")
TOOL_HISTORY = [A5, T4, T3, A2, U1]
TOOL_NEW = Entry(id=6, tokens=10)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        # A5, T4, T3 fit, A2 does not: T3 and T4 would start the run orphaned -> dropped
        (
            279,
            admission(
                "trim", budget=279, estimated=320, selected=30, ids=[5], dropped=4, exhausted=False
            ),
        ),
        # A5 and T4 fit, T3 does not: T4 is orphaned -> dropped
        (
            130,
            admission(
                "trim", budget=130, estimated=320, selected=30, ids=[5], dropped=4, exhausted=False
            ),
        ),
        # the misfit is the tool result itself
        (
            129,
            admission(
                "trim", budget=129, estimated=320, selected=30, ids=[5], dropped=4, exhausted=False
            ),
        ),
        # the call fits as well: the whole exchange goes, only the user message is cut
        (
            280,
            admission(
                "trim",
                budget=280,
                estimated=320,
                selected=280,
                ids=[2, 3, 4, 5],
                dropped=1,
                exhausted=False,
            ),
        ),
        (
            320,
            admission(
                "admit",
                budget=320,
                estimated=320,
                selected=320,
                ids=[1, 2, 3, 4, 5],
                dropped=0,
                exhausted=True,
            ),
        ),
        # nothing but the new message
        (
            29,
            admission(
                "trim", budget=29, estimated=320, selected=10, ids=[], dropped=5, exhausted=False
            ),
        ),
    ],
)
def test_orphan_tool_results_are_dropped(budget: int, expected: Admission) -> None:
    result = decide(budget=budget, new_message=TOOL_NEW, history_newest_first=TOOL_HISTORY)
    assert result == expected


def test_a_result_whose_id_a_later_call_reuses_is_still_an_orphan() -> None:
    """Ids are the provider's and may come again in a later turn (``call_0``): T3 answers A2,
    which is not admitted, whatever A7 calls."""
    a7 = row(7, 20, "assistant", calls=("c1",))
    t8 = row(8, 10, "tool", call="c1")
    a9 = row(9, 20, "assistant")
    result = decide(budget=190, history_newest_first=[a9, t8, a7, T3, A2, U1])
    assert result.admitted_history_ids == [7, 8, 9]


def test_orphan_drop_does_not_reopen_older_rows() -> None:
    # dropping the orphan frees 100 tokens and U1 (40) alone would fit, but it lies behind the
    # misfit A2: contiguity holds
    result = decide(budget=149, history_newest_first=[T3, A2, U1])
    assert result == admission(
        "trim", budget=149, estimated=190, selected=0, ids=[], dropped=3, exhausted=False
    )


def test_bounded_window_cut_inside_a_tool_exchange() -> None:
    # the caller fetched LIMIT 3: the call of T3/T4 lies beyond the window
    tap = Tap([A5, T4, T3])
    result = decide(budget=1000, new_message=TOOL_NEW, history_newest_first=tap)
    assert tap.pulled == 3
    assert result == admission(
        "trim", budget=1000, estimated=230, selected=30, ids=[5], dropped=2, exhausted=True
    )


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        # recall re-invocation: no new message, the newest row is a tool result
        (
            100,
            admission(
                "trim", budget=100, estimated=190, selected=0, ids=[], dropped=3, exhausted=False
            ),
        ),
        (
            150,
            admission(
                "trim",
                budget=150,
                estimated=190,
                selected=150,
                ids=[2, 3],
                dropped=1,
                exhausted=False,
            ),
        ),
        (
            190,
            admission(
                "admit",
                budget=190,
                estimated=190,
                selected=190,
                ids=[1, 2, 3],
                dropped=0,
                exhausted=True,
            ),
        ),
    ],
)
def test_recall_reinvocation_without_new_message(budget: int, expected: Admission) -> None:
    history = [
        row(3, 100, "tool", call="c9"),
        row(2, 50, "assistant", calls=("c9",)),
        row(1, 40),
    ]
    assert decide(budget=budget, history_newest_first=history) == expected


def test_tool_result_without_call_id_never_starts_the_run() -> None:
    result = decide(budget=1000, history_newest_first=[row(2, 10), row(1, 10, "tool")])
    assert result == admission(
        "trim", budget=1000, estimated=20, selected=10, ids=[2], dropped=1, exhausted=True
    )


def test_a_result_that_starts_the_run_is_dropped_whatever_its_id() -> None:
    # malformed order (call stored after its result): a provider refuses a tool message before
    # its call, and a later call may reuse an earlier one's id (a call_0 each turn): the result
    # that starts the run goes, though a later call has its id
    history = [row(4, 10, "assistant", calls=("c1",)), row(3, 10, "tool", call="c1")]
    assert decide(budget=1000, history_newest_first=history) == admission(
        "trim", budget=1000, estimated=20, selected=10, ids=[4], dropped=1, exhausted=True
    )


def test_tool_results_inside_the_run_are_kept() -> None:
    history = [row(3, 10, "tool", call="c1"), row(2, 10, "assistant", calls=("c1",)), row(1, 10)]
    assert decide(budget=20, history_newest_first=history) == admission(
        "trim", budget=20, estimated=30, selected=20, ids=[2, 3], dropped=1, exhausted=False
    )


# --- memory index --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "lines", "block", "kept", "selected", "estimated", "decision"),
    [
        # newest lines first; stop at the first line that does not fit
        (150, [30, 20, 10], 0, 2, 150, 160, "trim"),
        (160, [30, 20, 10], 0, 3, 160, 160, "admit"),
        (129, [30, 20, 10], 0, 0, 100, 160, "trim"),
        # an older line that would fit is not kept behind a newer one that does not
        (150, [60, 5], 0, 0, 100, 165, "trim"),
        # the block cost is charged once, with the first kept line
        (124, [10, 10], 5, 1, 115, 125, "trim"),
        (125, [10, 10], 5, 2, 125, 125, "admit"),
        (114, [10, 10], 5, 0, 100, 125, "trim"),
        (100, [10, 10], 5, 0, 100, 125, "trim"),
        # no lines: no block
        (100, [], 5, 0, 100, 100, "admit"),
        # zero-token lines always fit
        (100, [0, 0], 0, 2, 100, 100, "admit"),
    ],
)
def test_index_shortened_newest_first(
    budget: int,
    lines: list[int],
    block: int,
    kept: int,
    selected: int,
    estimated: int,
    decision: str,
) -> None:
    result = decide(
        budget=budget,
        system_tokens=90,
        new_message=Entry(id=1, tokens=10),
        index_line_tokens=lines,
        index_block_tokens=block,
    )
    assert result == admission(
        decision,
        budget=budget,
        estimated=estimated,
        selected=selected,
        ids=[],
        kept=kept,
        dropped=0,
        exhausted=True,
    )


def test_index_is_served_before_history() -> None:
    result = decide(budget=100, index_line_tokens=[50], history_newest_first=[row(1, 60)])
    assert result == admission(
        "trim", budget=100, estimated=110, selected=50, ids=[], kept=1, dropped=1, exhausted=False
    )


# --- lazy sources: read only up to the first misfit ----------------------------------------------

TEN_ROWS = [row(i, 10) for i in range(10, 0, -1)]  # ids 10..1, newest first


def test_lazy_source_is_read_only_to_the_first_misfit() -> None:
    tap = Tap(TEN_ROWS)
    result = decide(budget=40, new_message=Entry(id=11, tokens=5), history_newest_first=tap)
    assert tap.pulled == 4  # three admitted + the misfit
    assert next(tap).id == 6  # the rest is untouched
    assert result == admission(
        "trim", budget=40, estimated=45, selected=35, ids=[8, 9, 10], dropped=1, exhausted=False
    )


def test_lazy_source_with_totals_is_exact() -> None:
    tap = Tap(TEN_ROWS)
    result = decide(
        budget=40,
        new_message=Entry(id=11, tokens=5),
        history_newest_first=tap,
        history_totals=HistoryTotals(count=10, tokens=100),
    )
    assert tap.pulled == 4
    assert result == admission(
        "trim", budget=40, estimated=105, selected=35, ids=[8, 9, 10], dropped=7, exhausted=False
    )


def test_generator_source_stops_early() -> None:
    pulled: list[int] = []

    def stream() -> Iterator[HistoryRow]:
        for r in TEN_ROWS:
            pulled.append(r.id)
            yield r

    result = decide(budget=25, history_newest_first=stream())
    assert pulled == [10, 9, 8]
    assert result.admitted_history_ids == [9, 10]
    assert result.exhausted is False


def test_lazy_source_skips_pinned_rows_while_reading() -> None:
    tap = Tap(TEN_ROWS)
    result = decide(
        budget=40,
        new_message=Entry(id=11, tokens=5),
        pinned=[PinnedEntry(id=9, seq=9, tokens=10)],
        history_newest_first=tap,
    )
    assert tap.pulled == 4  # 10, 9 (pinned, skipped), 8, 7 (misfit)
    assert result == admission(
        "trim", budget=40, estimated=45, selected=35, ids=[8, 10], dropped=1, exhausted=False
    )


def test_lazy_source_fully_fitting_is_exhausted() -> None:
    tap = Tap(TEN_ROWS[:3])
    result = decide(budget=1000, history_newest_first=tap)
    assert tap.pulled == 3
    assert result == admission(
        "admit", budget=1000, estimated=30, selected=30, ids=[8, 9, 10], dropped=0, exhausted=True
    )


def test_bounded_window_with_totals_reports_more_history() -> None:
    # the window of 3 fits entirely but the session holds 10: exhausted tells the caller to read on
    result = decide(
        budget=1000,
        history_newest_first=Tap(TEN_ROWS[:3]),
        history_totals=HistoryTotals(count=10, tokens=100),
    )
    assert result == admission(
        "trim", budget=1000, estimated=100, selected=30, ids=[8, 9, 10], dropped=7, exhausted=True
    )


def test_misfit_on_the_last_row_is_not_exhausted() -> None:
    result = decide(budget=25, history_newest_first=Tap(TEN_ROWS[:3]))
    assert result == admission(
        "trim", budget=25, estimated=30, selected=20, ids=[9, 10], dropped=1, exhausted=False
    )


# --- degenerate budgets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "history", "expected"),
    [
        (
            0,
            [],
            admission(
                "admit", budget=0, estimated=0, selected=0, ids=[], dropped=0, exhausted=True
            ),
        ),
        (
            0,
            [row(2, 0), row(1, 1)],
            admission(
                "trim", budget=0, estimated=1, selected=0, ids=[2], dropped=1, exhausted=False
            ),
        ),
        (
            1,
            [],
            admission(
                "reject", budget=0, estimated=1, selected=0, ids=[], dropped=0, exhausted=False
            ),
        ),
    ],
)
def test_zero_budget(system: int, history: list[HistoryRow], expected: Admission) -> None:
    assert decide(budget=0, system_tokens=system, history_newest_first=history) == expected


def test_zero_token_row_behind_a_misfit_is_not_admitted() -> None:
    result = decide(budget=50, history_newest_first=[row(3, 100), row(2, 0)])
    assert result == admission(
        "trim", budget=50, estimated=100, selected=0, ids=[], dropped=2, exhausted=False
    )


# --- log fields ----------------------------------------------------------------------------------


def test_log_fields() -> None:
    result = decide(
        budget=200,
        new_message=Entry(id=3, tokens=100),
        history_newest_first=[
            row(2, 1000),
            row(1, 10),
        ],
    )
    assert result.log_fields() == {
        "budget_tokens": 200,
        "estimated_tokens": 1110,
        "selected_tokens": 100,
        "dropped_messages": 2,
        "decision": "trim",
    }


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"budget": -1}, "budget must be >= 0, got -1"),
        ({"system_tokens": -1}, "system_tokens must be >= 0, got -1"),
        ({"index_block_tokens": -2}, "index_block_tokens must be >= 0, got -2"),
        ({"index_line_tokens": [3, -1]}, "index_line_tokens[] must be >= 0, got -1"),
        (
            {"history_newest_first": [row(1, 10), row(2, 10)]},
            "history_newest_first must be in strictly decreasing seq order: seq 2 follows seq 1",
        ),
        (
            {"history_newest_first": [row(2, 10), row(2, 10)]},
            "history_newest_first must be in strictly decreasing seq order: seq 2 follows seq 2",
        ),
    ],
)
def test_invalid_inputs_raise_value_error(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        decide(**overrides)
    assert str(excinfo.value) == message


# --- totals that lag the rows (a concurrent turn finished between the two reads) -------------


@pytest.mark.parametrize(
    ("history", "totals", "expected"),
    [
        # a row finished after the totals were read: 1 counted, 2 read -> 2 candidates, 20 tokens
        (
            Tap([row(2, 10), row(1, 10)]),
            HistoryTotals(count=1, tokens=100),
            admission(
                "admit",
                budget=1000,
                estimated=100,
                selected=20,
                ids=[1, 2],
                dropped=0,
                exhausted=True,
            ),
        ),
        (
            [row(2, 10), row(1, 10)],
            HistoryTotals(count=5, tokens=15),
            admission(
                "trim",
                budget=1000,
                estimated=20,
                selected=20,
                ids=[1, 2],
                dropped=3,
                exhausted=True,
            ),
        ),
        # stopped early at a misfit: the totals still cover what was read
        (
            Tap([row(3, 600), row(2, 500), row(1, 10)]),
            HistoryTotals(count=1, tokens=600),
            admission(
                "trim",
                budget=1000,
                estimated=1100,
                selected=600,
                ids=[3],
                dropped=1,
                exhausted=False,
            ),
        ),
    ],
)
def test_totals_lagging_the_rows_are_raised_to_what_was_read(
    history: Any, totals: HistoryTotals, expected: Admission
) -> None:
    result = decide(budget=1000, history_newest_first=history, history_totals=totals)
    assert result == expected
    assert result.dropped_messages >= 0
    assert result.selected_tokens <= result.budget_tokens


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Entry(id=1, tokens=-1), "tokens must be >= 0, got -1"),
        (lambda: PinnedEntry(id=1, seq=1, tokens=-1), "tokens must be >= 0, got -1"),
        (lambda: HistoryRow(id=1, seq=1, tokens=-1, role="user"), "tokens must be >= 0, got -1"),
        (lambda: HistoryTotals(count=-1, tokens=0), "count must be >= 0, got -1"),
        (lambda: HistoryTotals(count=0, tokens=-1), "tokens must be >= 0, got -1"),
    ],
)
def test_negative_token_counts_rejected_at_construction(make: Any, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        make()
    assert str(excinfo.value) == message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"budget": 1.5}, "budget must be an int, got float"),
        ({"system_tokens": True}, "system_tokens must be an int, got bool"),
        ({"index_line_tokens": [None]}, "index_line_tokens[] must be an int, got NoneType"),
    ],
)
def test_non_int_counts_raise_type_error(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError) as excinfo:
        decide(**overrides)
    assert str(excinfo.value) == message


def test_entry_with_non_int_tokens_raises_type_error() -> None:
    with pytest.raises(TypeError) as excinfo:
        Entry(id=1, tokens="12")  # type: ignore[arg-type]
    assert str(excinfo.value) == "tokens must be an int, got str"
