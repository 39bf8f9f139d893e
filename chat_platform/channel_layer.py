"""The Redis channel layer, with a receive that can be cancelled without losing another
socket's frame (docs/api.md, the websocket's frames).

In channels-redis every websocket and ``/v1`` stream of one process reads from the process's one
Redis queue: whichever receive holds the layer's lock pops the next message (``BZPOPMIN``) and
hands it to the socket it is for. When that receive is cancelled — its socket closed, its stream
ended — after Redis popped a message but before the answer was read, the message is gone: a
delta, or the final frame, of a reply another socket of the process is streaming. With sockets
opening and closing all the time that happened under load (in one CI run's bench smoke, 1 of
50 turns at a steady 10 turns/s lost a delta).

Here no socket's receive pops: one read per process and event loop (``_read``) pops the queue
and puts each message in the buffer of the channel it is for, and a socket's receive only waits
on its own buffer. Cancelling a receive cancels that wait, never a pop. (Before, the departing
socket's read went on until an end marker addressed to it came back through the queue, and was
cancelled after all when that took more than 5 s: in a burst of 500 the queue ran that far
behind, and a frame the read had popped for another socket went with it —
docs/performance.md, "A delta lost in a burst".)

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
from redis.exceptions import NoScriptError, ResponseError

log = structlog.get_logger(__name__)

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


# The most messages the process's read takes off its list in one round trip (docs/performance.md,
# "A delta lost in a burst": under a burst the list runs behind).
READ_BATCH = 100

# A send from a sync thread waits this long for Redis before it counts as failed.
SEND_NOW_TIMEOUT_SECONDS = 10.0


class CancelSafeRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._members: dict[str, list[str]] = {}  # group -> its members at the last send
        self._last_score = 0.0
        self._score_lock = threading.Lock()
        self._blocking: tuple[int, redis.Redis] | None = None  # (pid, client) for send_now
        self._reader: asyncio.Task | None = None  # the process's one read of its list
        self._departed: dict[str, float] = {}  # channel -> when its socket left (monotonic)
        self._batch_pops = True  # until a Redis older than 7 says it has no BZMPOP

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
        """The next message for ``channel``. A ``!`` channel (a socket's, a ``/v1`` stream's)
        waits on its buffer, which the process's one read (``_read``) fills: cancelling it (the
        socket closing) cancels a wait, never a pop, so no other socket's frame goes with it."""
        if "!" not in channel:  # a plain channel: no shared read, nothing to lose
            return await super().receive(channel)
        assert self.require_valid_channel_name(channel)
        real_channel = self.non_local_name(channel)
        assert real_channel.endswith(self.client_prefix + "!"), "Wrong client prefix"
        self.receive_count += 1
        self._departed.pop(channel, None)  # receiving again (a receive that timed out)
        getter: asyncio.Future | None = None
        try:
            while self.receive_buffer[channel].empty():
                reader = self._reader_running(real_channel)
                getter = asyncio.ensure_future(self.receive_buffer[channel].get())
                await asyncio.wait([getter, reader], return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    message = getter.result()
                    getter = None
                    break
                getter.cancel()
                getter = None
                if not reader.cancelled():
                    reader.result()  # Redis failed it: the caller hears why
                # It was stopped (its pools closed): the next turn of the loop starts another.
            else:
                message = self.receive_buffer[channel].get_nowait()
        except asyncio.CancelledError:
            # The socket is leaving: what waits for it goes with it, nothing else does.
            if getter is not None:
                getter.cancel()
            self.receive_buffer.pop(channel, None)
            self._departed_add(channel)
            raise
        finally:
            self.receive_count -= 1
        if self.receive_buffer[channel].empty():
            del self.receive_buffer[channel]
        return message

    def _reader_running(self, real_channel: str) -> asyncio.Task:
        """The process's one read of its list, on this event loop, started if none runs."""
        loop = asyncio.get_running_loop()
        reader = self._reader
        if reader is not None and not reader.done():
            if reader.get_loop() is loop:
                return reader
            if not reader.get_loop().is_closed():
                raise RuntimeError(
                    "Two event loops are trying to receive() on one channel layer at once!"
                )
        reader = self._reader = loop.create_task(self._read(real_channel))
        reader.add_done_callback(_read_ended)
        return reader

    async def _read(self, real_channel: str) -> None:
        """Pop the process's list and hand each message to the buffer of the channel it is
        for (``_pop``: what waits, in one round trip). Nothing ever cancels this while a socket
        listens, so a message Redis has popped is always delivered. It ends between pops, when a
        wait of ``brpop_timeout`` brought nothing and nobody is receiving; or is cancelled when
        the layer's pools close, or with its event loop."""
        key = self.prefix + real_channel
        connection = self.connection(self.consistent_hash(real_channel))
        while True:
            bodies = await self._pop(connection, key)
            if not bodies:
                if self.receive_count == 0:
                    return
                continue
            for body in bodies:
                message = self.deserialize(body)
                channels = message.pop("__asgi_channel__", None)
                for channel in channels if isinstance(channels, list) else [channels]:
                    if channel is not None:
                        self.receive_buffer[channel].put_nowait(message)

    async def _pop(self, connection: Any, key: str) -> list[bytes]:
        """The messages waiting, oldest first, up to ``READ_BATCH`` in one round trip
        (``BZMPOP``, Redis 7); waits ``brpop_timeout`` for one when none is. On a Redis without
        it, one a round trip (``BZPOPMIN``)."""
        if self._batch_pops:
            try:
                popped = await connection.bzmpop(
                    self.brpop_timeout, 1, [key], min=True, count=READ_BATCH
                )
            except ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                self._batch_pops = False
            else:
                return [] if popped is None else [body for body, _ in popped[1]]
        popped = await connection.bzpopmin(key, timeout=self.brpop_timeout)
        return [] if popped is None else [popped[1]]

    def _departed_add(self, channel: str) -> None:
        """A channel whose socket left (its receive cancelled): what still comes for it is
        kept for a receive that comes back (a receive that timed out), for ``expiry`` at most,
        then dropped with its buffer, which nobody reads otherwise (one per closed socket that
        a frame was still on its way to: a chat's last frames after its reply completed)."""
        now = time.monotonic()
        self._departed.pop(channel, None)
        self._departed[channel] = now  # the dict keeps them oldest first
        while self._departed and now - next(iter(self._departed.values())) >= self.expiry:
            name = next(iter(self._departed))
            del self._departed[name]
            self.receive_buffer.pop(name, None)

    async def close_pools(self) -> None:
        reader = self._reader
        if (
            reader is not None
            and not reader.done()
            and reader.get_loop() is asyncio.get_running_loop()
        ):
            reader.cancel()  # its connection is about to close
            with contextlib.suppress(BaseException):
                await reader
        await super().close_pools()


def _read_ended(reader: asyncio.Task) -> None:
    if not reader.cancelled() and reader.exception() is not None:
        log.warning("channel_layer_read_failed", exc_info=reader.exception())
