import re

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from chat_platform.textcheck import validate_storable_text

# The database check. In PostgreSQL's regex dialect "$" is the end of the string; in Python's
# it also matches before a final newline, hence \Z in the Python-side validator.
RECORD_NAME_PATTERN = r"^[a-z0-9_-]{1,80}$"
_RECORD_NAME = re.compile(r"[a-z0-9_-]{1,80}")

record_name_validator = RegexValidator(
    r"\A[a-z0-9_-]{1,80}\Z", "Use 1–80 characters: lowercase letters, digits, '_' and '-'."
)


class MemoryRecord(models.Model):
    """A named record of memory: a pre-compaction snapshot or a saved fact (docs/memory.md).

    Two scopes, told apart by which owner columns are set (a check constraint holds the shape):
    - ``session``: ``session`` set, ``user``/``bot`` empty. Dies with its session (CASCADE).
      Snapshots are always session-scoped.
    - ``bot``: ``user`` and ``bot`` set, ``session`` empty. Info records only. Readable from every
      session of that user with that bot, so they belong to (user, bot), not to the chat they were
      saved in: deleting that chat keeps them; deleting the bot or the user deletes them (CASCADE).

    Full-text search is kept current by the database, not by Python, so no write path can forget
    it: on PostgreSQL a trigger fills ``search_vector`` (GIN-indexed); on SQLite an FTS5 table
    ``memory_record_fts`` is synced by triggers. See ``memory/search_schema.py``.
    """

    class Kind(models.TextChoices):
        SNAPSHOT = "snapshot"
        INFO = "info"

    class Scope(models.TextChoices):
        SESSION = "session"
        BOT = "bot"

    session = models.ForeignKey(
        "bots.ChatSession",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_records",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_records",
    )
    bot = models.ForeignKey(
        "bots.Bot", null=True, blank=True, on_delete=models.CASCADE, related_name="memory_records"
    )
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.SESSION)
    name = models.CharField(max_length=80, validators=[record_name_validator])
    kind = models.CharField(max_length=16, choices=Kind.choices)
    description = models.CharField(max_length=140, validators=[validate_storable_text])
    body = models.TextField(validators=[validate_storable_text])
    token_count = models.PositiveIntegerField(default=0)
    first_seq = models.PositiveIntegerField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(null=True, blank=True)
    # Snapshots join the memory index only once their compaction succeeded.
    indexed = models.BooleanField(default=True)
    # PostgreSQL only (NULL on SQLite): written by a trigger, never by Django. Its GIN index is
    # created by the migration on PostgreSQL alone, so it is not in Meta.indexes (SQLite rebuilds
    # tables from Meta and cannot create a GIN index).
    search_vector = SearchVectorField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "name"],
                condition=Q(scope="session"),
                name="memory_record_session_name_unique",
            ),
            models.UniqueConstraint(
                fields=["user", "bot", "name"],
                condition=Q(scope="bot"),
                name="memory_record_bot_name_unique",
            ),
            models.CheckConstraint(
                condition=Q(name__regex=RECORD_NAME_PATTERN), name="memory_record_name_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["snapshot", "info"]), name="memory_record_kind_valid"
            ),
            # The owner columns match the scope; snapshots are never bot-scoped, but a snapshot
            # names the bot whose compaction wrote it (a room's are keyed by (session, bot)).
            models.CheckConstraint(
                condition=(
                    Q(
                        scope="session",
                        session__isnull=False,
                        user__isnull=True,
                    )
                    & (Q(bot__isnull=True) | Q(kind="snapshot"))
                    | Q(
                        scope="bot",
                        kind="info",
                        session__isnull=True,
                        user__isnull=False,
                        bot__isnull=False,
                    )
                ),
                name="memory_record_scope_owner",
            ),
            models.CheckConstraint(
                condition=Q(first_seq__isnull=True, last_seq__isnull=True)
                | Q(
                    first_seq__isnull=False,
                    last_seq__isnull=False,
                    first_seq__lte=models.F("last_seq"),
                ),
                name="memory_record_range_valid",
            ),
            models.CheckConstraint(
                condition=~Q(kind="snapshot") | Q(first_seq__isnull=False),
                name="memory_record_snapshot_has_range",
            ),
        ]
        indexes = [
            models.Index(fields=["session", "indexed", "-created_at"]),
            models.Index(
                fields=["user", "bot", "-updated_at"],
                condition=Q(scope="bot"),
                name="memory_record_bot_scope",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def name_is_valid(name: str) -> bool:
        return _RECORD_NAME.fullmatch(name) is not None


class RecallEvent(models.Model):
    """One read or search a model made while answering (docs/memory.md).

    ``names``: the names asked for (read; empty for a search). ``found``: the names that came back,
    in the order given to the model (read: the found subset; search: the hits, best first) — a
    list, not a count, so a UI can show what was looked up and what answered.
    """

    class Tool(models.TextChoices):
        READ = "read"
        SEARCH = "search"

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="recall_events"
    )
    # The reply being produced. SET_NULL: the event is an audit row of the session and outlives
    # an individual message (messages only disappear with their session, which cascades anyway).
    message = models.ForeignKey(
        "bots.Message",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="recall_events",
    )
    round = models.PositiveSmallIntegerField()
    tool = models.CharField(max_length=16, choices=Tool.choices)
    names = models.JSONField(default=list, blank=True)
    query = models.TextField(blank=True, default="")
    found = models.JSONField(default=list, blank=True)
    tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(round__gte=1), name="recall_event_round_ge_1"),
            models.CheckConstraint(
                condition=Q(tool__in=["read", "search"]), name="recall_event_tool_valid"
            ),
        ]
        indexes = [models.Index(fields=["session", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.session_id} round {self.round} {self.tool}"


class MessageIndex(models.Model):
    """One compacted message, indexed for search (docs/memory.md: search is at message level).

    Written once, when the compaction that replaced the message succeeds
    (``memory.services.messages_index``), with the snapshot that holds it: the record a hit names.
    ``terms`` is the message's text as search sees it — lower-case words without stop words,
    each reduced to its Snowball English stem (``memory.terms``), space-separated in order — so
    PostgreSQL and SQLite index exactly the same terms and rank the same hits: PostgreSQL keeps a
    GIN index on ``to_tsvector('simple', terms)``, SQLite an FTS5 table ``memory_message_fts``
    filled by triggers (``memory/search_schema.py``). ``length`` is the number of terms, for BM25's
    length normalisation.
    """

    message = models.OneToOneField(
        "bots.Message", primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    session = models.ForeignKey("bots.ChatSession", on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()
    # SET_NULL: a hit without its record still names the message's seq.
    record = models.ForeignKey(
        MemoryRecord, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    terms = models.TextField()
    length = models.PositiveIntegerField()
    # The message's embedding (``memory.embeddings``): little-endian float32, unit length, by
    # ``embedding_model`` (the session's bot's, when it was embedded). A message whose vector is
    # missing or of another model is embedded (again) by the next compaction of its session.
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=200, blank=True, default="", editable=False)

    class Meta:
        indexes = [models.Index(fields=["session", "seq"], name="memory_message_index_seq")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq}"
