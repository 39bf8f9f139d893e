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
