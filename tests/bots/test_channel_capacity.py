"""The Redis channel layer keeps every frame of a burst for a slow web process (issue 10).

channels-redis stores the frames for all the websockets of one process in one Redis list (the
process-local "!" channels share a key), and drops frames past ``capacity`` for that whole list.
At the old 1,000 a burst of 200 turns overflowed it on a saturated machine and replies lost
their final frames."""

import asyncio

from channels.layers import channel_layers

from chat_platform import realtime

SOCKETS = 150  # websockets of one web process
FRAMES = 12  # frames per turn, sent before the process gets round to reading any


async def test_a_burst_of_frames_for_one_slow_process_is_kept_whole(settings):
    channel_layers.backends.clear()
    layer = channel_layers["default"]
    try:
        assert layer.capacity == settings.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"]
        channels = [await layer.new_channel() for _ in range(SOCKETS)]
        assert len({layer.non_local_name(c) for c in channels}) == 1  # one Redis list
        for i, channel in enumerate(channels):
            await layer.group_add(realtime.session_group(900_000 + i), channel)
        for n in range(FRAMES):
            for i in range(SOCKETS):
                await layer.group_send(
                    realtime.session_group(900_000 + i),
                    {"type": realtime.FRAME_EVENT, "frame": {"n": n, "i": i}},
                )
        received = {channel: [] for channel in channels}
        for channel in channels:
            for _ in range(FRAMES):
                # a dropped frame would leave this waiting: fail in seconds, not at the timeout
                message = await asyncio.wait_for(layer.receive(channel), timeout=10)
                received[channel].append(message["frame"]["n"])
        assert all(ns == list(range(FRAMES)) for ns in received.values())
        for i, channel in enumerate(channels):
            await layer.group_discard(realtime.session_group(900_000 + i), channel)
    finally:
        await layer.flush()
        channel_layers.backends.clear()
