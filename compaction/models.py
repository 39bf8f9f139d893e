from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from chat_platform.transcript import summary_header

TRIGGERS = [
    "soft",
    "hard",
    "manual",
    "fusion",
    "fallback",
    "tool",
    "revert",
    "resummarise",
    "expand",
]
# A reverted summary's span is held (no automatic re-compaction) until released by the user or
# by pressure reaching H; those releases are events of their own.
OUTCOMES = [
    *("compacted", "noop", "failed", "rejected", "skipped"),
    *("reverted", "released", "expanded"),
]


class Summary(models.Model):
    """An audited distillation of a contiguous stretch of a session's history.

    What it covers is its seat's ``SummaryCoverage`` rows: one (bot, message) pair at most, so
    no message is covered by two active summaries of one seat. Fusion re-points the rows of its
    parents to the fused summary and marks the parents superseded, atomically.
    """

    class Status(models.TextChoices):
        ACTIVE = "active"
        SUPERSEDED = "superseded"
        # Undone by the user (POST /api/v1/summaries/{id}/revert/): its messages (or, for a
        # fused summary, its parents) are back in the context; the row and its snapshot stay.
        REVERTED = "reverted"

    class Trigger(models.TextChoices):
        SOFT = "soft"
        HARD = "hard"
        MANUAL = "manual"
        FUSION = "fusion"
        FALLBACK = "fallback"
        # A hard compaction inside a reply's tool loop: it may take the reply's own earlier
        # tool rounds (docs/tools.md, "Compaction inside a reply").
        TOOL = "tool"
        REVERT = "revert"
        RESUMMARISE = "resummarise"
        EXPAND = "expand"

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="summaries"
    )
    # The bot whose seat it was written from (docs/rooms.md): in a room each bot compacts the
    # room as it saw it, so summaries are keyed by (session, bot). Null only once the bot is gone.
    bot = models.ForeignKey(
        "bots.Bot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    level = models.PositiveSmallIntegerField(default=1)
    text = models.TextField()
    # Tokens of the summary as sent: its labelled system block, by the one counter.
    token_count = models.PositiveIntegerField()
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    source_tokens = models.PositiveIntegerField()
    model = models.CharField(max_length=200)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    parents = models.ManyToManyField("self", symmetrical=False, related_name="children", blank=True)
    retention = models.FloatField(validators=[MinValueValidator(0.0), MaxValueValidator(1.0)])
    missing_facts = models.JSONField(default=list, blank=True)
    focus = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    # Re-summarised: the summary that took this one's place (same span, same level).
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaced"
    )
    reverted_at = models.DateTimeField(null=True, blank=True)
    # A reverted summary's span is held: the range picker and fusion leave it alone until the
    # user releases it or pressure reaches the hard threshold (docs/context-records.md).
    held = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "summaries"
        constraints = [
            models.CheckConstraint(condition=Q(first_seq__lte=F("last_seq")), name="summary_range"),
            models.CheckConstraint(condition=Q(level__gte=1), name="summary_level_ge_1"),
            models.CheckConstraint(
                condition=Q(status__in=["active", "superseded", "reverted"]),
                name="summary_status_valid",
            ),
            models.CheckConstraint(condition=Q(trigger__in=TRIGGERS), name="summary_trigger_valid"),
            models.CheckConstraint(
                condition=Q(retention__gte=0) & Q(retention__lte=1), name="summary_retention_0_1"
            ),
        ]
        indexes = [
            models.Index(fields=["session", "status", "first_seq"]),
            models.Index(fields=["session", "bot", "status", "first_seq"]),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.status})"

    @property
    def label(self) -> str:
        return summary_header(self.first_seq, self.last_seq)

    @property
    def block(self) -> str:
        """How the summary reaches the model: a labelled system block naming what it covers."""
        return f"{self.label}\n{self.text}"


class CompactionEvent(models.Model):
    """One compaction attempt, whatever its outcome. Deleting events never touches summaries."""

    class Outcome(models.TextChoices):
        COMPACTED = "compacted"
        NOOP = "noop"
        FAILED = "failed"
        REJECTED = "rejected"
        SKIPPED = "skipped"
        REVERTED = "reverted"
        RELEASED = "released"
        EXPANDED = "expanded"

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="compaction_events"
    )
    bot = models.ForeignKey(
        "bots.Bot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    trigger = models.CharField(max_length=16, choices=Summary.Trigger.choices)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    reason = models.CharField(max_length=64, blank=True, default="")
    tokens_before = models.PositiveIntegerField(default=0)
    tokens_after = models.PositiveIntegerField(default=0)
    source_tokens = models.PositiveIntegerField(default=0)
    summary_tokens = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=200, blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    snapshot = models.ForeignKey(
        "memory.MemoryRecord",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="compaction_events",
    )
    summary = models.ForeignKey(
        Summary, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(trigger__in=TRIGGERS), name="event_trigger_valid"),
            models.CheckConstraint(
                condition=Q(outcome__in=OUTCOMES),
                name="event_outcome_valid",
            ),
        ]
        indexes = [models.Index(fields=["session", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.trigger} {self.outcome} ({self.reason or '-'})"


class CompactionState(models.Model):
    """Per-session failure policy, in the database so every process sees it (docs/compaction.md)."""

    session = models.OneToOneField(
        "bots.ChatSession",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="compaction_state",
    )
    # Automatic compaction is skipped until then after a failure (5 minutes).
    cooldown_until = models.DateTimeField(null=True, blank=True)
    # Under hard pressure, the summariser is not retried until then (30, 60, 120, 240, 270 s).
    backoff_until = models.DateTimeField(null=True, blank=True)
    backoff_step = models.PositiveSmallIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"compaction state of session {self.session_id}"


class ContextExpansion(models.Model):
    """ "Use the full text next turn" (POST /api/v1/sessions/{id}/expand/): the next reply of
    ``bot`` carries the messages ``first_seq``–``last_seq`` verbatim instead of the summaries
    inside that span. Keyed by (session, bot) like every seat's compaction state (docs/rooms.md): in
    a room each bot's seat has its own pending expansion, and in a one-bot session ``bot`` is the
    session's bot. Claimed by that bot's first reply whose context is built (``reply``), which keeps
    it across its recall rounds; deleted when that bot's next reply's context is built. Another
    bot's reply never claims or deletes it."""

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="context_expansions"
    )
    bot = models.ForeignKey("bots.Bot", on_delete=models.CASCADE, related_name="+")
    record = models.CharField(max_length=80)
    first_seq = models.PositiveIntegerField()
    last_seq = models.PositiveIntegerField()
    reply = models.ForeignKey(
        "bots.Message", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(first_seq__lte=F("last_seq")), name="expansion_range"
            ),
            models.UniqueConstraint(fields=["session", "bot"], name="expansion_session_bot"),
        ]

    def __str__(self) -> str:
        return f"expand {self.record} for bot {self.bot_id} in session {self.session_id}"


class SummaryCoverage(models.Model):
    """Which messages a seat's active summaries cover: one row per (bot, message), the one store
    of "compacted" for every chat (docs/rooms.md "A seat's bounded read"). In a one-bot chat the
    bot is the chat's; in a room several bots may each have summarised the same message from
    their own seat. The unique (bot, message) pair is "the database refuses two active summaries
    covering the same message", per seat. Fusion re-points the rows of its parents to the fused
    summary (``compaction.engine.coverage``)."""

    summary = models.ForeignKey(Summary, on_delete=models.CASCADE, related_name="coverage")
    bot = models.ForeignKey("bots.Bot", on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey("bots.Message", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot", "message"], name="coverage_bot_message_unique")
        ]
        indexes = [models.Index(fields=["summary"], name="coverage_summary")]

    def __str__(self) -> str:
        return f"{self.bot_id}:{self.message_id} -> {self.summary_id}"


class SeatState(models.Model):
    """A seat's own state (docs/rooms.md), keyed by (session, bot): in every chat, what its
    summaries cover (totals and covered floor); in a room also its failure policy (as
    ``CompactionState`` for a one-bot session), its last admission and what its bot never sees.

    The session's running totals count every message in context, covered or not; a seat's
    pressure is those minus what its summaries cover (``covered_*``, moved in the transaction
    that writes the coverage) and, in a room, what its bot never sees (``hidden_*``: the history
    before it joined, when it sees from its join). A one-bot chat's seat has a row from its
    first compaction."""

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="seat_states"
    )
    bot = models.ForeignKey("bots.Bot", on_delete=models.CASCADE, related_name="+")
    cooldown_until = models.DateTimeField(null=True, blank=True)
    backoff_until = models.DateTimeField(null=True, blank=True)
    backoff_step = models.PositiveSmallIntegerField(default=0)
    covered_tokens = models.BigIntegerField(default=0)
    covered_messages = models.IntegerField(default=0)
    hidden_tokens = models.BigIntegerField(default=0)
    hidden_messages = models.IntegerField(default=0)
    # The fields of this bot's last context_admission decision (its context report).
    last_admission = models.JSONField(null=True, blank=True)
    # What the seat's reads may skip (docs/rooms.md "A seat's bounded read"): every message the
    # bot may see up to ``covered_through_seq`` is covered by one of its summaries, except those
    # listed in ``uncovered_ids`` (pinned, interrupted, failed, a reply not finished, a tool
    # call left whole). Raised by the writer of the coverage, lowered by undo, reset when the
    # bot takes its seat again; 0 skips nothing and is always right.
    covered_through_seq = models.PositiveBigIntegerField(default=0)
    uncovered_ids = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "bot"], name="seat_state_session_bot")
        ]

    def __str__(self) -> str:
        return f"compaction seat of bot {self.bot_id} in session {self.session_id}"


# A seat's covered floor that skips nothing (``SeatState.covered_through_seq``).
SEAT_FLOOR_NONE = {"covered_through_seq": 0, "uncovered_ids": ()}


class PromptVersion(models.Model):
    """A bot's system prompt as it was sent, content-addressed: written once per (bot, text) when
    the prompt changes (``bot_update``) or, at the latest, by the first record that sends it —
    never per turn. A context record names ``(bot, version)`` instead of copying the prompt."""

    bot = models.ForeignKey("bots.Bot", on_delete=models.CASCADE, related_name="prompt_versions")
    version = models.CharField(max_length=16)  # the first 16 hex digits of the text's SHA-256
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot", "version"], name="prompt_version_unique")
        ]

    def __str__(self) -> str:
        return f"prompt {self.version} of bot {self.bot_id}"


class ContextRecord(models.Model):
    """What the model saw for one reply: every call the turn made (recall rounds included), each
    as its ordered parts with their provenance and token counts, the admission, the budget, a
    hard compaction it waited for, the provider's usage and the latency (docs/context-records.md).

    Parts refer to what is stored already (message seqs and ids, summary ids, prompt versions)
    and carry text only where nothing else keeps it (the index block, a room's header, the
    chat's instruction, an API client's system part), so ``compaction.records.record_rebuild``
    can reproduce every call's messages byte for byte. Written once when the turn ends (one
    INSERT), never updated."""

    message = models.OneToOneField(
        "bots.Message", on_delete=models.CASCADE, related_name="context_record"
    )
    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="context_records"
    )
    bot = models.ForeignKey(
        "bots.Bot", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    calls = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # "Replies made from this summary": a session's records from the summary's birth on.
            models.Index(fields=["session", "created_at"], name="context_record_session_time"),
            # The retention sweep.
            models.Index(fields=["created_at"], name="context_record_created"),
        ]

    def __str__(self) -> str:
        return f"context of message {self.message_id}"
