"""Tool servers: MCP servers staff added once, whose tools bots may offer their model.

- ``ToolServer``: a name (``[a-z0-9-]{1,40}``, how a bot names it: ``"<name>/<tool>"``), the
  server's URL and transport (streamable HTTP, or SSE for older servers), optional HTTP headers
  stored **encrypted** with the connections' key (``connections.crypto``; the values are never
  returned), who may use it (everyone when ``public``, else the listed groups; staff always),
  and the tool list the last "Refresh tools" read (``tool_list``: name, description, input
  schema), or why it could not (``refresh_error``).
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from chat_platform.textcheck import validate_storable_text

SERVER_NAME_PATTERN = r"^[a-z0-9-]{1,40}\Z"
server_name_validator = RegexValidator(
    SERVER_NAME_PATTERN, "Lowercase letters, digits and '-', 1 to 40 characters."
)


class ToolServer(models.Model):
    class Transport(models.TextChoices):
        STREAMABLE_HTTP = "streamable-http", "Streamable HTTP"
        SSE = "sse", "SSE (older servers)"

    name = models.CharField(max_length=40, unique=True, validators=[server_name_validator])
    url = models.CharField(max_length=500, validators=[validate_storable_text])
    transport = models.CharField(
        max_length=20, choices=Transport.choices, default=Transport.STREAMABLE_HTTP
    )
    # Fernet token of the JSON object {name: value} (connections.crypto); never shown.
    headers_encrypted = models.TextField(blank=True, default="", editable=False)
    # The header names only, to show staff what is set (the values stay write-only).
    header_names = models.JSONField(default=list, blank=True, editable=False)
    public = models.BooleanField(default=False)
    groups = models.ManyToManyField(Group, blank=True, related_name="tool_servers")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # [{"name", "description", "input_schema"}], from the last "Refresh tools".
    tool_list = models.JSONField(default=list, blank=True, editable=False)
    tools_refreshed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Why the last refresh failed ("" after a success).
    refresh_error = models.TextField(blank=True, default="", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(transport__in=["streamable-http", "sse"]),
                name="tool_server_transport_valid",
            ),
            models.CheckConstraint(
                condition=Q(name__regex=SERVER_NAME_PATTERN.replace(r"\Z", "$")),
                name="tool_server_name_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def tool_named(self, name: str) -> dict | None:
        return next((t for t in self.tool_list if t.get("name") == name), None)
