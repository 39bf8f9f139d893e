"""Websocket adapter (docs/api.md): authenticate, authorise through a selector, validate frames,
call the same services as the REST API, relay the session group's frames."""

import asyncio
import json
import time
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.db import close_old_connections

from bots import queries
from bots.command_check import check_send
from bots.models import ChatSession
from chat_platform import realtime
from chat_platform.errors import (
    NotAuthenticated,
    NotFound,
    PlatformError,
    ServiceUnavailable,
    ValidationFailed,
)
from chat_platform.jsontext import JSONTooDeep, json_loads
from chat_platform.outage import OUTAGE_ERRORS
from chat_platform.realtime_auth import AUTH_UNAVAILABLE, credential_valid
from turns.services import message as message_services
from turns.services import send as send_services

log = structlog.get_logger(__name__)

CLOSE_NOT_AUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
# A service the socket needs (Redis: the channel layer; or PostgreSQL) is down. The socket is
# accepted and then closed with this code and reason, which a browser can read (a refused
# handshake is only "1006" to it); the page retries with back-off and resyncs over REST.
CLOSE_UNAVAILABLE = 4503
UNAVAILABLE_REASON = "service unavailable"
SEND_UNAVAILABLE = (
    "The server is too busy or a service it needs is down, so your message was not sent. "
    "Send it again in a moment."
)

# What a socket's received sends may hold in memory while they wait to be stored (their frames'
# sizes): past it, the socket takes no more frames until the drain has stored some, so a
# client's flood waits in the server's and the network's buffers, not in the web process
# (docs/chat-turn.md, "One socket, one order"). Eight sends of the largest size.
SENDS_WAITING_MAX_BYTES = 8 * 1024 * 1024

# How often an open socket that only reads is checked again before it relays the chat's frames:
# whether its credential still signs its user in (chat_platform.realtime_auth.credential_valid;
# each send is checked anyway). One statement a minute while frames flow.
CREDENTIAL_RECHECK_SECONDS = 60.0


# How much of an unknown frame type the error names: a client's 100 KB type came back whole,
# twice (docs/api.md, the ``error`` frame).
FRAME_TYPE_ECHO_CHARS = 100


def _unknown_type(kind: str) -> ValidationFailed:
    shown = kind[:FRAME_TYPE_ECHO_CHARS]
    if len(kind) > FRAME_TYPE_ECHO_CHARS:
        message = f"Unknown frame type {shown!r}… ({len(kind)} characters)."
    else:
        message = f"Unknown frame type {shown!r}."
    return ValidationFailed(message, details={"type": shown})


def _send_in_thread(scope: dict, **kwargs: Any) -> None:
    """Store one send, off the consumer's thread. Its turn goes to the task queue after commit
    (in embedded mode, to the in-process pool: chat_platform/inprocess.py), never runs here.
    ``NotAuthenticated`` when the socket's credential no longer signs its user in."""
    close_old_connections()
    try:
        session = _credential_checked(scope, kwargs["session_id"])
        check_send(content=kwargs["content"], client_id=kwargs["client_id"])
        send_services.session_message_send(**kwargs, session=session)
    finally:
        close_old_connections()


def _credential_checked(scope: dict, session_id: int) -> ChatSession | None:
    """``NotAuthenticated`` unless the socket's credential still signs its user in. A token's
    socket reads its chat with its token, one statement (``queries.token_user_and_session``):
    the chat, handed to the send, which reads it only when this found none; else None."""
    session = None
    if "auth_token" in scope and queries.user_bot_scope(scope["user"]) is None:
        owner, session = queries.token_user_and_session(
            key=scope["auth_token"], session_id=session_id
        )
        valid = credential_valid(scope, token_owner=owner)
    else:
        valid = credential_valid(scope)
    if not valid:
        raise NotAuthenticated("Your sign-in has ended: sign in again.")
    return session


def _credential_valid_in_thread(scope: dict) -> bool:
    close_old_connections()
    try:
        return credential_valid(scope)
    finally:
        close_old_connections()


def _client_gone_errors() -> tuple[type[BaseException], ...]:
    """What the ASGI server raises from ``send`` once the client has closed (uvicorn's
    ``ClientDisconnected``, an OSError): a page that moved on while its socket was being
    answered. Empty where the server has no such class (daphne drops such sends)."""
    try:
        from uvicorn.protocols.utils import ClientDisconnected
    except ImportError:
        return ()
    return (ClientDisconnected,)


CLIENT_GONE_ERRORS = _client_gone_errors()


# The running drains, referenced so none is collected while it works
# (asyncio keeps only a weak reference to a task).
_DRAINS: set[asyncio.Task] = set()


class SessionConsumer(AsyncWebsocketConsumer):
    # None until the handshake is authorised: a refused socket is accepted and then closed
    # (4401/4404/4503), and a client may still send frames before that close reaches it.
    session_id: int | None = None
    group: str = ""
    # Set once the handshake was answered (accepted or refused), and once a close was sent.
    answered: bool = False
    closing: bool = False
    # Set when the channel-layer receive failed (Redis down); it is not tried again.
    layer_lost: bool = False
    # Set when the client's socket is gone: sends still queued are stored, errors not sent.
    gone: bool = False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        except CLIENT_GONE_ERRORS:
            # The client closed before the server's answer reached it (a page that moved on
            # while its socket opened): nothing failed, but no disconnect will come to leave
            # the group the socket had joined.
            log.info("ws_client_left_early", session_id=self.session_id)
            await self._leave_group()
        except Exception:
            # The server answers this with HTTP 500 (before accept) or close 1011: say why.
            log.exception("ws_consumer_failed", session_id=self.session_id)
            raise
        finally:
            # Ended without a disconnect (cancelled, or failed): the drain still ends, after
            # the sends already received, rather than wait forever on an empty queue.
            self._drain_end()

    # The channel layer's receive runs beside the client's frames for the socket's whole life
    # (AsyncConsumer.__call__ sets it, await_many_dispatch reads it back). When Redis is down it
    # raises, which would end the application with a traceback and the client with HTTP 500 or
    # 1006; the guarded receive turns that into one ``realtime.unavailable`` event instead.
    @property
    def channel_receive(self) -> Any:
        return self._guarded_channel_receive

    @channel_receive.setter
    def channel_receive(self, layer_receive: Any) -> None:
        self._layer_receive = layer_receive

    async def _guarded_channel_receive(self) -> dict:
        if self.layer_lost:
            await asyncio.Event().wait()  # never again; cancelled when the consumer ends
        try:
            return await self._layer_receive()
        except OUTAGE_ERRORS:
            self.layer_lost = True
            log.exception("ws_channel_layer_unavailable", session_id=self.session_id)
            return {"type": "realtime.unavailable"}

    async def dispatch(self, message: dict) -> None:
        # channels' own dispatch first closes old database connections on the one
        # thread-sensitive thread, a hop there and back for every frame relayed (a dozen a
        # turn), though relaying one touches no database. Every database call of this consumer
        # closes them itself, around the call (``database_sync_to_async``, ``_send_in_thread``):
        # docs/performance.md "A turn's CPU, sixth pass".
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def realtime_unavailable(self, event: dict) -> None:
        # Before the handshake is answered, connect() sees layer_lost and refuses with 4503.
        if self.answered and not self.closing:
            await self._close(CLOSE_UNAVAILABLE, UNAVAILABLE_REASON)

    async def connect(self) -> None:
        # The socket's sends, in the order received, handled one at a time by ``_drain``
        # (docs/chat-turn.md "One socket, one order"); ``None`` ends the drain.
        self.sends: asyncio.Queue[tuple[dict, int] | None] = asyncio.Queue()
        self.sends_waiting_bytes = 0
        self.sends_stored = asyncio.Event()
        self.drain: asyncio.Task | None = None
        if self.scope.get(AUTH_UNAVAILABLE):  # the credential could not be read (logged)
            await self._refuse(CLOSE_UNAVAILABLE, UNAVAILABLE_REASON)
            return
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
        except OUTAGE_ERRORS:
            log.exception("ws_connect_unavailable", user_id=user.pk)
            await self._refuse(CLOSE_UNAVAILABLE, UNAVAILABLE_REASON)
            return
        group = realtime.session_group(session.pk)
        realtime.frames_listen_here()
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except OUTAGE_ERRORS:
            log.exception("ws_connect_unavailable", session_id=session.pk)
            await self._refuse(CLOSE_UNAVAILABLE, UNAVAILABLE_REASON)
            return
        self.group = group
        if self.layer_lost:
            log.warning("ws_connect_unavailable", session_id=session.pk, cause="channel_layer")
            await self._refuse(CLOSE_UNAVAILABLE, UNAVAILABLE_REASON)
            return
        self.session_id = session.pk
        self.credential_checked_at = time.monotonic()
        # Accepted once subscribed: when the client sees the socket open, the session's frames
        # already reach it, and a message it sends at once is handled without waiting.
        self.answered = True
        self.drain = asyncio.create_task(self._drain())
        _DRAINS.add(self.drain)
        self.drain.add_done_callback(_DRAINS.discard)
        await self.accept()

    async def _refuse(self, code: int, reason: str | None = None) -> None:
        # A close code reaches the client only on an accepted socket (before accept, the
        # handshake would just fail with HTTP 403).
        self.answered = True
        await self.accept()
        await self._close(code, reason)

    async def _close(self, code: int, reason: str | None = None) -> None:
        self.closing = True
        await self.close(code=code, reason=reason)

    def _drain_end(self) -> None:
        if getattr(self, "drain", None) is not None and not self.gone:
            # Sends already received are still stored, in order; the drain then ends.
            self.sends.put_nowait(None)
        self.gone = True

    async def disconnect(self, code: int) -> None:
        self._drain_end()
        await self._leave_group()

    async def _leave_group(self) -> None:
        if self.group:
            group, self.group = self.group, ""
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except OUTAGE_ERRORS:
                # Redis is down: the membership expires with the group (channels-redis expiry).
                log.warning("ws_group_discard_failed", session_id=self.session_id, exc_info=True)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.session_id is None or self.closing:
            # Refused or closing: the close frame is already sent, and nothing may follow it.
            return
        raw = text_data if text_data is not None else bytes_data or b""
        try:
            frame = json_loads(raw)
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
            await self._queue_send(frame, len(raw))
        elif kind == "generation.stop":
            # Not queued: a stop acts at once, never behind sends waiting their turn. Only while
            # the socket's credential still signs its user in, as a send: a revoked token's
            # socket stopped the owner's replies.
            try:
                valid = await sync_to_async(_credential_valid_in_thread, thread_sensitive=False)(
                    self.scope
                )
            except OUTAGE_ERRORS:
                await self._send_error(ServiceUnavailable(SEND_UNAVAILABLE))
                return
            if not valid:
                await self._close(CLOSE_NOT_AUTHENTICATED)
                return
            await self._call(message_services.generation_stop, session_id=self.session_id)
        else:
            await self._send_error(_unknown_type(kind))

    async def _queue_send(self, frame: dict, size: int) -> None:
        """Queue a send for the drain once what already waits leaves room for its ``size``
        (SENDS_WAITING_MAX_BYTES; a send alone always fits)."""
        while self.sends_waiting_bytes and (
            self.sends_waiting_bytes + size > SENDS_WAITING_MAX_BYTES
        ):
            self.sends_stored.clear()
            await self.sends_stored.wait()
        self.sends_waiting_bytes += size
        self.sends.put_nowait((frame, size))

    async def _drain(self) -> None:
        """Hand the socket's sends to the service one at a time, in the order received: each is
        stored (its seq allocated) before the next starts; its turn runs elsewhere (a worker, or
        embedded mode's task threads), so the next send never waits for a reply."""
        while (queued := await self.sends.get()) is not None:
            frame, size = queued
            try:
                await self._message_send(frame)
            finally:
                self.sends_waiting_bytes -= size
                self.sends_stored.set()

    async def _message_send(self, frame: dict) -> None:
        try:
            await sync_to_async(_send_in_thread, thread_sensitive=False)(
                self.scope,
                user=self.scope["user"],
                session_id=self.session_id,
                content=frame.get("content"),
                client_id=frame.get("client_id"),
                # Rooms in manual mode: the participant that answers (as over REST).
                reply_as=frame.get("reply_as"),
            )
        except NotAuthenticated:
            # Signed out, its password changed or reset, or the account closed: nothing is
            # stored, and the socket ends as a handshake would now be refused.
            if not (self.closing or self.gone):
                await self._close(CLOSE_NOT_AUTHENTICATED)
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
        if self.closing or self.gone:
            return
        await self.send(text_data=json.dumps({"type": "error", "error": exc.as_dict()}))

    async def chat_frame(self, event: dict) -> None:
        if self.closing or self.gone:
            return
        if time.monotonic() - self.credential_checked_at >= CREDENTIAL_RECHECK_SECONDS:
            try:
                valid = await sync_to_async(_credential_valid_in_thread, thread_sensitive=False)(
                    self.scope
                )
            except OUTAGE_ERRORS:  # the database is down: relay, and check at the next frame
                log.warning("ws_credential_check_unavailable", session_id=self.session_id)
                valid = True
            else:
                self.credential_checked_at = time.monotonic()
            if not valid:
                await self._close(CLOSE_NOT_AUTHENTICATED)
                return
        frame = event["frame"]
        if frame["type"] == realtime.CHAT_DELETED:
            await self._close(CLOSE_NOT_FOUND)
            return
        await self.send(text_data=json.dumps(frame))


class NoSuchPathConsumer(AsyncWebsocketConsumer):
    """A websocket path that names no session: accepted and closed 4404 (a close code reaches
    the client only on an accepted socket), whoever asks."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=CLOSE_NOT_FOUND)
