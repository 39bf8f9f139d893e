"""Budget arithmetic (docs/compaction.md): pure integer maths, no Django, no I/O.

Every number here is an ``int`` and every division floors, so the same inputs give the same
thresholds in every process and every test.

Degenerate budgets: when the output reserve eats the whole window (``R >= W``), ``B`` is 0
rather than negative, and ``S``, ``H``, ``T`` and ``Ts`` are 0 too. Nothing can be sent then,
and compaction cannot help (its targets are 0), so :func:`pressure_level` reports ``"ok"`` and
the caller goes straight to admission, which rejects with ``context_too_large``. The same holds
for ``B == 1``, where ``H`` floors to 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PressureLevel = Literal["ok", "soft", "hard"]


@dataclass(frozen=True)
class Budget:
    window: int  # W: the model's input window as resolved (not clamped by the cap)
    reserve: int  # R: tokens kept free for the reply (max_output_tokens)
    budget: int  # B: everything sent must fit in this
    soft: int  # S: pressure at which an asynchronous compaction is scheduled
    hard: int  # H: pressure at which the call waits for a blocking compaction
    target: int  # T: where soft compaction aims to land
    target_blocking: int  # Ts: where blocking compaction aims to land

    def soft_due(self, pressure: int) -> bool:
        """The soft rule (docs/compaction.md): at or past S, a compaction runs in the background.
        The one statement of it: the turn's trigger, the task that runs it and ``/compact``'s notice
        all ask here (``pressure_level``)."""
        return pressure_level(self, pressure) != "ok"

    def hard_due(self, pressure: int) -> bool:
        """The hard rule: at or past H, the call waits for a blocking compaction."""
        return pressure_level(self, pressure) == "hard"


def _require_int(name: str, value: object, *, minimum: int) -> int:
    # bool is an int subclass; True as a token count is always a caller bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def budget_compute(
    *,
    context_window: int,
    model_max_input_tokens: int | None,
    max_output_tokens: int,
    compaction_threshold: int,
    compaction_kept_percent: int,
    absolute_cap: int,
) -> Budget:
    """Resolve W, R, B, S, H, T and Ts for one bot and model.

    ``context_window`` is the bot setting (0 = automatic); ``model_max_input_tokens`` is what
    litellm knows about the model (``None`` or 0 = unknown); ``absolute_cap`` is
    ``CONTEXT_ABSOLUTE_CAP_TOKENS``. Raises ``TypeError`` for non-int inputs and ``ValueError``
    for values outside their ranges (negative counts, ``max_output_tokens < 1``, kept-% outside
    1-99, cap < 1).
    """
    _require_int("context_window", context_window, minimum=0)
    if model_max_input_tokens is not None:
        _require_int("model_max_input_tokens", model_max_input_tokens, minimum=0)
    _require_int("max_output_tokens", max_output_tokens, minimum=1)
    _require_int("compaction_threshold", compaction_threshold, minimum=0)
    _require_int("compaction_kept_percent", compaction_kept_percent, minimum=1)
    if compaction_kept_percent > 99:
        raise ValueError(
            f"compaction_kept_percent must be between 1 and 99, got {compaction_kept_percent}"
        )
    _require_int("absolute_cap", absolute_cap, minimum=1)

    if context_window > 0:
        window = context_window
    elif model_max_input_tokens:
        window = model_max_input_tokens
    else:
        window = absolute_cap
    reserve = max_output_tokens
    budget = max(0, min(window - reserve, absolute_cap))

    hard = budget * 75 // 100
    soft = min(compaction_threshold, hard) if compaction_threshold > 0 else budget * 50 // 100
    target = budget * compaction_kept_percent // 100
    target_blocking = min(target, budget * 50 // 100)
    return Budget(
        window=window,
        reserve=reserve,
        budget=budget,
        soft=soft,
        hard=hard,
        target=target,
        target_blocking=target_blocking,
    )


# A background threshold set by hand lies at least this share of B above where compaction lands
# (T): closer, the messages of the next turn or two reach it again and compaction runs every few
# turns on a small slice (docs/bots.md). 5 %: the budget's worked example, B 200,000 with a
# threshold of 90,000 over a landing point of 80,000, is a valid bot (docs/compaction.md).
THRESHOLD_MARGIN_PERCENT = 5


def threshold_minimum(budget: Budget) -> int:
    """The lowest soft threshold S these settings may have: T + 5 % of B."""
    return budget.target + budget.budget * THRESHOLD_MARGIN_PERCENT // 100


def pressure_level(budget: Budget, pressure: int) -> PressureLevel:
    """Classify ``pressure`` (tokens the next call would send) against ``budget``.

    ``"hard"`` at ``pressure >= H``, ``"soft"`` at ``pressure >= S``, else ``"ok"``. When ``H`` is
    0 (``B <= 1``) nothing useful fits and compaction cannot reach a target of 0, so the answer is
    ``"ok"``: the caller proceeds to admission, which rejects instead of spinning a summariser.
    """
    _require_int("pressure", pressure, minimum=0)
    if budget.hard == 0:
        return "ok"
    if pressure >= budget.hard:
        return "hard"
    if pressure >= budget.soft:
        return "soft"
    return "ok"
