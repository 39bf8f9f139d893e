"""Provider connections (staff-managed endpoints and keys) and daily token counters.

- ``Connection``: a provider endpoint staff added once — a kind, a base URL, and a key stored
  **encrypted** (``connections.crypto``; the plaintext never leaves the process that decrypts
  it) or named by an allow-listed environment variable. Who may use it: everyone (``public``),
  or the listed users and groups; staff always. ``model_list`` is the last discovered list.
- ``TokenCounter``: one row per subject (``user:<id>`` or ``key:<id>``) and UTC day — the one
  counter every daily limit reads (a user's, their groups', an API key's). ``reserved`` holds
  what running turns may still spend, so concurrent turns cannot all pass the same check.
- ``UserQuota`` / ``GroupQuota``: daily token limits set by staff.
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from chat_platform.textcheck import validate_storable_text

LIMIT_MAX = 2_000_000_000


class Connection(models.Model):
    class Kind(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible"
        OLLAMA = "ollama", "Ollama"
        ANTHROPIC = "anthropic", "Anthropic"
        LITELLM = "litellm", "litellm provider"
        BUILTIN = "builtin", "Built-in models"

    name = models.CharField(max_length=120, unique=True, validators=[validate_storable_text])
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # For kind "litellm": the litellm provider prefix (``groq``, ``mistral``…); "" with kind
    # "litellm" (made by the data migration from mixed bots) accepts any model string.
    provider = models.CharField(max_length=40, blank=True, default="")
    base_url = models.CharField(
        max_length=500, blank=True, default="", validators=[validate_storable_text]
    )
    # Fernet token of the key (connections.crypto); never shown, never returned.
    api_key_encrypted = models.TextField(blank=True, default="", editable=False)
    api_key_env = models.CharField(
        max_length=128, blank=True, default="", validators=[validate_storable_text]
    )
    public = models.BooleanField(default=False)
    users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="provider_connections"
    )
    groups = models.ManyToManyField(Group, blank=True, related_name="provider_connections")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # [{"id", "context_window"?}], from the last "Refresh models".
    model_list = models.JSONField(default=list, blank=True)
    models_refreshed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["openai", "ollama", "anthropic", "litellm", "builtin"]),
                name="connection_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(api_key_encrypted="") | Q(api_key_env=""),
                name="connection_one_key_source",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def has_key(self) -> bool:
        return bool(self.api_key_encrypted)


class TokenCounter(models.Model):
    subject = models.CharField(max_length=200)
    day = models.DateField()
    used = models.PositiveBigIntegerField(default=0)
    reserved = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["subject", "day"], name="token_counter_subject_day")
        ]

    def __str__(self) -> str:
        return f"{self.subject} {self.day}: {self.used} (+{self.reserved})"


class UserQuota(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="token_quota"
    )
    daily_token_limit = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(LIMIT_MAX)]
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(daily_token_limit__gte=1), name="user_quota_ge_1")
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.daily_token_limit:,} tokens a day"


class GroupQuota(models.Model):
    group = models.OneToOneField(Group, on_delete=models.CASCADE, related_name="token_quota")
    daily_token_limit = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(LIMIT_MAX)]
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(daily_token_limit__gte=1), name="group_quota_ge_1")
        ]

    def __str__(self) -> str:
        return f"{self.group}: {self.daily_token_limit:,} tokens a day per member"
