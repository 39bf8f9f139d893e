"""The Redis channel layer's receive can be cancelled without losing another socket's frame
(chat_platform/channel_layer.py)."""

import asyncio
import threading

import pytest
from django.conf import settings

from chat_platform.channel_layer import CancelSafeRedisChannelLayer


def _layer_config() -> dict:
    return settings.CHANNEL_LAYERS["default"]["CONFIG"]


def _send_while_this_loop_waits(channel: str, message: dict) -> None:
    """Send from another thread and event loop while this one is blocked: Redis pops the message
    for the blocked read at once, and its answer waits in that read's socket, unread."""

    def send() -> None:
        other = CancelSafeRedisChannelLayer(**_layer_config())
        asyncio.run(other.send(channel, message))

    thread = threading.Thread(target=send)
    thread.start()
    thread.join()


async def test_a_closing_socket_s_read_never_takes_another_socket_s_frame_with_it():
    """Two sockets of one process: A's receive is the one blocked in Redis when B's frame
    arrives, and A closes (its receive is cancelled) before the answer is read. B still gets
    its frame, every time, and A's read ends."""
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == (
        "chat_platform.channel_layer.CancelSafeRedisChannelLayer"
    )
    layer = CancelSafeRedisChannelLayer(**_layer_config())  # this test's loop, this test's pools
    received = []
    try:
        for n in range(5):
            a, b = await layer.new_channel(), await layer.new_channel()
            read_a = asyncio.ensure_future(layer.receive(a))
            await asyncio.sleep(0.05)  # A's receive holds the lock and waits in BZPOPMIN
            read_b = asyncio.ensure_future(layer.receive(b))
            await asyncio.sleep(0.05)
            _send_while_this_loop_waits(b, {"type": "chat.frame", "n": n})
            read_a.cancel()
            received.append((await asyncio.wait_for(read_b, 10))["n"])
            # A's receive ended as cancelled, once its read had ended on its end marker.
            await asyncio.wait([read_a], timeout=10)
            assert read_a.cancelled()
        assert received == [0, 1, 2, 3, 4]
        assert layer.receive_count == 0
        assert dict(layer.receive_buffer) == {}
    finally:
        await layer.flush()


async def test_a_group_send_is_one_round_trip_to_redis(monkeypatch):
    """A group send is one command to Redis (channels-redis's own: four), two when the group's
    members changed since the last send to it; the frames arrive whole and in order, to every
    member, and a group nobody is in gets one command per send too (docs/performance.md)."""
    import redis.asyncio.client

    commands: list[str] = []
    execute = redis.asyncio.client.Redis.execute_command
    pipeline_execute = redis.asyncio.client.Pipeline.execute

    async def counted(self, *args, **kwargs):
        commands.append(str(args[0]))
        return await execute(self, *args, **kwargs)

    async def counted_pipeline(self, *args, **kwargs):
        commands.append("PIPELINE")
        return await pipeline_execute(self, *args, **kwargs)

    layer = CancelSafeRedisChannelLayer(**_layer_config())
    try:
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("g", a)
        monkeypatch.setattr(redis.asyncio.client.Redis, "execute_command", counted)
        monkeypatch.setattr(redis.asyncio.client.Pipeline, "execute", counted_pipeline)

        await layer.group_send("g", {"type": "chat.frame", "n": 0})  # members not seen yet
        assert len(commands) == 2
        commands.clear()
        await layer.group_send("g", {"type": "chat.frame", "n": 1})
        await layer.group_send_many(
            "g", [{"type": "chat.frame", "n": 2}, {"type": "chat.frame", "n": 3}]
        )
        assert commands == ["EVALSHA", "EVALSHA"]
        await layer.group_send("nobody", {"type": "chat.frame", "n": 0})
        assert commands == ["EVALSHA"] * 3
        monkeypatch.undo()

        await layer.group_add("g", b)  # a member joins: the next send tries twice
        await layer.group_send_many(
            "g", [{"type": "chat.frame", "n": 4}, {"type": "chat.frame", "n": 5}]
        )
        got_a = [(await asyncio.wait_for(layer.receive(a), 5))["n"] for _ in range(6)]
        got_b = [(await asyncio.wait_for(layer.receive(b), 5))["n"] for _ in range(2)]
        assert got_a == [0, 1, 2, 3, 4, 5]
        assert got_b == [4, 5]
    finally:
        await layer.flush()


async def test_the_frames_waiting_are_one_round_trip_to_redis_to_receive(monkeypatch):
    """The process's shared read takes what waits in its list with one command, ``BZMPOP`` (up
    to ``READ_BATCH``; channels-redis's own read: four a frame, a restore script, the pop, a copy
    into a backup queue and its removal); a plain channel, read by one consumer, keeps the
    backup (docs/performance.md). On a Redis without ``BZMPOP`` (before 7) it pops one frame a
    command, ``BZPOPMIN``, from then on."""
    import redis.asyncio.client
    from redis.exceptions import ResponseError

    commands: list[str] = []
    execute = redis.asyncio.client.Redis.execute_command

    async def counted(self, *args, **kwargs):
        commands.append(str(args[0]))
        return await execute(self, *args, **kwargs)

    layer = CancelSafeRedisChannelLayer(**_layer_config())
    try:
        a, b = await layer.new_channel(), await layer.new_channel()
        for n in range(3):
            await layer.send(a if n != 1 else b, {"type": "chat.frame", "n": n})
        monkeypatch.setattr(redis.asyncio.client.Redis, "execute_command", counted)
        got = [(await asyncio.wait_for(layer.receive(a), 5))["n"] for _ in range(2)]
        got.append((await asyncio.wait_for(layer.receive(b), 5))["n"])
        await layer.wait_received()
        assert got == [0, 2, 1]
        assert commands == ["BZMPOP", "BZMPOP"]  # the three frames, and the read's next wait
        commands.clear()

        await layer.send("plain.channel", {"type": "chat.frame", "n": 9})
        commands.clear()
        assert (await asyncio.wait_for(layer.receive("plain.channel"), 5))["n"] == 9
        await layer.wait_received()
        assert sorted(commands) == ["BZPOPMIN", "EVAL", "ZADD", "ZPOPMIN"]
    finally:
        monkeypatch.undo()
        await layer.flush()

    async def redis_6(self, *args, **kwargs):
        if str(args[0]) == "BZMPOP":
            raise ResponseError("unknown command 'BZMPOP', with args beginning with: '5' '1'")
        return await counted(self, *args, **kwargs)

    layer = CancelSafeRedisChannelLayer(**_layer_config())
    try:
        a = await layer.new_channel()
        for n in range(2):
            await layer.send(a, {"type": "chat.frame", "n": n})
        commands.clear()
        monkeypatch.setattr(redis.asyncio.client.Redis, "execute_command", redis_6)
        got = [(await asyncio.wait_for(layer.receive(a), 5))["n"] for _ in range(2)]
        assert got == [0, 1]
        assert commands == ["BZPOPMIN"] * 3
    finally:
        monkeypatch.undo()
        await layer.flush()


def test_a_send_from_a_sync_thread_is_one_command_on_a_blocking_client(monkeypatch):
    """``group_send_many_now`` (a turn's frames): the same one script as ``group_send_many``, sent
    from the calling thread; two commands when the members changed; in order, with the frames
    the event loop's sends put before them."""
    import redis

    commands: list[str] = []
    execute = redis.Redis.execute_command

    def counted(self, *args, **kwargs):
        commands.append(str(args[0]))
        return execute(self, *args, **kwargs)

    layer = CancelSafeRedisChannelLayer(**_layer_config())

    async def setup() -> str:
        a = await layer.new_channel()
        await layer.group_add("g2", a)
        await layer.group_send("g2", {"type": "chat.frame", "n": 0})  # through a loop
        return a

    a = asyncio.run(setup())
    monkeypatch.setattr(redis.Redis, "execute_command", counted)
    assert layer.group_send_many_now("g2", [{"type": "chat.frame", "n": 1}]) is True
    assert commands == ["EVALSHA"]
    layer._members.clear()  # as if the members had changed: one more try
    assert layer.group_send_many_now(
        "g2", [{"type": "chat.frame", "n": 2}, {"type": "chat.frame", "n": 3}]
    )
    assert commands == ["EVALSHA"] * 3
    monkeypatch.undo()

    async def receive_all() -> list[int]:
        try:
            return [(await asyncio.wait_for(layer.receive(a), 5))["n"] for _ in range(4)]
        finally:
            await layer.flush()

    assert asyncio.run(receive_all()) == [0, 1, 2, 3]


async def test_a_closing_socket_never_loses_another_socket_s_frame_under_a_backlog(monkeypatch):
    """The lost delta of a burst of 500 (docs/performance.md, "A delta lost in a burst"): a
    socket closes while the process's read of its list runs behind, so that its end marker
    cannot come back in time. Its read had already been handed B's frame by Redis, the answer
    on its way (a loaded process reads it late): that frame must still reach B, whole and in
    order, however long the answer takes. Here Redis's answers to the pops come 0.3 s late and
    the end marker's wait is cut to 0.05 s, so the read is mid-pop when the wait runs out."""
    import redis.asyncio.client

    from chat_platform import channel_layer

    execute = redis.asyncio.client.Redis.execute_command

    async def late_pops(self, *args, **kwargs):
        answer = await execute(self, *args, **kwargs)
        if str(args[0]) == "BZPOPMIN" and answer is not None:
            await asyncio.sleep(0.3)  # Redis popped it; the answer is read late
        return answer

    monkeypatch.setattr(channel_layer, "END_TIMEOUT_SECONDS", 0.05, raising=False)
    monkeypatch.setattr(redis.asyncio.client.Redis, "execute_command", late_pops)
    layer = CancelSafeRedisChannelLayer(**_layer_config())
    try:
        a, b = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("burst", b)
        read_a = asyncio.ensure_future(layer.receive(a))  # B's consumer is busy: A reads
        await asyncio.sleep(0.05)
        await layer.group_send_many("burst", [{"type": "chat.frame", "n": n} for n in range(3)])
        await asyncio.sleep(0.05)  # A's read has popped B's first frame; its answer is late
        read_a.cancel()  # A's socket closes
        await asyncio.wait([read_a], timeout=10)
        got = []
        for _ in range(3):
            try:
                got.append((await asyncio.wait_for(layer.receive(b), 3))["n"])
            except TimeoutError:
                break
        assert got == [0, 1, 2]
    finally:
        monkeypatch.undo()
        await layer.flush()


async def test_a_frame_on_its_way_to_a_socket_that_left_is_not_kept_for_ever(monkeypatch):
    """A socket closes while a frame for it is still in Redis (a chat's last frames after its
    reply completed): the process's read keeps it for a receive that comes back (a receive that
    timed out gets its frames as before), for ``expiry`` at most, and then drops its buffer,
    which nobody would read for the rest of the process's life."""
    layer = CancelSafeRedisChannelLayer(**_layer_config())
    try:
        a, b = await layer.new_channel(), await layer.new_channel()
        read_a = asyncio.ensure_future(layer.receive(a))
        await asyncio.sleep(0.05)
        read_a.cancel()  # A's socket closes
        await asyncio.wait([read_a], timeout=10)
        await layer.send(a, {"type": "chat.frame", "n": 0})  # on its way to A
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(b), 0.05)
        await layer.send(b, {"type": "chat.frame", "n": 1})
        assert (await asyncio.wait_for(layer.receive(b), 5))["n"] == 1
        assert list(layer.receive_buffer) == [a]

        monkeypatch.setattr(layer, "expiry", 0)  # another socket leaves, past A's expiry
        read_c = asyncio.ensure_future(layer.receive(await layer.new_channel()))
        await asyncio.sleep(0.05)
        read_c.cancel()
        await asyncio.wait([read_c], timeout=10)
        assert dict(layer.receive_buffer) == {}
        assert layer._departed == {}
    finally:
        await layer.flush()
