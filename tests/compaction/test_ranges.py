"""docs/compaction.md "Range": which messages one compaction pass takes (pure, no database)."""

from __future__ import annotations

import pytest

from compaction.ranges import RangeRow, range_select, range_tokens

EVERYTHING = 10**12


def row(
    row_id: int,
    tokens: int = 100,
    role: str = "user",
    status: str = "complete",
    *,
    pinned: bool = False,
    call: str | None = None,
    calls: tuple[str, ...] = (),
) -> RangeRow:
    # seq == id keeps the tables readable.
    return RangeRow(
        id=row_id,
        seq=row_id,
        tokens=tokens,
        role=role,
        status=status,
        pinned=pinned,
        tool_call_id=call,
        tool_call_ids=calls,
    )


def call(row_id: int, tokens: int = 100, *ids: str, **kwargs) -> RangeRow:
    return row(row_id, tokens, "assistant", calls=ids or (f"c{row_id}",), **kwargs)


def result(
    row_id: int, call_id: str, tokens: int = 100, status: str = "complete", **kw
) -> RangeRow:
    return row(row_id, tokens, "tool", status, call=call_id, **kw)


def select(rows, *, turn=None, free, min_tokens=0, max_tokens=None) -> list[int]:
    chosen = range_select(
        rows_oldest_first=rows,
        current_turn_seq=turn,
        tokens_to_free=free,
        min_tokens=min_tokens,
        max_tokens=max_tokens,
    )
    assert chosen == sorted(chosen, key=lambda r: r.seq)
    assert all(isinstance(r, RangeRow) for r in chosen)
    return [r.id for r in chosen]


THREE = [row(1), row(2, role="assistant"), row(3)]


# --- REFERENCE worked numbers ----------------------------------------------------------------


def test_reference_costs_100_100_100_target_150_takes_the_oldest_two() -> None:
    pressure, target = 300, 150
    assert select(THREE, free=pressure - target) == [1, 2]


def test_reference_with_a_current_turn_after_them() -> None:
    rows = [*THREE, row(4), row(5, role="assistant")]
    assert select(rows, turn=4, free=150) == [1, 2]


def test_reference_cut_never_leaves_a_tool_result_without_its_call() -> None:
    rows = [row(1), call(2), result(3, "c2"), row(4)]
    assert select(rows, free=150) == [1, 2, 3]


def test_reference_would_eat_the_current_turn_takes_nothing() -> None:
    rows = [row(1), row(2, role="assistant"), row(3)]
    assert select(rows, turn=1, free=150) == []


# --- how much is taken -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "expected"),
    [
        (-5, []),
        (0, []),
        (1, [1]),
        (100, [1]),
        (101, [1, 2]),
        (200, [1, 2]),
        (201, [1, 2, 3]),
        (300, [1, 2, 3]),
        (EVERYTHING, [1, 2, 3]),  # takes what there is, short of the target
    ],
)
def test_takes_the_oldest_rows_until_enough_is_freed(free: int, expected: list[int]) -> None:
    assert select(THREE, free=free) == expected


def test_tokens_to_free_not_positive_is_empty_even_with_min_zero() -> None:
    assert select(THREE, free=0, min_tokens=0) == []
    assert select(THREE, free=-1, min_tokens=0, max_tokens=None) == []


def test_empty_input() -> None:
    assert select([], free=EVERYTHING) == []
    assert select([], turn=5, free=EVERYTHING) == []


def test_uneven_costs() -> None:
    rows = [row(1, 10), row(2, 500), row(3, 40)]
    assert select(rows, free=10) == [1]
    assert select(rows, free=11) == [1, 2]
    assert select(rows, free=510) == [1, 2]
    assert select(rows, free=511) == [1, 2, 3]


def test_zero_token_rows_are_taken_along() -> None:
    rows = [row(1, 0), row(2, 100), row(3, 0), row(4, 100)]
    assert select(rows, free=100) == [1, 2]
    assert select(rows, free=101) == [1, 2, 3, 4]


# --- the current turn --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        (None, [1, 2, 3, 4, 5]),
        (6, [1, 2, 3, 4, 5]),
        (5, [1, 2, 3, 4]),
        (4, [1, 2, 3]),
        (2, [1]),
        (1, []),
        (0, []),
    ],
)
def test_current_turn_is_never_taken(turn: int | None, expected: list[int]) -> None:
    rows = [row(i, role="user" if i % 2 else "assistant") for i in range(1, 6)]
    assert select(rows, turn=turn, free=EVERYTHING) == expected


def test_current_turn_boundary_between_seqs() -> None:
    rows = [RangeRow(id=10, seq=3, tokens=100, role="user", status="complete")]
    rows.append(RangeRow(id=11, seq=7, tokens=100, role="assistant", status="complete"))
    assert [
        r.id
        for r in range_select(
            rows_oldest_first=rows, current_turn_seq=5, tokens_to_free=EVERYTHING, min_tokens=0
        )
    ] == [10]


def test_manual_compact_takes_everything_before_the_current_turn() -> None:
    rows = [
        row(1),
        row(2, pinned=True),
        call(3, 50),
        result(4, "c3", 300),
        row(5, status="interrupted"),
        row(6, role="assistant"),
        row(7),  # the current turn
        row(8, role="assistant", status="streaming"),
    ]
    assert select(rows, turn=7, free=EVERYTHING, min_tokens=0) == [1, 3, 4, 6]


# --- pinned and not-complete rows are skipped, the scan goes on -------------------------------


@pytest.mark.parametrize(
    ("skipped", "expected"),
    [
        (row(1, pinned=True), [2, 3]),
        (row(1, status="interrupted"), [2, 3]),
        (row(1, status="failed"), [2, 3]),
        (row(1, status="pending"), [2, 3]),
        (row(1, status="streaming"), [2, 3]),
        (row(1, status="complete", pinned=True), [2, 3]),
    ],
)
def test_ineligible_rows_are_skipped_not_stopping(skipped: RangeRow, expected: list[int]) -> None:
    rows = [skipped, row(2), row(3), row(4)]
    assert select(rows, free=150) == expected


def test_pinned_in_the_middle_stays_and_does_not_count() -> None:
    rows = [row(1), row(2, 1000, pinned=True), row(3), row(4)]
    assert select(rows, free=150) == [1, 3]


def test_only_ineligible_rows_gives_nothing() -> None:
    rows = [row(1, pinned=True), row(2, status="failed"), row(3, status="pending")]
    assert select(rows, free=EVERYTHING) == []


# --- tool pairs --------------------------------------------------------------------------------


def test_selection_ending_on_a_call_extends_to_its_results() -> None:
    rows = [row(1), call(2, 50), result(3, "c2", 200), row(4)]
    assert select(rows, free=120) == [1, 2, 3]
    assert (
        range_tokens(
            range_select(
                rows_oldest_first=rows, current_turn_seq=None, tokens_to_free=120, min_tokens=0
            )
        )
        == 350
    )


def test_extension_takes_every_result_of_a_multi_call() -> None:
    rows = [row(1), call(2, 50, "a", "b"), result(3, "a"), result(4, "b"), row(5)]
    assert select(rows, free=120) == [1, 2, 3, 4]


def test_results_out_of_order_and_not_adjacent() -> None:
    rows = [call(1, 50, "a", "b"), result(2, "b", 10), row(3, 5), result(4, "a", 10), row(5)]
    # the unit is 1, 2, 4 (70 tokens); row 3 is its own, later unit
    assert select(rows, free=70) == [1, 2, 4]
    assert select(rows, free=71) == [1, 2, 3, 4]


def test_a_call_id_used_again_in_a_later_turn_pairs_with_its_own_results() -> None:
    """Ids are the provider's: ``builtin/recall`` gave the same search the same id in two turns,
    and llama.cpp-style servers number calls ``call_0`` in every response. A call takes only the
    results before the next call of the same id: the first turn's unit took the second turn's
    result too, leaving its call without one in every later request (a provider's 400)."""
    rows = [
        row(1),
        call(2, 50, "x"),
        result(3, "x", 50),
        row(4, role="assistant"),
        row(5),
        call(6, 50, "x"),
        result(7, "x", 50),
        row(8, role="assistant"),
        row(9),
    ]
    assert select(rows, turn=9, free=300) == [1, 2, 3, 4]
    assert select(rows, turn=9, free=301) == [1, 2, 3, 4, 5]
    assert select(rows, turn=9, free=EVERYTHING) == [1, 2, 3, 4, 5, 6, 7, 8]
    # the later call's result is its own, never the earlier call's
    assert select(rows[:2] + rows[4:], turn=9, free=EVERYTHING) == [1, 5, 6, 7, 8]


def test_consecutive_tool_rounds_are_separate_units() -> None:
    rows = [row(1), call(2, 50), result(3, "c2", 50), call(4, 50), result(5, "c4", 50), row(6)]
    assert select(rows, free=200) == [1, 2, 3]
    assert select(rows, free=201) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "bad_result",
    [
        result(3, "c2", status="pending"),
        result(3, "c2", status="streaming"),
        result(3, "c2", status="interrupted"),
        result(3, "c2", status="failed"),
        result(3, "c2", pinned=True),
    ],
)
def test_call_with_an_ineligible_result_is_cut_back(bad_result: RangeRow) -> None:
    rows = [row(1), call(2, 50), bad_result]
    assert select(rows, free=120) == [1]


def test_call_whose_result_is_in_the_current_turn_is_cut_back() -> None:
    rows = [row(1), call(2, 50), result(3, "c2"), row(4)]
    assert select(rows, turn=3, free=120) == [1]


def test_call_without_a_stored_result_is_cut_back() -> None:
    rows = [row(1), call(2, 50, "a", "b"), result(3, "a")]
    assert select(rows, free=120) == [1]
    assert select([row(1), call(2, 50)], free=120) == [1]


def test_cut_back_unit_is_skipped_and_older_eligible_rows_after_it_are_taken() -> None:
    # a stuck unit stays verbatim (call and result together); the scan goes on past it
    rows = [row(1), call(2, 50), result(3, "c2", status="interrupted"), row(4), row(5)]
    assert select(rows, free=150) == [1, 4]


def test_ineligible_call_leaves_its_results_too() -> None:
    for bad_call in (call(1, pinned=True), call(1, status="interrupted")):
        rows = [bad_call, result(2, "c1"), row(3), row(4)]
        assert select(rows, free=150) == [3, 4]


def test_tool_result_without_its_call_is_never_taken() -> None:
    # its call was compacted earlier or never stored
    rows = [result(1, "gone"), row(2), row(3)]
    assert select(rows, free=150) == [2, 3]
    assert select([result(1, "gone")], free=EVERYTHING) == []


def test_tool_result_without_a_call_id_is_never_taken() -> None:
    rows = [call(1, 50), row(2, 100, "tool"), row(3)]
    assert select(rows, free=EVERYTHING) == [3]


def test_result_before_its_call_does_not_answer_it() -> None:
    rows = [result(1, "x"), call(2, 50, "x"), row(3)]
    assert select(rows, free=EVERYTHING) == [3]


def test_duplicate_call_ids_count_once() -> None:
    rows = [row(1), call(2, 50, "a", "a"), result(3, "a", 50)]
    assert select(rows, free=150) == [1, 2, 3]


# --- max_tokens (summariser input cap) -----------------------------------------------------


@pytest.mark.parametrize(
    ("max_tokens", "expected"),
    [
        (None, [1, 2, 3, 4, 5]),
        (1000, [1, 2, 3, 4, 5]),
        (500, [1, 2, 3, 4, 5]),
        (499, [1, 2, 3, 4]),
        (250, [1, 2]),
        (100, [1]),
        (99, [1]),  # the first unit, over the cap on its own, is taken alone (its text is cut)
        (0, []),
    ],
)
def test_max_tokens_caps_the_selection(max_tokens: int | None, expected: list[int]) -> None:
    rows = [row(i) for i in range(1, 6)]
    assert select(rows, free=EVERYTHING, max_tokens=max_tokens) == expected


def test_max_tokens_cuts_back_a_unit_that_does_not_fit() -> None:
    rows = [row(1), call(2), result(3, "c2"), row(4)]
    assert select(rows, free=150, max_tokens=250) == [1]
    assert select(rows, free=150, max_tokens=300) == [1, 2, 3]


def test_max_tokens_keeps_a_prefix_and_never_jumps_to_a_smaller_later_row() -> None:
    rows = [row(1, 100), row(2, 500), row(3, 10)]
    assert select(rows, free=EVERYTHING, max_tokens=200) == [1]


def test_max_tokens_below_the_target_stops_at_the_cap() -> None:
    assert select(THREE, free=300, max_tokens=200) == [1, 2]


def test_max_tokens_and_min_tokens_together() -> None:
    rows = [row(i) for i in range(1, 6)]
    assert select(rows, free=EVERYTHING, min_tokens=256, max_tokens=250) == []
    assert select(rows, free=EVERYTHING, min_tokens=256, max_tokens=300) == [1, 2, 3]


# --- min_tokens ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "free", "expected"),
    [
        ([row(1), row(2)], 150, []),  # 200 < 256 (the automatic-path default)
        # 150 wanted: the span goes on to the minimum, which the history holds (until
        # 2026-12-07 it stopped at 200 and the pass was a noop, pressure left over its target)
        ([row(1, 200), row(2, 100)], 150, [1, 2]),
        ([row(1, 100), row(2, 100), row(3, 100), row(4, 100)], 150, [1, 2, 3]),
        ([row(1, 200), row(2, 56)], EVERYTHING, [1, 2]),  # exactly 256
        ([row(1, 200), row(2, 55)], EVERYTHING, []),  # 255
        ([row(1), row(2), row(3)], 250, [1, 2, 3]),  # 300
        ([row(1, 27)], EVERYTHING, []),  # MEMOH-100: a 27-token span
    ],
)
def test_min_tokens_default_256(rows: list[RangeRow], free: int, expected: list[int]) -> None:
    chosen = range_select(rows_oldest_first=rows, current_turn_seq=None, tokens_to_free=free)
    assert [r.id for r in chosen] == expected


def test_min_tokens_zero_takes_a_tiny_span() -> None:
    assert select([row(1, 27)], free=EVERYTHING, min_tokens=0) == [1]


def test_min_tokens_counts_the_pair_extension() -> None:
    rows = [row(1, 100), call(2, 50), result(3, "c2", 106)]
    assert select(rows, free=120, min_tokens=256) == [1, 2, 3]
    assert select(rows, free=120, min_tokens=257) == []


# --- range_tokens and validation ---------------------------------------------------------------


def test_range_tokens() -> None:
    assert range_tokens([]) == 0
    assert range_tokens(THREE) == 300
    assert range_tokens(iter([row(1, 7), row(2, 0), row(3, 35)])) == 42


def test_rows_must_be_oldest_first() -> None:
    with pytest.raises(ValueError, match="oldest first"):
        select([row(2), row(1)], free=100)
    with pytest.raises(ValueError, match="oldest first"):
        select([row(1), row(1)], free=100)


def test_bad_tokens_are_rejected() -> None:
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        row(1, -1)
    with pytest.raises(TypeError, match="tokens must be an int"):
        row(1, True)  # type: ignore[arg-type]


@pytest.mark.parametrize(("min_tokens", "max_tokens"), [(-1, None), (0, -1)])
def test_bad_limits_are_rejected(min_tokens: int, max_tokens: int | None) -> None:
    with pytest.raises(ValueError):
        select(THREE, free=100, min_tokens=min_tokens, max_tokens=max_tokens)


def test_rows_are_frozen_and_slotted() -> None:
    r = row(1)
    with pytest.raises(AttributeError):
        r.tokens = 5  # type: ignore[misc]
    assert not hasattr(r, "__dict__")


# --- inside a reply: its earlier tool rounds (open_span) --------------------------------------

# Old history 1-2, the user's message 3 (the current turn), the reply's rounds 4-5, 6-7, 8-9.
REPLY_ROUNDS = [
    row(1),
    row(2, role="assistant"),
    row(3),
    call(4, 100, "s1"),
    result(5, "s1", 300),
    call(6, 100, "s2"),
    result(7, "s2", 300),
    call(8, 100, "s3"),
    result(9, "s3", 300),
]


def _inside(free: int, span: tuple[int, int]) -> list[int]:
    chosen = range_select(
        rows_oldest_first=REPLY_ROUNDS,
        current_turn_seq=3,
        tokens_to_free=free,
        min_tokens=0,
        open_span=span,
    )
    return [r.id for r in chosen]


@pytest.mark.parametrize(
    ("free", "expected"),
    [
        (200, [1, 2]),  # old history first
        (300, [1, 2, 4, 5]),  # then the oldest round, whole
        (10_000, [1, 2, 4, 5, 6, 7]),  # never the user's message, never past the span
    ],
)
def test_inside_a_reply_the_open_span_is_taken_after_older_history(free, expected) -> None:
    assert _inside(free, (4, 7)) == expected


def test_a_span_that_cuts_a_round_leaves_that_round_whole() -> None:
    # The span ends on round 2's call: its result lies outside, so the round stays.
    assert _inside(10_000, (4, 6)) == [1, 2, 4, 5]
