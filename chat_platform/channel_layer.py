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

So the process's shared read is one round trip a message: ``BZPOPMIN``. channels-redis guards
each read against cancellation with a backup queue (a script that restores it, the pop, a copy
into it, and a task that empties it again: four round trips a frame), which a read that is never
interrupted does not need. A plain channel (no ``!``: read by one consumer, not shared) keeps
channels-redis's own read.
"""

import asyncio
import contextlib
import hashlib
import os
import threading
import time
from typing import Any

import redis
import structlog
from channels_redis.core import RedisChannelLayer
from redis.exceptions import NoScriptError

log = structlog.get_logger(__name__)

# The message that ends a departing channel's read; no socket ever handles it.
RECEIVE_END = "layer.receive_end"
# A round trip to Redis ends a read; past this, Redis is taken for gone (channels-redis blocks
# its reads for 5 s at most).
END_TIMEOUT_SECONDS = 5.0

# A group send in one round trip (docs/performance.md, "A turn's CPU, fourth pass"): what
# channels-redis does in four (drop expired members, read the members, drop expired messages,
# push), in one script, given the members the sender saw last time. When the group's members
# are not those, nothing is pushed and the script answers the members: the sender serialises
# for them and sends again. KEYS: the group, then the channel keys of the expected members.
# ARGV: the group's and the messages' expiry cutoffs, the expiry, the expected members joined by
# newlines (a channel name holds none), the number of messages, then per channel key its
# capacity and each message's score and body.
_GROUP_SEND = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1])
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
if table.concat(members, '\\n') ~= ARGV[4] then
  return members
end
local m = tonumber(ARGV[5])
local over = 0
local a = 6
for i = 2, #KEYS do
  local capacity = tonumber(ARGV[a])
  a = a + 1
  redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, ARGV[2])
  for j = 1, m do
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < capacity then
      redis.call('ZADD', KEYS[i], ARGV[a], ARGV[a + 1])
      redis.call('EXPIRE', KEYS[i], ARGV[3])
    else
      over = over + 1
    end
    a = a + 2
  end
end
return over
"""
_GROUP_SEND_SHA = hashlib.sha1(_GROUP_SEND.encode()).hexdigest()  # noqa: S324 (Redis's name)
# Tries with the members the script answered before a send falls back to channels-redis's own
# (members joining and leaving between every try).
_GROUP_SEND_TRIES = 3
# The members last seen per group, kept for at most this many groups (a process's live chats).
_MEMBERS_KEPT = 4096


# A send from a sync thread waits this long for Redis before it counts as failed.
SEND_NOW_TIMEOUT_SECONDS = 10.0


class CancelSafeRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._members: dict[str, list[str]] = {}  # group -> its members at the last send
        self._last_score = 0.0
        self._score_lock = threading.Lock()
        self._blocking: tuple[int, redis.Redis] | None = None  # (pid, client) for send_now

    async def group_send(self, group: str, message: dict) -> None:
        await self.group_send_many(group, [message])

    def group_send_many_now(self, group: str, messages: list[dict]) -> bool:
        """``group_send_many`` from a sync thread (a turn's), on a blocking connection of the
        process's own: the same one script, without a hand-over to an event loop's thread and
        back, which cost a frame three times the script's own CPU (docs/performance.md, "Frames
        without a hand-over"). False when it cannot be one script (a sharded layer, members that
        keep changing): the caller then sends through the event loop."""
        if self.ring_size != 1 or not isinstance(self.hosts[0].get("address"), str):
            return False
        assert self.require_valid_group_name(group), "Group name not valid"
        client = self._blocking_client()
        members = self._members.get(group, [])
        for _ in range(_GROUP_SEND_TRIES):
            keys, argv = self._group_send_call(group, members, messages)
            try:
                answer = client.evalsha(_GROUP_SEND_SHA, len(keys), *keys, *argv)
            except NoScriptError:  # a Redis that has not seen it (restarted, flushed)
                answer = client.eval(_GROUP_SEND, len(keys), *keys, *argv)
            if not isinstance(answer, list):
                break
            members = [name.decode("utf8") for name in answer]
        else:
            return False
        self._members_seen(group, members, answer)
        return True

    def _blocking_client(self) -> redis.Redis:
        blocking = self._blocking
        if blocking is None or blocking[0] != os.getpid():  # a forked child makes its own
            host = self.hosts[0]
            options = {
                key: value
                for key, value in host.items()
                if key not in ("address", "socket_timeout", "max_connections")
            }  # what else the layer's own connections are given (credentials, TLS)
            client = redis.Redis.from_url(
                host["address"],
                **{"socket_timeout": SEND_NOW_TIMEOUT_SECONDS, "socket_connect_timeout": 2}
                | options,
            )
            blocking = self._blocking = (os.getpid(), client)
        return blocking[1]

    def _members_seen(self, group: str, members: list[str], over: int) -> None:
        if len(self._members) >= _MEMBERS_KEPT:
            self._members.clear()
        if members:
            self._members[group] = members
        else:
            self._members.pop(group, None)
        if over > 0:
            log.info("channel_layer_over_capacity", group=group, channels=over)

    async def group_send_many(self, group: str, messages: list[dict]) -> None:
        """Send ``messages``, in order, to the group: what as many ``group_send`` calls do,
        in one round trip to Redis when the group's members are those of the last send to it."""
        if self.ring_size != 1:  # sharded: the group and its channels may be on other hosts
            for message in messages:
                await super().group_send(group, message)
            return
        assert self.require_valid_group_name(group), "Group name not valid"
        connection = self.connection(0)
        members = self._members.get(group, [])
        for _ in range(_GROUP_SEND_TRIES):
            answer = await self._group_send_script(
                connection, *self._group_send_call(group, members, messages)
            )
            if not isinstance(answer, list):
                break
            members = [name.decode("utf8") for name in answer]
        else:
            for message in messages:
                await super().group_send(group, message)
            self._members.pop(group, None)
            return
        self._members_seen(group, members, answer)

    def _group_send_call(
        self, group: str, members: list[str], messages: list[dict]
    ) -> tuple[list, list]:
        """The script's KEYS and ARGV (``_GROUP_SEND``) that send ``messages`` to ``group``,
        given the members seen last; the one layout both kinds of send use."""
        keys, args = self._group_send_args(members, messages)
        now = int(time.time())
        argv = [
            now - self.group_expiry, now - int(self.expiry), int(self.expiry),
            "\n".join(members), len(messages), *args,
        ]  # fmt: skip
        return [self._group_key(group), *keys], argv

    def _group_send_args(self, members: list[str], messages: list[dict]) -> tuple[list, list]:
        """The channel keys of ``members`` and, per key, its capacity and each message's score
        and body (channels-redis's own mapping and serialisation, message by message)."""
        if not members:
            return [], []
        mapped = [self._map_channel_keys_to_connection(members, m) for m in messages]
        keys = mapped[0][0][0]  # one host: every key is on connection 0
        scores = []
        with self._score_lock:  # the event loop's thread and the turns' threads send
            for _ in messages:  # strictly increasing: a channel's messages leave in this order
                self._last_score = max(time.time(), self._last_score + 1e-6)
                scores.append(self._last_score)
        args: list = []
        for key in keys:
            args.append(mapped[0][2][key])
            for score, (_, bodies, _) in zip(scores, mapped, strict=True):
                args += [score, bodies[key]]
        return keys, args

    async def _group_send_script(self, connection: Any, keys: list, argv: list) -> Any:
        try:
            return await connection.evalsha(_GROUP_SEND_SHA, len(keys), *keys, *argv)
        except NoScriptError:  # a Redis that has not seen it (restarted, flushed)
            return await connection.eval(_GROUP_SEND, len(keys), *keys, *argv)

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

    async def _brpop_with_clean(self, index: int, channel: str, timeout: int) -> Any:
        if not channel.endswith("!"):
            return await super()._brpop_with_clean(index, channel, timeout)
        result = await self.connection(index).bzpopmin(channel, timeout=timeout)
        return None if result is None else result[1]

    async def _clean_receive_backup(self, index: int, channel: str) -> None:
        if not channel.endswith("!"):  # the shared read keeps no backup (above)
            await super()._clean_receive_backup(index, channel)

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
