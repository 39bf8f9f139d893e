"""The session group's frames for a ``/v1`` stream (docs/openai-api.md)."""

import asyncio
import contextlib
from typing import Any

from channels.layers import get_channel_layer

from chat_platform.realtime import frames_listen_here, session_group


class FrameListener:
    """The session group's frames (the chat's own realtime path): from the workers through
    Redis, or in embedded mode from the in-process task threads through the in-memory layer.
    Frames are lossy: without news for a while the stream reads the reply from the database."""

    def __init__(self) -> None:
        self.layer: Any = None
        self.channel = ""
        self.group = ""
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def open(self, session_id: int) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        frames_listen_here()
        self.layer, self.group = layer, session_group(session_id)
        self.channel = await layer.new_channel()
        await layer.group_add(self.group, self.channel)
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            frame = message.get("frame")
            if isinstance(frame, dict):
                await self.queue.put(frame)

    async def next(self, timeout: float) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
            self.task = None
        if self.layer is not None:
            with contextlib.suppress(Exception):
                await self.layer.group_discard(self.group, self.channel)
            self.layer = None
