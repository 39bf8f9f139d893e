import re

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.text import slugify

from chat_platform.textcheck import validate_storable_text

DEFAULT_MODEL = "builtin/recall"
# The built-in embedding model (docs/models.md): every bot searches by meaning unless its owner
# blanks ``embedding_model``.
DEFAULT_EMBEDDING_MODEL = "builtin/embed"

env_var_name_validator = RegexValidator(
    r"^[A-Za-z_][A-Za-z0-9_]{0,127}$",
    "Must be the name of an environment variable (letters, digits, underscore), not a key.",
)


slug_validator = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{0,58}[a-z0-9])?$",
    "A slug is 1–60 lowercase letters, digits and inner hyphens.",
)


def slug_from_name(name: str) -> str:
    """A bot's default slug: its name folded to ``[a-z0-9-]`` (``bot`` when nothing is left)."""
    slug = re.sub(r"[^a-z0-9]+", "-", slugify(name).lower()).strip("-")[:60].strip("-")
    return slug or "bot"


class Bot(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="bots"
    )
    name = models.CharField(max_length=120, validators=[validate_storable_text])
    # How a room mentions the bot (``@slug``): lowercase ``[a-z0-9-]``, unique per owner. Filled
    # from the name when left blank (``bot_slug_default``), so every bot has one.
    slug = models.CharField(max_length=60, blank=True, default="", validators=[slug_validator])
    system_prompt = models.TextField(blank=True, default="", validators=[validate_storable_text])
    model = models.CharField(
        max_length=200, default=DEFAULT_MODEL, validators=[validate_storable_text]
    )
    # A provider connection staff set up (app ``connections``): its base URL and key are used
    # for the bot's model calls instead of ``api_base`` / ``api_key_env``.
    connection = models.ForeignKey(
        "connections.Connection",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="bots",
    )
    api_base = models.URLField(
        max_length=500, blank=True, default="", validators=[validate_storable_text]
    )
    # The api_base a staff member set (or approved), so a bot keeps using it after its non-staff
    # owner edits other fields. Only an api_base equal to this, or one under PROVIDER_API_BASES,
    # is ever called (checked again at call time). Never shown in the API.
    api_base_approved = models.CharField(max_length=500, blank=True, default="", editable=False)
    # The models (chat and compaction, one per line) a staff member set or approved for this
    # bot. Only those may use a provider outside USER_PROVIDERS, or a provider's default
    # endpoint that PROVIDER_API_BASES does not list (checked again at call time).
    # (One per line; with ``allowed_models`` it can hold up to 23 names.)
    models_approved = models.TextField(blank=True, default="", editable=False)
    # Further models a user may pick for one chat (``ChatSession.model_override``) without
    # editing the bot, called with the bot's provider settings; the staff rules for ``model``
    # apply to each (``turns.bot_validation``). Empty: the chat always uses ``model``.
    allowed_models = models.JSONField(default=list, blank=True)
    api_key_env = models.CharField(
        max_length=128,
        blank=True,
        default="",
        validators=[validate_storable_text, env_var_name_validator],
    )
    temperature = models.FloatField(
        default=0.7, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)]
    )
    max_output_tokens = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(1)])
    context_window = models.PositiveIntegerField(
        default=0, help_text="0 = the model's max input tokens, else CONTEXT_ABSOLUTE_CAP_TOKENS."
    )
    is_shared = models.BooleanField(default=False)
    # Set when it was deleted while other people's chats used it (docs/bots.md "Deleting a
    # bot"): no one finds or runs it any more, and their chats stay theirs, readable.
    retired_at = models.DateTimeField(null=True, blank=True, editable=False)

    compaction_enabled = models.BooleanField(default=True)
    compaction_threshold = models.PositiveIntegerField(
        default=0, help_text="Soft trigger in tokens; 0 = 50 % of the budget."
    )
    compaction_kept_percent = models.PositiveSmallIntegerField(
        default=40, validators=[MinValueValidator(1), MaxValueValidator(99)]
    )
    compaction_model = models.CharField(
        max_length=200, blank=True, default="", validators=[validate_storable_text]
    )
    compaction_fallback_extractive = models.BooleanField(default=True)

    memory_index_size = models.PositiveSmallIntegerField(
        default=50, validators=[MaxValueValidator(200)]
    )
    recall_enabled = models.BooleanField(default=True)
    # The embedding model: the built-in one by default, or any litellm embedding model (called
    # with the bot's provider settings). The bot's messages are embedded as they are written and
    # search fuses lexical and vector ranks (``memory.embeddings``). Blank: lexical search only.
    embedding_model = models.CharField(
        max_length=200,
        blank=True,
        default=DEFAULT_EMBEDDING_MODEL,
        validators=[validate_storable_text],
    )
    # Tools from staff's MCP servers (app ``tools``, docs/tools.md): ``"<server>/<tool>"`` or
    # ``"<server>/*"``, offered to the model beside the memory tools. Checked by
    # ``turns.bot_validation.check_bot_tools`` (who may use the server, the schemas' share of B).
    tools = models.JSONField(default=list, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(temperature__gte=0) & Q(temperature__lte=2), name="bot_temperature_0_2"
            ),
            models.CheckConstraint(
                condition=Q(max_output_tokens__gte=1), name="bot_max_output_ge_1"
            ),
            models.CheckConstraint(
                condition=Q(compaction_kept_percent__gte=1) & Q(compaction_kept_percent__lte=99),
                name="bot_kept_percent_1_99",
            ),
            models.CheckConstraint(
                condition=Q(memory_index_size__lte=200), name="bot_memory_index_size_le_200"
            ),
            models.UniqueConstraint(
                # A retired bot keeps its slug (its old messages still name it) but frees it.
                fields=["owner", "slug"],
                condition=~Q(slug="") & Q(retired_at__isnull=True),
                name="bot_owner_slug_unique",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        # Every bot has a slug (rooms mention bots by it): a bot written without one, by any
        # path (the API, the pages, the admin, a fixture), takes a free one from its name.
        if not self.slug:
            self.slug = bot_slug_free(
                owner_id=self.owner_id, base=slug_from_name(self.name), exclude_id=self.pk
            )
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "slug"}
        super().save(*args, **kwargs)

    @property
    def api_base_trusted(self) -> bool:
        """Its api_base was set or approved by staff (and has not changed since)."""
        return bool(self.api_base) and self.api_base == self.api_base_approved

    def model_trusted(self, model: str) -> bool:
        """Staff set or approved ``model`` for this bot (and the api_base it is called with)."""
        return bool(model) and model in self.models_approved.split("\n")

    @property
    def chat_models(self) -> list[str]:
        """The models a chat with this bot may use: ``model`` first, then ``allowed_models``."""
        extra = self.allowed_models if isinstance(self.allowed_models, list) else []
        return [self.model, *(m for m in extra if isinstance(m, str) and m != self.model)]


def bot_slug_free(*, owner_id: int, base: str, exclude_id: int | None = None) -> str:
    """``base``, or ``base-2``, ``base-3``… : the first slug none of the owner's bots has."""
    taken = set(
        Bot.objects.filter(owner_id=owner_id, slug__startswith=base, retired_at__isnull=True)
        .exclude(pk=exclude_id)
        .values_list("slug", flat=True)
    )
    if base not in taken:
        return base
    number = 2
    while f"{base[: 60 - len(str(number)) - 1]}-{number}" in taken:
        number += 1
    return f"{base[: 60 - len(str(number)) - 1]}-{number}"


class ChatSession(models.Model):
    class ReplyMode(models.TextChoices):
        MENTIONED = "mentioned"  # the bots a message @mentions answer, else the default bot
        ALL = "all"  # every participant answers, in participant order
        MANUAL = "manual"  # the user picks who answers (``reply_as``), else the default bot

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions"
    )
    # The room's default bot (its default participant: kept equal to it); the only bot of a
    # one-bot session.
    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="sessions")
    reply_mode = models.CharField(
        max_length=16, choices=ReplyMode.choices, default=ReplyMode.MENTIONED
    )
    # Set once a second bot joins, never cleared (its turns stay in the transcript): a one-bot
    # session skips every room step (who answers, the room's rendering) without a query.
    is_room = models.BooleanField(default=False)
    title = models.CharField(
        max_length=200, blank=True, default="", validators=[validate_storable_text]
    )
    # Highest seq handed out; bumped by one UPDATE whose row lock keeps seqs gap-free.
    last_seq = models.PositiveIntegerField(default=0)
    # Running totals over the messages that count toward the context (see Message.in_context_q):
    # pressure is read from here, less what a seat's summaries cover (``SeatState``), so a
    # turn's cost never grows with the length of the history.
    context_tokens = models.PositiveBigIntegerField(default=0)
    context_messages = models.PositiveIntegerField(default=0)
    # The fields of the last context_admission decision, for the context report.
    last_admission = models.JSONField(null=True, blank=True)
    # A branch (an edited message or a regenerated reply): a chat holding copies of
    # ``branch_of``'s messages before ``branch_seq``, its own from there on. The versions of the
    # message at ``branch_seq`` are ``branch_of``'s and those of its branches at that seq.
    branch_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="branches"
    )
    branch_seq = models.PositiveIntegerField(null=True, blank=True)
    # Per-chat settings (PATCH /api/v1/sessions/{id}/), changed without editing the bot: a model
    # among the bot's ``chat_models`` ("" = the bot's model) and an instruction sent after the
    # bot's system prompt, counted with it in the fixed part.
    model_override = models.CharField(
        max_length=200, blank=True, default="", validators=[validate_storable_text]
    )
    extra_instruction = models.TextField(
        max_length=4000, blank=True, default="", validators=[validate_storable_text]
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["user", "bot", "-updated_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(reply_mode__in=["mentioned", "all", "manual"]),
                name="session_reply_mode_valid",
            ),
            models.CheckConstraint(
                condition=Q(branch_of__isnull=True, branch_seq__isnull=True)
                | Q(branch_of__isnull=False, branch_seq__gte=1)
                | Q(branch_of__isnull=True, branch_seq__gte=1),
                name="session_branch_seq_with_parent",
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Session {self.pk}"

    @property
    def chat_model(self) -> str:
        """The model this chat's turns call: its override while the bot still allows it, else
        the bot's model (a model the bot no longer lists is never called)."""
        chosen = self.model_override
        if chosen and chosen in self.bot.chat_models:
            return chosen
        return self.bot.model


class SessionParticipant(models.Model):
    """A bot taking part in a session (a room). A session made with ``{bot}`` has that bot as
    its one default participant. A removed participant keeps its row (``removed_at``) so its
    messages stay attributed; it no longer answers."""

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="participants")
    bot = models.ForeignKey(Bot, on_delete=models.CASCADE, related_name="participations")
    # The session's last seq when the bot joined: with ``sees_from_join`` its context starts
    # after it (it never sees what was said before it came in).
    joined_seq = models.PositiveIntegerField(default=0)
    sees_from_join = models.BooleanField(default=False)
    is_default = models.BooleanField(default=False)
    removed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["session", "bot"], name="participant_session_bot"),
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(is_default=True, removed_at__isnull=True),
                name="participant_one_default",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.bot_id}"

    @property
    def active(self) -> bool:
        return self.removed_at is None


def _in_context_q() -> Q:
    # ``Message.in_context_q`` and the condition of its partial index (``message_in_context``):
    # one condition, so the database sees that a query's filter implies the index's. Literal
    # values: the index is declared while ``Message`` (and its TextChoices) is being defined.
    return Q(
        kind__in=["chat", "tool"],
        status__in=["complete", "interrupted"],
        token_count__gt=0,
    )


class Message(models.Model):
    class Role(models.TextChoices):
        SYSTEM = "system"
        USER = "user"
        ASSISTANT = "assistant"
        TOOL = "tool"

    class Kind(models.TextChoices):
        CHAT = "chat"
        COMMAND = "command"
        NOTICE = "notice"
        TOOL = "tool"

    class Status(models.TextChoices):
        PENDING = "pending"
        STREAMING = "streaming"
        COMPLETE = "complete"
        FAILED = "failed"
        INTERRUPTED = "interrupted"

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.CHAT)
    content = models.TextField(blank=True, default="", validators=[validate_storable_text])
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    token_count = models.PositiveIntegerField(default=0)
    pinned = models.BooleanField(default=False)
    # Idempotency key from the client: the same key twice in a session yields the first result.
    client_id = models.CharField(
        max_length=100, blank=True, default="", validators=[validate_storable_text]
    )
    # Tool protocol: an assistant message that called tools carries tool_calls (OpenAI shape);
    # a tool result carries the id of the call it answers.
    tool_calls = models.JSONField(default=list, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True, default="")
    tool_name = models.CharField(max_length=100, blank=True, default="")
    # A tool result of an MCP tool (docs/tools.md): whether the call succeeded (a failure's
    # content is "[tool failed: <reason>]"); null for every other message.
    tool_ok = models.BooleanField(null=True, blank=True)
    # A pending reply asked for through an API key on /api/v1/: the daily-limit subject of that
    # key (``key:<id>``, ``connections.usage``), beside the user's own, that its turn is charged
    # to. Written by the send only, never from a client's field; blank for every other message,
    # so the claim, which loads the reply whole, tells a key's reply at no extra statement
    # (docs/openai-api.md "Keys").
    # (A database default too: the bulk loaders' COPY and raw INSERTs name their columns.)
    charged_to = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The reply a user message asked for, so a repeated client_id returns both halves.
    reply_to = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reply"
    )
    # The bot that spoke (assistant messages, and a recall exchange's messages); null for the
    # user's messages and notices. A removed or deleted bot's messages keep their text.
    bot = models.ForeignKey(Bot, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Rooms: the user message whose answers this reply belongs to (the chain a hop counts in),
    # and how many bot-to-bot hand-overs led to it (0: it answers the user).
    prompted_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    hop = models.PositiveSmallIntegerField(default=0)
    model = models.CharField(max_length=200, blank=True, default="")
    finish_reason = models.CharField(max_length=32, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    stop_requested = models.BooleanField(default=False)
    # Outbox: when the reply's turn was handed to the task queue (NULL: not yet, e.g. the broker
    # was down). The watchdog hands over pending replies that were never (or long ago) dispatched.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # Liveness of a running turn: refreshed every CHAT_HEARTBEAT_SECONDS while it runs. A
    # streaming reply whose heartbeat went stale belongs to a dead worker: the watchdog marks it
    # interrupted, keeping its partial text.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["session_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="message_session_seq_unique"),
            models.UniqueConstraint(
                fields=["session", "client_id"],
                condition=~Q(client_id=""),
                name="message_session_client_id_unique",
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="message_seq_ge_1"),
            models.CheckConstraint(
                condition=Q(role__in=["system", "user", "assistant", "tool"]),
                name="message_role_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["chat", "command", "notice", "tool"]),
                name="message_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(
                    status__in=["pending", "streaming", "complete", "failed", "interrupted"]
                ),
                name="message_status_valid",
            ),
        ]
        indexes = [
            # Admission walks the newest messages of a session by seq, reading only counts.
            models.Index(fields=["session", "-seq"], name="message_session_seq_desc"),
            # A session's messages a model may see (``in_context_q``), by seq: every build reads
            # them newest first down to its seat's covered floor (``compaction.seats.Seat``),
            # never the commands, notices and failures among them (docs/performance.md "A long
            # compacted history").
            models.Index(
                fields=["session", "seq"], condition=_in_context_q(), name="message_in_context"
            ),
            # Pinned messages are read on every turn: find them without walking the history.
            models.Index(
                fields=["session", "seq"], condition=Q(pinned=True), name="message_pinned"
            ),
            models.Index(
                fields=["status", "updated_at"],
                condition=Q(status__in=["pending", "streaming"]),
                name="message_unfinished",
            ),
            # Replies of a session run one at a time: the claim and the hand-over ask for the
            # session's earliest unfinished reply on every turn, without walking its history.
            models.Index(
                fields=["session", "seq"],
                condition=Q(status__in=["pending", "streaming"]),
                name="message_session_unfinished",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}"

    @staticmethod
    def in_context_q() -> Q:
        """Messages a model may see verbatim: finished chat/tool messages with content (never
        commands, notices, failed or empty replies), whether a summary covers them or not: what
        covers them is a seat's (``compaction.seats.Seat``). Counted in
        ChatSession.context_tokens; the ``message_in_context`` index holds exactly these."""
        return _in_context_q()

    @property
    def is_finished(self) -> bool:
        return self.status not in (self.Status.PENDING, self.Status.STREAMING)
