"""A file a user attached to a message: the original bytes (kept, downloadable by its owner) and,
for text-like files, the text that became part of the message.

The bytes live in the database row, not on a disk: an upload and the message that claims it are
then written (or refused) in the same transactions as everything else, so a refused upload or a
failed send leaves no orphaned file behind, and deleting a chat deletes its files. Sizes are
bounded by ``ATTACHMENT_MAX_BYTES``.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from bots.models import ChatSession, Message


class Attachment(models.Model):
    class Kind(models.TextChoices):
        TEXT = "text"  # plain text, markdown, csv, json, code
        PDF = "pdf"  # its text layer is what the model sees
        IMAGE = "image"  # sent as an image content part to models that accept images

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="attachments"
    )
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="attachments")
    # NULL until a sent message claims it (one message at most, once).
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.CASCADE, related_name="attachments"
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    content_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    data = models.BinaryField()

    class Status(models.TextChoices):
        # A PDF's text is read by a task in a limited child process (docs/attachments.md):
        # ``processing`` until then; ``failed`` with ``error`` saying why (a limit it hit).
        PROCESSING = "processing"
        READY = "ready"
        FAILED = "failed"

    # The extracted text (text and pdf kinds); empty for images.
    text = models.TextField(blank=True, default="")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.READY)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["message"], name="attachment_message")]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["text", "pdf", "image"]), name="attachment_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["processing", "ready", "failed"]),
                name="attachment_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name
