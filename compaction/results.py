"""What a compaction run reports: the engine returns it, payloads and notices render it."""

from dataclasses import dataclass, field

from compaction.models import CompactionEvent, Summary


@dataclass
class RunResult:
    outcome: str  # compacted | noop | failed | rejected | skipped
    reason: str
    tokens_before: int = 0
    tokens_after: int = 0
    summary: Summary | None = None
    event: CompactionEvent | None = None
    passes: list[CompactionEvent] = field(default_factory=list)
    # The messages the run's summaries cover (several passes: from the first to the last).
    first_seq: int | None = None
    last_seq: int | None = None
    # ``not_lower``: what the context would have been with the summary in place (not kept).
    would_be: int | None = None
    # ``quota_exceeded``: the refusal's details (whose limit, used, when it resets) for the notice.
    # Also on a ``compacted`` run that the limit stopped part-way (``stopped``).
    quota: dict | None = None
    # A ``compacted`` run that ended before it had done all it was asked (``/compact`` whose
    # limit ran out after its first passes): why (``quota_exceeded``); None when it finished.
    stopped: str | None = None

    def __post_init__(self) -> None:
        if self.summary is not None and self.first_seq is None:
            self.first_seq, self.last_seq = self.summary.first_seq, self.summary.last_seq

    @property
    def compacted(self) -> bool:
        return self.outcome == CompactionEvent.Outcome.COMPACTED
