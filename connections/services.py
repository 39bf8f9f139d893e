"""Connection CRUD (staff) and "Refresh models": validate, then write.

Every writer (the REST API, the admin) comes through here, so the rules hold once:

* staff only (anyone else: ``not_found`` on an id, ``permission_denied`` on create);
* a base URL is a plain http(s) URL (``provider_policy.endpoint_parse``); being set by staff it
  is an approved endpoint for the outbound policy (any address, redirects never followed);
* a key is either given (``api_key``: encrypted at once, never stored or returned in clear) or
  named (``api_key_env``: only an allow-listed variable, ``PROVIDER_KEY_ENV_ALLOWED``), not both;
* ``groups`` are ids of existing groups.
"""

from __future__ import annotations

import os
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils import timezone

from chat_platform import provider_policy
from chat_platform.dbconn import connection_release
from chat_platform.dbwrite import saved_unless_taken
from chat_platform.errors import PermissionDenied, ValidationFailed
from chat_platform.heavy import heavy_request
from chat_platform.llm import discovery
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from connections import crypto
from connections.models import Connection
from connections.queries import (
    BUILTIN_MODELS,
    connection_call_base,
    connection_get_for_staff,
    connection_prefix,
)

log = structlog.get_logger(__name__)

API_KEY_MAX_CHARS = 4096
FIELDS = ("name", "kind", "provider", "base_url", "api_key", "api_key_env", "public", "groups")


def _staff(user: AbstractBaseUser) -> None:
    if not (getattr(user, "is_staff", False) and getattr(user, "is_active", False)):
        raise PermissionDenied("Only staff can manage provider connections.")


def _text(errors: dict, name: str, value: object, *, max_chars: int) -> str:
    if not isinstance(value, str):
        errors[name] = ["Must be text."]
        return ""
    if not text_is_storable(value):
        errors[name] = [UNSTORABLE_MESSAGE]
        return ""
    if len(value) > max_chars:
        errors[name] = [f"At most {max_chars} characters."]
        return ""
    return value.strip()


def check_connection_fields(
    *, fields: dict[str, Any], connection: Connection
) -> tuple[str | None, list[Group] | None]:
    """Apply ``fields`` to ``connection`` (unsaved) after checking them; returns the new key
    (``None``: unchanged, ``""``: cleared) and the groups (``None``: unchanged)."""
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(fields) - set(FIELDS))
    for name in unknown:
        errors[name] = ["Unknown field."]
    _check_endpoint(errors, fields, connection)
    new_key = _check_key(errors, fields, connection)
    groups = _check_access(errors, fields, connection)
    if new_key == "":
        # Cleared before the model's checks: naming a variable replaces a stored key, and the
        # one-key-source constraint must see the row as it will be saved.
        connection.api_key_encrypted = ""
    if not errors:
        try:
            connection.full_clean(exclude=["created_by", "users", "groups"])
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationFailed(details=errors)
    return new_key, groups


def _check_endpoint(
    errors: dict[str, list[str]], fields: dict[str, Any], connection: Connection
) -> None:
    """Name, kind, provider and base URL."""
    if "name" in fields:
        connection.name = _text(errors, "name", fields["name"], max_chars=120)
        if "name" not in errors and not connection.name:
            errors["name"] = ["This field may not be blank."]
    if "kind" in fields:
        kind = fields["kind"]
        if kind not in Connection.Kind.values or kind == Connection.Kind.BUILTIN:
            choices = ", ".join(k for k in Connection.Kind.values if k != "builtin")
            errors["kind"] = [f"One of: {choices}."]
        else:
            connection.kind = kind
    if "provider" in fields:
        connection.provider = _text(errors, "provider", fields["provider"], max_chars=40).lower()
    if connection.kind == Connection.Kind.LITELLM and "kind" not in errors:
        if not provider_policy.ENV_NAME.match(connection.provider or "-") or (
            connection.provider == provider_policy.BUILTIN_PROVIDER
        ):
            errors.setdefault("provider", ["A litellm provider prefix, e.g. groq or mistral."])
    elif "provider" in fields and connection.provider:
        errors.setdefault("provider", ["Only a connection of kind litellm names a provider."])
    if "base_url" in fields:
        connection.base_url = _text(errors, "base_url", fields["base_url"], max_chars=500)
        if connection.base_url and not provider_policy.api_base_is_http(connection.base_url):
            errors["base_url"] = [
                "Must be a plain http(s) URL: no user name or password, query or fragment."
            ]
    if (
        connection.kind in (Connection.Kind.OPENAI, Connection.Kind.OLLAMA)
        and not connection.base_url
        and "base_url" not in errors
        and "kind" not in errors
    ):
        errors["base_url"] = ["Required for this kind (e.g. https://api.openai.com/v1)."]


def _check_key(
    errors: dict[str, list[str]], fields: dict[str, Any], connection: Connection
) -> str | None:
    """The key or the name of its variable: the new key (``None``: unchanged, ``""``: cleared)."""
    new_key: str | None = None
    if "api_key" in fields:
        value = fields["api_key"]
        if value is None:
            new_key = ""
        else:
            new_key = _text(errors, "api_key", value, max_chars=API_KEY_MAX_CHARS)
            refusal = crypto.store_refusal("a key") if new_key else None
            if "api_key" not in errors and refusal:
                errors["api_key"] = [
                    f"{refusal} (name an allowed environment variable instead, or ask the "
                    "operator)."
                ]
    if "api_key_env" in fields:
        value = fields["api_key_env"] if fields["api_key_env"] is not None else ""
        connection.api_key_env = _text(errors, "api_key_env", value, max_chars=128)
        if connection.api_key_env and not provider_policy.key_env_allowed(connection.api_key_env):
            errors["api_key_env"] = [
                "Not an allowed provider key variable (PROVIDER_KEY_ENV_ALLOWED)."
            ]
    if new_key and "api_key_env" not in fields:
        connection.api_key_env = ""  # giving a key replaces a named variable
    if new_key and connection.api_key_env and "api_key_env" not in errors:
        errors["api_key"] = ["Give a key or the name of its variable, not both."]
    if connection.api_key_env and new_key is None:
        new_key = ""  # naming a variable clears a stored key
    return new_key


def _check_access(
    errors: dict[str, list[str]], fields: dict[str, Any], connection: Connection
) -> list[Group] | None:
    """Who may use it: ``public`` and the groups (``None``: unchanged)."""
    groups: list[Group] | None = None
    if "public" in fields:
        if not isinstance(fields["public"], bool):
            errors["public"] = ["Must be true or false."]
        else:
            connection.public = fields["public"]
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
    return groups


def connection_key_store(connection: Connection, new_key: str | None) -> None:
    """Encrypt ``new_key`` onto the (unsaved) row: ``None`` keeps the stored key, "" clears it."""
    if new_key is None:
        return
    connection.api_key_encrypted = crypto.key_encrypt(new_key) if new_key else ""


@transaction.atomic
def connection_create(*, user: AbstractBaseUser, **fields: Any) -> Connection:
    _staff(user)
    for required in ("name", "kind"):
        if required not in fields:
            raise ValidationFailed(details={required: ["This field is required."]})
    connection = Connection(created_by=user)  # type: ignore[misc]
    new_key, groups = check_connection_fields(fields=fields, connection=connection)
    connection_key_store(connection, new_key)
    saved_unless_taken(connection, field="name")
    if groups is not None:
        connection.groups.set(groups)
    log.info("connection_created", connection_id=connection.pk, kind=connection.kind)
    return connection


KEY_AGAIN = (
    "The server's address changed: send its key again, or the name of its variable "
    "(a key is never sent to an address it was not given for)."
)


def connection_moved_check(connection: Connection, *, old_base: str, new_key: str | None) -> None:
    """A connection whose ``base_url`` moved from ``old_base`` to another scheme, host or port
    keeps no stored key (``new_key`` None: unchanged) unless it is given again, or a variable
    named, or the key cleared; and its listed models go (another server's, listed again on the
    next refresh). The API and the admin both check here: a blank ``api_key_env`` sent with the
    move, or the admin's form, kept the key and sent it to the new server."""
    if connection.base_url == old_base:
        return
    moved = not provider_policy.same_origin(old_base, connection.base_url)
    if moved and connection.api_key_encrypted and new_key is None:
        raise ValidationFailed(details={"api_key": [KEY_AGAIN]})
    connection.model_list, connection.models_refreshed_at = [], None


@transaction.atomic
def connection_update(
    *, user: AbstractBaseUser, connection_id: object, **fields: Any
) -> Connection:
    connection = connection_get_for_staff(user=user, connection_id=connection_id)
    if connection.kind == Connection.Kind.BUILTIN and set(fields) - {"public", "groups"}:
        raise ValidationFailed(
            details={"kind": ["The built-in connection only changes who may use it."]}
        )
    old_base = connection.base_url
    new_key, groups = check_connection_fields(fields=fields, connection=connection)
    connection_moved_check(connection, old_base=old_base, new_key=new_key)
    connection_key_store(connection, new_key)
    saved_unless_taken(connection, field="name")
    if groups is not None:
        connection.groups.set(groups)
    log.info("connection_updated", connection_id=connection.pk, fields=sorted(fields))
    return connection


def connection_delete(*, user: AbstractBaseUser, connection_id: object) -> None:
    connection = connection_get_for_staff(user=user, connection_id=connection_id)
    if connection.kind == Connection.Kind.BUILTIN:
        raise ValidationFailed(details={"kind": ["The built-in connection cannot be deleted."]})
    try:
        connection.delete()
    except ProtectedError as exc:
        raise ValidationFailed(
            "Bots still use this connection.",
            details={"bots": sorted(b.pk for b in exc.protected_objects)},
        ) from None
    log.info("connection_deleted", connection_id=connection_id)


def connection_api_key(connection: Connection) -> str:
    """The key in clear, for a call (raises ``crypto.KeyUnavailable``); "" when none is stored."""
    if not connection.api_key_encrypted:
        return ""
    return crypto.key_decrypt(connection.api_key_encrypted)


def connection_models_discover(connection: Connection) -> list[dict[str, object]]:
    """The connection's models as its server (or litellm) lists them; raises ``ValidationFailed``
    with a clear reason when the list cannot be read."""
    if connection.kind == Connection.Kind.BUILTIN:
        return [dict(m) for m in BUILTIN_MODELS]
    try:
        if connection.base_url:
            api_key = connection_api_key(connection)
            if not api_key and connection.api_key_env:
                api_key = os.environ.get(connection.api_key_env, "")
            found = discovery.models_list_openai_compatible(
                base_url=connection_call_base(connection), api_key=api_key
            )
        else:
            found = discovery.models_list_litellm(provider=connection_prefix(connection))
    except crypto.KeyUnavailable as exc:
        raise ValidationFailed(str(exc), details={"api_key": [str(exc)]}) from None
    except discovery.DiscoveryFailed as exc:
        message = f"Could not list the models of {connection.name}: {exc}."
        raise ValidationFailed(message, details={"base_url": [str(exc)]}) from None
    return [m.as_dict() for m in found]


def connection_models_refresh(*, user: AbstractBaseUser, connection_id: object) -> Connection:
    connection = connection_get_for_staff(user=user, connection_id=connection_id)
    with heavy_request(user_id=user.pk, kind="refresh_models"):
        connection_release()  # the server may take seconds to list its models
        models = connection_models_discover(connection)
    Connection.objects.filter(pk=connection.pk).update(
        model_list=models, models_refreshed_at=timezone.now()
    )
    connection.refresh_from_db(fields=["model_list", "models_refreshed_at"])
    log.info("connection_models_refreshed", connection_id=connection.pk, models=len(models))
    return connection
