"""The compaction engine (docs/compaction.md): distil old history into audited summaries.

One pass: claim the session (single-flight lease) -> choose a range from stored counts -> write
the raw snapshot -> call the summariser -> gate the output -> commit summary + coverage + counters
in one transaction with conditional updates. A crash anywhere before the commit leaves nothing
half-done: messages are only marked compacted inside the transaction that creates their summary.

Entry points: ``compaction_soft`` (Celery, after a turn), ``compaction_hard`` (inside the context
pipeline, before a model call), ``compaction_manual`` (``/compact``, the API, the command).
Every attempt writes a ``CompactionEvent``; failures arm the cool-down / back-off kept in
``CompactionState``, in the database, so every process obeys them.
"""

from chat_platform.llm import gateway
from compaction.engine.policy import blocked_moment, compaction_blocked_until, now
from compaction.engine.runs import (
    compaction_hard,
    compaction_manual,
    compaction_soft,
    seat_load,
)
from compaction.engine.summariser import (
    EXTRACTIVE_MODEL,
    SUMMARY_INSTRUCTIONS,
    compaction_model_config,
    summariser_window,
)
from compaction.results import RunResult
from memory import services as memory_services

__all__ = [
    "EXTRACTIVE_MODEL",
    "SUMMARY_INSTRUCTIONS",
    "RunResult",
    "blocked_moment",
    "compaction_blocked_until",
    "compaction_hard",
    "compaction_manual",
    "compaction_model_config",
    "compaction_soft",
    "seat_load",
    "gateway",
    "memory_services",
    "now",
    "summariser_window",
]
