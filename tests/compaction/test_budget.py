"""docs/compaction.md budget arithmetic and REFERENCE.md worked numbers (pure, no database)."""

from __future__ import annotations

import pytest

from compaction.budget import Budget, budget_compute, pressure_level

CAP = 1_000_000


def make(
    *,
    context_window: int = 0,
    model_max_input_tokens: int | None = None,
    max_output_tokens: int = 1024,
    compaction_threshold: int = 0,
    compaction_kept_percent: int = 40,
    absolute_cap: int = CAP,
) -> Budget:
    return budget_compute(
        context_window=context_window,
        model_max_input_tokens=model_max_input_tokens,
        max_output_tokens=max_output_tokens,
        compaction_threshold=compaction_threshold,
        compaction_kept_percent=compaction_kept_percent,
        absolute_cap=absolute_cap,
    )


def with_budget(b: int, **kwargs: int) -> Budget:
    """A bot whose window leaves exactly ``b`` after the default 1024-token reserve."""
    return make(context_window=b + 1024, **kwargs)


# --- worked numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b", "threshold", "kept", "soft", "hard", "target", "target_blocking"),
    [
        # B = 200000, zero config
        (200_000, 0, 40, 100_000, 150_000, 80_000, 80_000),
        # threshold 90000 moves only S
        (200_000, 90_000, 40, 90_000, 150_000, 80_000, 80_000),
        # threshold above H is clamped to H
        (200_000, 500_000, 40, 150_000, 150_000, 80_000, 80_000),
        # threshold exactly H, and just under
        (200_000, 150_000, 40, 150_000, 150_000, 80_000, 80_000),
        (200_000, 149_999, 40, 149_999, 150_000, 80_000, 80_000),
        # smallest explicit threshold
        (200_000, 1, 40, 1, 150_000, 80_000, 80_000),
        # kept 55 -> T 110000, blocking target capped at 50 %
        (200_000, 0, 55, 100_000, 150_000, 110_000, 100_000),
        # kept 50 -> T == Ts
        (200_000, 0, 50, 100_000, 150_000, 100_000, 100_000),
        # kept bounds
        (200_000, 0, 1, 100_000, 150_000, 2_000, 2_000),
        (200_000, 0, 99, 100_000, 150_000, 198_000, 100_000),
        # B = 8000, kept 90
        (8_000, 0, 90, 4_000, 6_000, 7_200, 4_000),
        # B = 8000, default
        (8_000, 0, 40, 4_000, 6_000, 3_200, 3_200),
        # floors, not rounds
        (999, 0, 40, 499, 749, 399, 399),
        (3, 0, 40, 1, 2, 1, 1),
        (2, 0, 40, 1, 1, 0, 0),
        # B = 1: H floors to 0, an explicit threshold is clamped to it
        (1, 0, 40, 0, 0, 0, 0),
        (1, 500, 40, 0, 0, 0, 0),
    ],
)
def test_worked_numbers(
    b: int,
    threshold: int,
    kept: int,
    soft: int,
    hard: int,
    target: int,
    target_blocking: int,
) -> None:
    result = with_budget(b, compaction_threshold=threshold, compaction_kept_percent=kept)
    assert result == Budget(
        window=b + 1024,
        reserve=1024,
        budget=b,
        soft=soft,
        hard=hard,
        target=target,
        target_blocking=target_blocking,
    )


# --- window resolution and the cap --------------------------------------------------------------


@pytest.mark.parametrize(
    ("context_window", "model_max", "reserve", "cap", "window", "budget"),
    [
        # bot window overrides what the model info says, in both directions
        (32_000, 128_000, 1024, CAP, 32_000, 30_976),
        (300_000, 128_000, 1024, CAP, 300_000, 298_976),
        # bot window 0 -> model info
        (0, 128_000, 1024, CAP, 128_000, 126_976),
        # unknown model -> cap (None and 0 both mean unknown)
        (0, None, 1024, 200_000, 200_000, 198_976),
        (0, 0, 1024, 200_000, 200_000, 198_976),
        # cap clamps B but W stays what was resolved
        (0, 1_000_000, 1024, 200_000, 1_000_000, 200_000),
        (500_000, None, 4096, 200_000, 500_000, 200_000),
        (201_024, None, 1024, 200_000, 201_024, 200_000),
        (201_025, None, 1024, 200_000, 201_025, 200_000),
        (201_023, None, 1024, 200_000, 201_023, 199_999),
        # reserve equal to or above the window -> B 0, never negative
        (1024, None, 1024, CAP, 1024, 0),
        (1000, None, 4096, CAP, 1000, 0),
        (0, 4096, 4096, CAP, 4096, 0),
        (0, None, 300_000, 200_000, 200_000, 0),
        # one token left
        (1025, None, 1024, CAP, 1025, 1),
    ],
)
def test_window_and_budget(
    context_window: int,
    model_max: int | None,
    reserve: int,
    cap: int,
    window: int,
    budget: int,
) -> None:
    result = make(
        context_window=context_window,
        model_max_input_tokens=model_max,
        max_output_tokens=reserve,
        absolute_cap=cap,
    )
    assert (result.window, result.reserve, result.budget) == (window, reserve, budget)


def test_unknown_model_full_numbers() -> None:
    assert make(model_max_input_tokens=None, absolute_cap=200_000) == Budget(
        window=200_000,
        reserve=1024,
        budget=198_976,
        soft=99_488,
        hard=149_232,
        target=79_590,
        target_blocking=79_590,
    )


@pytest.mark.parametrize(
    ("threshold", "kept"),
    [(0, 40), (90_000, 55), (500_000, 99), (1, 1)],
)
def test_zero_budget_zeroes_every_threshold(threshold: int, kept: int) -> None:
    result = make(
        context_window=2048,
        max_output_tokens=4096,
        compaction_threshold=threshold,
        compaction_kept_percent=kept,
    )
    assert result == Budget(
        window=2048, reserve=4096, budget=0, soft=0, hard=0, target=0, target_blocking=0
    )


def test_budget_is_frozen() -> None:
    result = with_budget(8_000)
    with pytest.raises(AttributeError):
        result.budget = 1  # type: ignore[misc]


# --- pressure levels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b", "threshold", "pressure", "level"),
    [
        (200_000, 0, 0, "ok"),
        (200_000, 0, 99_999, "ok"),
        (200_000, 0, 100_000, "soft"),
        (200_000, 0, 149_999, "soft"),
        (200_000, 0, 150_000, "hard"),
        (200_000, 0, 200_000, "hard"),
        (200_000, 0, 10_000_000, "hard"),
        # threshold 90000 moves only the soft trigger
        (200_000, 90_000, 89_999, "ok"),
        (200_000, 90_000, 90_000, "soft"),
        (200_000, 90_000, 149_999, "soft"),
        (200_000, 90_000, 150_000, "hard"),
        # threshold clamped to H: there is no soft band
        (200_000, 500_000, 149_999, "ok"),
        (200_000, 500_000, 150_000, "hard"),
        (8_000, 0, 3_999, "ok"),
        (8_000, 0, 4_000, "soft"),
        (8_000, 0, 5_999, "soft"),
        (8_000, 0, 6_000, "hard"),
        # B = 2: S = H = 1
        (2, 0, 0, "ok"),
        (2, 0, 1, "hard"),
        # B <= 1: H == 0, compaction cannot help, admission decides
        (1, 0, 0, "ok"),
        (1, 0, 1, "ok"),
        (1, 0, 50_000, "ok"),
        (0, 0, 0, "ok"),
        (0, 0, 1, "ok"),
        (0, 90_000, 10_000_000, "ok"),
    ],
)
def test_pressure_level(b: int, threshold: int, pressure: int, level: str) -> None:
    assert pressure_level(with_budget(b, compaction_threshold=threshold), pressure) == level


def test_pressure_level_on_reserve_eating_window() -> None:
    budget = make(context_window=1024, max_output_tokens=1024)
    assert budget.budget == 0
    assert pressure_level(budget, 500) == "ok"


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"context_window": -1}, "context_window must be >= 0, got -1"),
        ({"model_max_input_tokens": -5}, "model_max_input_tokens must be >= 0, got -5"),
        ({"max_output_tokens": 0}, "max_output_tokens must be >= 1, got 0"),
        ({"max_output_tokens": -1}, "max_output_tokens must be >= 1, got -1"),
        ({"compaction_threshold": -1}, "compaction_threshold must be >= 0, got -1"),
        ({"compaction_kept_percent": 0}, "compaction_kept_percent must be >= 1, got 0"),
        ({"compaction_kept_percent": -3}, "compaction_kept_percent must be >= 1, got -3"),
        (
            {"compaction_kept_percent": 100},
            "compaction_kept_percent must be between 1 and 99, got 100",
        ),
        ({"absolute_cap": 0}, "absolute_cap must be >= 1, got 0"),
        ({"absolute_cap": -1}, "absolute_cap must be >= 1, got -1"),
    ],
)
def test_invalid_values_raise_value_error(overrides: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        make(**overrides)
    assert str(excinfo.value) == message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"context_window": 1.5}, "context_window must be an int, got float"),
        ({"model_max_input_tokens": 128_000.0}, "model_max_input_tokens must be an int, got float"),
        ({"max_output_tokens": "1024"}, "max_output_tokens must be an int, got str"),
        ({"compaction_kept_percent": True}, "compaction_kept_percent must be an int, got bool"),
        ({"absolute_cap": None}, "absolute_cap must be an int, got NoneType"),
    ],
)
def test_non_int_values_raise_type_error(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError) as excinfo:
        make(**overrides)  # type: ignore[arg-type]
    assert str(excinfo.value) == message


@pytest.mark.parametrize(
    ("pressure", "error", "message"),
    [
        (-1, ValueError, "pressure must be >= 0, got -1"),
        (1.0, TypeError, "pressure must be an int, got float"),
    ],
)
def test_invalid_pressure(pressure: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as excinfo:
        pressure_level(with_budget(8_000), pressure)  # type: ignore[arg-type]
    assert str(excinfo.value) == message
