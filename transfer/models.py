from django.conf import settings
from django.db import models


class ImportedConversation(models.Model):
    """One conversation an import turned into a session, by the digest of its content: the same
    conversation imported again (the same file twice, or an export of an import) is recognised
    and skipped while its session exists. Deleting the session deletes this row, so it can be
    imported again."""

    class Source(models.TextChoices):
        LOSSLESS = "lossless"
        CHATGPT = "chatgpt"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="imported_conversations"
    )
    session = models.OneToOneField(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="imported_from"
    )
    source = models.CharField(max_length=16, choices=Source.choices)
    # sha256 of the conversation's canonical JSON (ids left out): hex.
    digest = models.CharField(max_length=64)
    # The conversation's id in the file it came from (ChatGPT's conversation id), for people.
    source_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "digest"], name="imported_user_digest_unique")
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.digest[:12]}"


class ImportedBranch(models.Model):
    """An alternate branch of an imported conversation (ChatGPT keeps every edit and
    regeneration as a sibling in its tree): the messages after the fork, kept so the branch
    feature can materialise them. ``fork_seq`` is the transcript message they continue (0: they
    replace the whole transcript). ``messages``: ``[{role, kind, content, created_at, model,
    source_id}]`` in order."""

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="imported_branches"
    )
    position = models.PositiveIntegerField()
    fork_seq = models.PositiveIntegerField()
    messages = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session_id", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "position"], name="imported_branch_position_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} branch {self.position}"


class ImportJob(models.Model):
    """One uploaded import file and what became of it (docs/transfer.md, "Import jobs").

    The POST stores the file as ``ImportChunk`` rows (the worker that runs the import may be on
    another host: the database is the storage both share) and answers 202; the ``heavy`` task
    parses and writes it in a limited child process and ends the job ``done`` (``result``) or
    ``failed`` (``error_code``, ``error_message``, ``error_details``). The chunks are deleted when
    the job ends, either way."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="import_jobs"
    )
    bot = models.ForeignKey("bots.Bot", on_delete=models.CASCADE, related_name="import_jobs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    file_name = models.CharField(max_length=255, blank=True, default="")
    bytes_total = models.BigIntegerField()
    bytes_read = models.BigIntegerField(default=0)
    # The page's key for ``GET /api/v1/import/progress/?key=`` (empty: none).
    progress_key = models.CharField(max_length=64, blank=True, default="")
    # The limits of the API key the POST came through, ``[[subject, limit]]``
    # (``connections.usage.scope_pairs``): what the import sets off later (the embedding of what
    # it wrote, each new chat's soft compaction) is charged to them too. Empty: the user's own.
    quota = models.JSONField(default=list, blank=True)
    result = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    error_details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["user", "status"], name="import_job_user_status")]

    def __str__(self) -> str:
        return f"import {self.pk} {self.status}"


class ImportChunk(models.Model):
    """One piece of an import job's uploaded file, in order of ``position``."""

    job = models.ForeignKey(ImportJob, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        ordering = ["job_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="import_chunk_position_unique")
        ]

    def __str__(self) -> str:
        return f"import {self.job_id} chunk {self.position}"


class ImportJobSession(models.Model):
    """A chat an import job's run has made, while the job runs: the run writes in steps, each
    its own transaction (docs/transfer.md, "Written in steps"), so a run stopped midway (a limit,
    a crash, a lost worker) has committed chats that the worker or the sweep then deletes. The
    row is written in the same transaction as its chat and deleted when the job ends."""

    job = models.ForeignKey(ImportJob, on_delete=models.CASCADE, related_name="sessions_made")
    session = models.OneToOneField(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="import_job_link"
    )

    def __str__(self) -> str:
        return f"import {self.job_id} made chat {self.session_id}"
