"""Tool server CRUD (staff) and "Refresh tools": validate, then write (docs/tools.md).

Every writer (the REST API, the admin) comes through here, so the rules hold once:

* staff only (anyone else: ``not_found`` on an id, ``permission_denied`` on create);
* ``name`` is ``[a-z0-9-]{1,40}`` and unique; ``url`` a plain http(s) URL — set by staff, it is
  the one origin the client may reach (``tools.mcp_client``: any address, no redirect);
* ``headers`` (``{name: value}``) are encrypted at once with the connections' key
  (``connections.crypto``) and never returned; ``null`` or ``{}`` clears them;
* ``groups`` are ids of existing groups.

Reading a server's tools is network I/O: it runs outside any transaction, holding one of the
user's heavy-request slots and no database connection (``chat_platform.heavy``, ``dbconn``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import structlog
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from chat_platform import provider_policy, redaction
from chat_platform.dbconn import connection_release
from chat_platform.dbwrite import saved_unless_taken
from chat_platform.errors import PermissionDenied, ValidationFailed
from chat_platform.heavy import heavy_request
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from connections import crypto
from tools.mcp_client import Endpoint, ToolServerError, tools_list
from tools.models import ToolServer
from tools.queries import is_staff, tool_server_get_for_staff

log = structlog.get_logger(__name__)

FIELDS = ("name", "url", "transport", "headers", "public", "groups")
HEADERS_MAX = 20
HEADER_VALUE_MAX_CHARS = 4096
# An HTTP header name (RFC 9110 token).
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}\Z")
# Headers the HTTP client and the MCP SDK set themselves: given here they would break every
# request to the server (a wrong length, another host) or its session.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
    }
)
NAME_RULE = "Lowercase letters, digits and '-', 1 to 40 characters."
NAME_TAKEN = "A tool server with this name exists."
_NAME = re.compile(r"^[a-z0-9-]{1,40}\Z")
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*\Z")


def _staff(user: AbstractBaseUser) -> None:
    if not is_staff(user):
        raise PermissionDenied("Only staff can manage tool servers.")


def _check_headers(errors: dict, raw: object) -> dict[str, str] | None:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors["headers"] = ["An object of header names and values."]
        return None
    if len(raw) > HEADERS_MAX:
        errors["headers"] = [f"At most {HEADERS_MAX} headers."]
        return None
    problems = []
    for name, value in raw.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            problems.append(f"{str(name)[:100]!r}: not a header name.")
        elif name.lower() in _RESERVED_HEADERS:
            problems.append(f"{name}: set by the client itself, it cannot be given here.")
        elif not isinstance(value, str) or not text_is_storable(value):
            problems.append(f"{name}: the value must be text.")
        elif len(value) > HEADER_VALUE_MAX_CHARS or "\r" in value or "\n" in value:
            problems.append(f"{name}: one line of at most {HEADER_VALUE_MAX_CHARS} characters.")
        elif not _HEADER_VALUE.match(value):
            # An HTTP client sends header values as ASCII: another character fails every
            # listing and call of the server later, with an encoding error.
            problems.append(f"{name}: printable ASCII characters only.")
    if problems:
        errors["headers"] = problems
        return None
    refusal = crypto.store_refusal("headers") if raw else None
    if refusal:
        errors["headers"] = [f"{refusal}."]
        return None
    return {str(k): str(v) for k, v in raw.items()}


def _check_text(errors: dict, server: ToolServer, fields: dict[str, Any]) -> None:
    if "name" in fields:
        name = fields["name"]
        if not isinstance(name, str) or not _NAME.match(name):
            errors["name"] = [NAME_RULE]
        else:
            server.name = name
            clash = ToolServer.objects.filter(name=name).exclude(pk=server.pk).exists()
            if clash:
                errors["name"] = [NAME_TAKEN]
    if "url" in fields:
        url = fields["url"]
        if not isinstance(url, str) or not text_is_storable(url):
            errors["url"] = [UNSTORABLE_MESSAGE if isinstance(url, str) else "Must be text."]
        elif len(url) > 500 or not provider_policy.api_base_is_http(url.strip()):
            errors["url"] = [
                "Must be a plain http(s) URL of at most 500 characters: no user name or "
                "password, query or fragment."
            ]
        else:
            server.url = url.strip()
    if "transport" in fields:
        if fields["transport"] not in ToolServer.Transport.values:
            errors["transport"] = [f"One of: {', '.join(ToolServer.Transport.values)}."]
        else:
            server.transport = fields["transport"]
    if "public" in fields:
        if not isinstance(fields["public"], bool):
            errors["public"] = ["Must be true or false."]
        else:
            server.public = fields["public"]


def check_tool_server_fields(
    *, fields: dict[str, Any], server: ToolServer
) -> tuple[dict[str, str] | None, list[Group] | None]:
    """Apply ``fields`` to ``server`` (unsaved) after checking them; returns the new headers
    (``None``: unchanged, ``{}``: cleared) and the groups (``None``: unchanged)."""
    errors: dict[str, list[str]] = {}
    for name in sorted(set(fields) - set(FIELDS)):
        errors[name] = ["Unknown field."]
    _check_text(errors, server, fields)
    headers = _check_headers(errors, fields["headers"]) if "headers" in fields else None
    groups: list[Group] | None = None
    if "groups" in fields:
        raw = fields["groups"]
        if not isinstance(raw, list) or not all(
            isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= 2**31 for g in raw
        ):
            errors["groups"] = ["A list of group ids."]
        else:
            groups = list(Group.objects.filter(pk__in=raw))
            missing = sorted(set(raw) - {g.pk for g in groups})
            if missing:
                errors["groups"] = [f"No such group: {', '.join(map(str, missing))}."]
    if not errors:
        try:
            server.full_clean(exclude=["created_by", "groups"], validate_unique=False)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationFailed(details=errors)
    return headers, groups


def tool_server_headers_store(server: ToolServer, headers: dict[str, str] | None) -> None:
    """Encrypt ``headers`` onto the (unsaved) row: ``None`` keeps them, ``{}`` clears them."""
    if headers is None:
        return
    server.headers_encrypted = crypto.key_encrypt(json.dumps(headers)) if headers else ""
    server.header_names = sorted(headers)


@transaction.atomic
def tool_server_create(*, user: AbstractBaseUser, **fields: Any) -> ToolServer:
    _staff(user)
    for required in ("name", "url"):
        if required not in fields:
            raise ValidationFailed(details={required: ["This field is required."]})
    server = ToolServer(created_by=user)  # type: ignore[misc]
    headers, groups = check_tool_server_fields(fields=fields, server=server)
    tool_server_headers_store(server, headers)
    saved_unless_taken(server, field="name", message=NAME_TAKEN)
    if groups is not None:
        server.groups.set(groups)
    log.info("tool_server_created", server_id=server.pk, transport=server.transport)
    return server


HEADERS_AGAIN = (
    "The server's address changed: send its headers again, or {} to clear them "
    "(they are never sent to an address they were not given for)."
)


def tool_server_moved_check(
    server: ToolServer, *, old_url: str, headers: dict[str, str] | None
) -> None:
    """A server whose ``url`` moved from ``old_url`` to another scheme, host or port keeps no
    stored headers (``headers`` None: unchanged) unless they are sent again or cleared; its
    listed tools go (another server's, listed again on the next refresh). The API and the admin
    both check here (as ``connections.services.connection_moved_check``)."""
    if server.url == old_url:
        return
    moved = not provider_policy.same_origin(old_url, server.url)
    if headers is None and server.headers_encrypted and moved:
        raise ValidationFailed(details={"headers": [HEADERS_AGAIN]})
    server.tool_list, server.tools_refreshed_at, server.refresh_error = [], None, ""


@transaction.atomic
def tool_server_update(*, user: AbstractBaseUser, server_id: object, **fields: Any) -> ToolServer:
    server = tool_server_get_for_staff(user=user, server_id=server_id)
    old_url = server.url
    headers, groups = check_tool_server_fields(fields=fields, server=server)
    tool_server_moved_check(server, old_url=old_url, headers=headers)
    tool_server_headers_store(server, headers)
    saved_unless_taken(server, field="name", message=NAME_TAKEN)
    if groups is not None:
        server.groups.set(groups)
    log.info("tool_server_updated", server_id=server.pk, fields=sorted(fields))
    return server


def tool_server_delete(*, user: AbstractBaseUser, server_id: object) -> None:
    """Bots naming the server keep the name; their turns find its tools unavailable."""
    server = tool_server_get_for_staff(user=user, server_id=server_id)
    server.delete()
    log.info("tool_server_deleted", server_id=server_id)


def tool_server_endpoint(server: ToolServer) -> Endpoint:
    """Where and how to reach ``server``, its headers decrypted (``crypto.KeyUnavailable``)."""
    headers: dict[str, str] = {}
    if server.headers_encrypted:
        headers = json.loads(crypto.key_decrypt(server.headers_encrypted))
        for value in headers.values():
            redaction.register_secret(value)
    return Endpoint(name=server.name, url=server.url, transport=server.transport, headers=headers)


def tool_server_tools_read(server: ToolServer) -> list[dict[str, Any]]:
    """The server's tools as it lists them now; ``ValidationFailed`` with the reason."""
    try:
        endpoint = tool_server_endpoint(server)
        found = tools_list(endpoint, timeout=settings.TOOL_LIST_TIMEOUT_SECONDS)
    except crypto.KeyUnavailable as exc:
        raise ValidationFailed(str(exc), details={"headers": [str(exc)]}) from None
    except ToolServerError as exc:
        raise _not_listed(server, str(exc)) from None
    return _within_limits(server, found)


def _not_listed(server: ToolServer, reason: str) -> ValidationFailed:
    return ValidationFailed(
        f"Could not list the tools of {server.name}: {reason}.", details={"url": [reason]}
    )


# What a server's list may hold (as a /v1 client's tools may): every signed-in user may read it,
# and every turn of a bot that uses the server offers from it.
LISTED_TOOLS_MAX = 128
LISTED_NAME_MAX_CHARS = 128  # as the MCP specification advises
LISTED_DESCRIPTION_MAX_CHARS = 4_000
LISTED_SCHEMA_MAX_BYTES = 64_000
# Cut from descriptions: control characters a terminal or a reader acts on (ESC, BEL, …) and the
# bidirectional overrides that make text read otherwise than it is; lines and tabs stay.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def _within_limits(server: ToolServer, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The list, each description cut to ``LISTED_DESCRIPTION_MAX_CHARS`` without control
    characters; a list of more than ``LISTED_TOOLS_MAX`` tools, or a tool whose name is over
    ``LISTED_NAME_MAX_CHARS`` or whose input schema is over ``LISTED_SCHEMA_MAX_BYTES``, is
    refused (the last good list stays)."""
    if len(found) > LISTED_TOOLS_MAX:
        raise _not_listed(
            server, f"it lists {len(found)} tools, more than the {LISTED_TOOLS_MAX} kept"
        )
    for tool in found:
        name = str(tool.get("name") or "")
        if len(name) > LISTED_NAME_MAX_CHARS:
            raise _not_listed(
                server,
                f"the name {name[:100]}… is {len(name):,} characters, more than the "
                f"{LISTED_NAME_MAX_CHARS} kept",
            )
        description = str(tool.get("description") or "")[: 2 * LISTED_DESCRIPTION_MAX_CHARS]
        tool["description"] = _CONTROLS.sub("", description)[:LISTED_DESCRIPTION_MAX_CHARS]
        size = len(json.dumps(tool.get("input_schema")).encode())
        if size > LISTED_SCHEMA_MAX_BYTES:
            raise _not_listed(
                server,
                f"the input schema of {str(tool.get('name'))[:100]} is {size:,} bytes, more "
                f"than the {LISTED_SCHEMA_MAX_BYTES:,} kept",
            )
    return found


def tool_server_tools_refresh(*, user: AbstractBaseUser, server_id: object) -> ToolServer:
    """Read the server's tools and keep them (name, description, input schema). A failure is
    kept too (``refresh_error``) and answered as ``validation_error``; the last good list stays."""
    server = tool_server_get_for_staff(user=user, server_id=server_id)
    with heavy_request(user_id=user.pk, kind="refresh_tools"):
        connection_release()  # the server may take seconds to answer
        try:
            found = tool_server_tools_read(server)
        except ValidationFailed as exc:
            ToolServer.objects.filter(pk=server.pk).update(refresh_error=exc.message[:2000])
            raise
    ToolServer.objects.filter(pk=server.pk).update(
        tool_list=found, tools_refreshed_at=timezone.now(), refresh_error=""
    )
    server.refresh_from_db(fields=["tool_list", "tools_refreshed_at", "refresh_error"])
    log.info("tool_server_tools_refreshed", server_id=server.pk, tools=len(found))
    return server
