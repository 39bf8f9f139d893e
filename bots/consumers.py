"""Websocket adapter (CONTRACT §12): authenticate, authorise through a selector, validate frames,
call the same services as the REST API, relay the session group's frames."""

import asyncio
import json
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import close_old_connections

from bots import queries, realtime, services
from bots.command_check import check_send
from chat_platform.api import OUTAGE_ERRORS
from chat_platform.errors import NotFound, PlatformError, ServiceUnavailable, ValidationFailed
from chat_platform.jsontext import JSONTooDeep, json_loads

log = structlog.get_logger(__name__)

CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
SEND_UNAVAILABLE = (
    "The server is too busy or a service it needs is down, so your message was not sent. "
    "Send it again in a moment."
)


def _send_in_thread(**kwargs: Any) -> Any:
    # Runs off the consumer's thread: in embedded mode the turn runs eagerly inside this call,
    # and the socket must keep relaying its deltas (and accept generation.stop) meanwhile.
    close_old_connections()
    try:
        check_send(content=kwargs["content"], client_id=kwargs["client_id"])
        return services.session_message_send(**kwargs)
    finally:
        close_old_connections()


class SessionConsumer(AsyncWebsocketConsumer):
    # None until the handshake is authorised: a refused socket is accepted and then closed
    # (4401/4404), and a client may still send frames before that close reaches it.
    session_id: int | None = None
    group: str = ""

    async def connect(self) -> None:
        self.pending: set[asyncio.Task] = set()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_NOT_AUTHENTICATED)
            return
        try:
            session = await database_sync_to_async(queries.session_get_for_user)(
                user=user, session_id=self.scope["url_route"]["kwargs"]["session_id"]
            )
        except NotFound:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        self.session_id = session.pk
        self.group = realtime.session_group(session.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Accepted once subscribed: when the client sees the socket open, the session's frames
        # already reach it, and a message it sends at once is handled without waiting.
        await self.accept()

    async def _refuse(self, code: int) -> None:
        # A close code reaches the client only on an accepted socket (before accept, the
        # handshake would just fail with HTTP 403).
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.session_id is None:
            # Refused: the close frame is already sent, and nothing may be sent after it.
            return
        try:
            frame = json_loads(text_data if text_data is not None else bytes_data or b"")
        except JSONTooDeep as exc:
            await self._send_error(ValidationFailed(f"The frame is not valid: {exc}"))
            return
        except (TypeError, ValueError):
            await self._send_error(ValidationFailed("The frame is not valid JSON."))
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            await self._send_error(ValidationFailed("A frame is a JSON object with a 'type'."))
            return
        kind = frame["type"]
        if kind == "message.send":
            task = asyncio.create_task(self._message_send(frame))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
        elif kind == "generation.stop":
            await self._call(services.generation_stop, session_id=self.session_id)
        else:
            await self._send_error(
                ValidationFailed(f"Unknown frame type {kind!r}.", details={"type": kind})
            )

    async def _message_send(self, frame: dict) -> None:
        try:
            await sync_to_async(_send_in_thread, thread_sensitive=False)(
                user=self.scope["user"],
                session_id=self.session_id,
                content=frame.get("content"),
                client_id=frame.get("client_id"),
            )
        except PlatformError as exc:
            await self._send_error(exc)
        except OUTAGE_ERRORS:
            # The database or Redis is down or saturated (e.g. no pooled connection in time
            # during a burst): the send's transaction rolled back (what runs after its commit
            # does not raise these), so say so and how to recover.
            log.exception("ws_send_unavailable", session_id=self.session_id)
            await self._send_error(ServiceUnavailable(SEND_UNAVAILABLE))
        except Exception:
            log.exception("ws_send_failed", session_id=self.session_id)
            await self._send_error(PlatformError("The message could not be sent."))

    async def _call(self, func: Any, **kwargs: Any) -> Any:
        try:
            return await database_sync_to_async(func)(user=self.scope["user"], **kwargs)
        except PlatformError as exc:
            await self._send_error(exc)
            return None

    async def _send_error(self, exc: PlatformError) -> None:
        await self.send(text_data=json.dumps({"type": "error", "error": exc.as_dict()}))

    async def chat_frame(self, event: dict) -> None:
        await self.send(text_data=json.dumps(event["frame"]))
