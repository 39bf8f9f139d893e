"""API keys and what the OpenAI-compatible API keeps beside the chat's own tables.

- ``ApiKey``: a user's key (djangorestframework-api-key's model: only a hash is stored, the
  prefix stays visible), scoped to all or some of the user's usable bots, with an optional
  daily token budget and an access level for ``/api/v1/``.
- ``ApiSession``: marks a chat created through ``/v1/`` (the key it came from, by name too, so
  the chat list can say so after the key is revoked or deleted).
- ``ChainLink``: the conversation's fingerprint chain, one row per message a client sees
  (position 1, 2, … in the client's transcript). ``chain_hash`` of position k hashes the whole
  transcript up to k, so a request's history is matched by looking up one hash.
- ``ApiTurn``: a reply an API call asked for: its per-call options (read by the turn through
  ``turns.hooks``), the key (budget, audit) and the links to write once it completes.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from rest_framework_api_key.models import AbstractAPIKey

from bots.models import Bot, ChatSession, Message


class ApiKey(AbstractAPIKey):
    class Access(models.TextChoices):
        FULL = "full"
        READ = "read"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    # Explicit, not "no bots listed": a key scoped to bots that were all deleted must not
    # become a key for every bot.
    all_bots = models.BooleanField(default=True)
    bots = models.ManyToManyField(Bot, blank=True, related_name="api_keys")
    daily_token_limit = models.PositiveIntegerField(null=True, blank=True)
    access = models.CharField(max_length=8, choices=Access.choices, default=Access.FULL)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "API key"
        verbose_name_plural = "API keys"
        constraints = [
            models.CheckConstraint(
                condition=Q(access__in=["full", "read"]), name="api_key_access_valid"
            ),
            models.CheckConstraint(
                condition=Q(daily_token_limit__isnull=True) | Q(daily_token_limit__gte=1),
                name="api_key_daily_limit_ge_1",
            ),
        ]


class ApiSession(models.Model):
    session = models.OneToOneField(
        ChatSession, on_delete=models.CASCADE, primary_key=True, related_name="api_origin"
    )
    key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="sessions"
    )
    key_name = models.CharField(max_length=50)
    # A fork: the session whose common prefix this one was started from.
    forked_from = models.ForeignKey(
        ChatSession, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_forks"
    )
    forked_at_seq = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"API session {self.session_id} ({self.key_name})"


class ChainLink(models.Model):
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="chain")
    position = models.PositiveIntegerField()
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="chain_links")
    chain_hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["session_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="chain_session_position"),
            models.CheckConstraint(condition=Q(position__gte=1), name="chain_position_ge_1"),
        ]
        indexes = [models.Index(fields=["chain_hash"], name="chain_hash_idx")]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.position}"


class ApiTurn(models.Model):
    reply = models.OneToOneField(
        Message, on_delete=models.CASCADE, primary_key=True, related_name="api_turn"
    )
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="api_turns")
    key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="turns"
    )
    # {"temperature", "max_tokens", "stop"} as the client sent them (validated).
    options = models.JSONField(default=dict, blank=True)
    # Where the chain stood before this call's messages, and the (message id, fingerprint) of
    # each client message this call stored; the reply's own fingerprint is added on completion.
    base_position = models.PositiveIntegerField(default=0)
    base_hash = models.CharField(max_length=64)
    pending = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["key", "created_at"], name="api_turn_key_day")]

    def __str__(self) -> str:
        return f"API turn {self.reply_id}"
