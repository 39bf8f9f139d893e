from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

record_name_validator = RegexValidator(
    r"^[a-z0-9_-]{1,80}$", "Use 1–80 characters: lowercase letters, digits, '_' and '-'."
)


class MemoryRecord(models.Model):
    """A named record of a session's memory: a pre-compaction snapshot or a saved fact."""

    class Kind(models.TextChoices):
        SNAPSHOT = "snapshot"
        INFO = "info"

    session = models.ForeignKey(
        "bots.ChatSession", on_delete=models.CASCADE, related_name="memory_records"
    )
    name = models.CharField(max_length=80, validators=[record_name_validator])
    kind = models.CharField(max_length=16, choices=Kind.choices)
    description = models.CharField(max_length=140)
    body = models.TextField()
    token_count = models.PositiveIntegerField(default=0)
    first_seq = models.PositiveIntegerField(null=True, blank=True)
    last_seq = models.PositiveIntegerField(null=True, blank=True)
    # Snapshots join the memory index only once their compaction succeeded.
    indexed = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="memory_record_name_unique"),
            models.CheckConstraint(
                condition=Q(name__regex=r"^[a-z0-9_-]{1,80}$"), name="memory_record_name_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["snapshot", "info"]), name="memory_record_kind_valid"
            ),
        ]
        indexes = [models.Index(fields=["session", "indexed", "-created_at"])]

    def __str__(self) -> str:
        return self.name
