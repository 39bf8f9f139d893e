"""THE context pipeline: the one function that turns a session into the messages a model gets.

measure (``compaction.measure``: stored token counts only) -> [compact if hard: the compaction
engine] -> admit -> render.
The chat turn, recall re-invocations, the context report and the tests all come through here.

Text is loaded only for what can be sent. When the session's running totals say the whole
history fits, admission will take every candidate, so the history is read once, with its text
(admission still decides on the rows as read). Otherwise it is read newest first, in bounded
keyset pages of (id, seq, token_count, role, tool ids), and only until the first row that does
not fit; then text is fetched for what admission chose alone (the admitted run as a seq range,
pins and the new message by id; other rows of that range, such as failed replies, never reach
the model). Pressure comes from the session's running totals, so neither time nor memory grows
with the length of a conversation that does not fit.

Its modules, by step: ``build`` (``context_build``: measure, compact if hard, settle an
expansion, admit, render), ``history`` (the rows admission decides on and the text of what it
chose), ``admit`` (decide, record, refuse), ``render`` (messages, the index block, provenance)
and ``report`` (the context report and the soft trigger, apart from the build). The measure and
a seat's view are ``compaction.measure`` and ``compaction.seats``.
"""

from compaction.measure import Measure, bot_budget, context_measure, session_budget
from compaction.pipeline.admit import (
    admission_record,
    context_admit,
    context_fixed_fits,
    context_precheck,
    context_unshrinkable,
)
from compaction.pipeline.build import BuiltContext, context_build, still_in_context
from compaction.pipeline.history import HISTORY_PAGE_SIZE
from compaction.pipeline.report import (
    ContextState,
    context_bot,
    context_report,
    context_state,
    soft_compaction_due,
)
from compaction.seats import seat_key

# Re-exported: callers that only build or report contexts need not know the modules inside.
__all__ = [
    "HISTORY_PAGE_SIZE",
    "BuiltContext",
    "ContextState",
    "admission_record",
    "Measure",
    "bot_budget",
    "session_budget",
    "context_admit",
    "context_build",
    "context_fixed_fits",
    "context_unshrinkable",
    "context_measure",
    "context_precheck",
    "context_report",
    "context_state",
    "context_bot",
    "seat_key",
    "soft_compaction_due",
    "still_in_context",
]
