"""The Redis channel layer, with a receive that can be cancelled without losing another
socket's frame (docs/api.md, the websocket's frames).

In channels-redis every websocket and ``/v1`` stream of one process reads from the process's one
Redis queue: whichever receive holds the layer's lock pops the next message (``BZPOPMIN``) and
hands it to the socket it is for. When that receive is cancelled — its socket closed, its stream
ended — after Redis popped a message but before the answer was read, the message is gone: a
delta, or the final frame, of a reply another socket of the process is streaming. With sockets
opening and closing all the time that happened under load (in one CI run's bench smoke, 1 of
50 turns at a steady 10 turns/s lost a delta).

Here a cancelled receive is not interrupted: it is ended by a message of its own. The read it
started goes on, delivers whatever it pops to its owner, and ends when the end marker addressed
to the departing channel comes back; the cancelled receive waits for that (one round trip to
Redis) and then ends as cancelled. Only when that cannot happen (Redis gone, no answer for
``END_TIMEOUT_SECONDS``, or a second cancellation as the event loop closes) is the read cancelled
after all.
"""

import asyncio
import contextlib
from typing import Any

import structlog
from channels_redis.core import RedisChannelLayer

log = structlog.get_logger(__name__)

# The message that ends a departing channel's read; no socket ever handles it.
RECEIVE_END = "layer.receive_end"
# A round trip to Redis ends a read; past this, Redis is taken for gone (channels-redis blocks
# its reads for 5 s at most).
END_TIMEOUT_SECONDS = 5.0


class CancelSafeRedisChannelLayer(RedisChannelLayer):
    async def receive(self, channel: str) -> Any:
        if "!" not in channel:  # a plain channel: no shared read, nothing to lose
            return await super().receive(channel)
        read = asyncio.ensure_future(super().receive(channel))
        try:
            return await asyncio.shield(read)
        except asyncio.CancelledError:
            if not read.done():
                await self._read_end(channel, read)
            raise

    async def _read_end(self, channel: str, read: asyncio.Future) -> None:
        """End ``read`` (a receive on ``channel``, whose owner is leaving) by sending it the end
        marker; a message for the departing channel that comes first is dropped with it. A
        second cancellation (the event loop closing) cancels the read outright."""
        try:
            await asyncio.wait_for(self.send(channel, {"type": RECEIVE_END}), END_TIMEOUT_SECONDS)
            message = await asyncio.wait_for(asyncio.shield(read), END_TIMEOUT_SECONDS)
            while message.get("type") != RECEIVE_END:
                read = asyncio.ensure_future(super().receive(channel))
                message = await asyncio.wait_for(asyncio.shield(read), END_TIMEOUT_SECONDS)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                # Redis unreachable or silent: nothing can be delivered now anyway.
                log.warning("channel_layer_read_end_failed", channel=channel, exc_info=True)
            read.cancel()
            with contextlib.suppress(BaseException):
                await read
