"""The in-memory channel layer (embedded mode): frames reach a chat's listeners, and a chat
nobody listens to costs no trip to an event loop (docs/performance.md, "The tool task")."""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from chat_platform import realtime

pytestmark = pytest.mark.usefixtures("inmemory_channel_layer")


def _counted_group_sends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    layer = get_channel_layer()
    sent: list[str] = []
    original = layer.group_send

    async def group_send(group: str, message: dict) -> None:
        sent.append(group)
        await original(group, message)

    monkeypatch.setattr(layer, "group_send", group_send)
    return sent


def test_frames_to_a_chat_nobody_listens_to_are_not_sent(monkeypatch):
    sent = _counted_group_sends(monkeypatch)

    realtime.send_frames(41, [{"type": "tool.started"}, {"type": "tool.finished"}])
    realtime.send_frame(41, {"type": "context.updated"})

    assert sent == []


def test_frames_reach_a_listener_in_order(monkeypatch):
    sent = _counted_group_sends(monkeypatch)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(realtime.session_group(42), channel)

    realtime.send_frames(42, [{"type": "tool.started"}, {"type": "tool.finished"}])
    realtime.send_frame(43, {"type": "context.updated"})  # another chat: nobody listens

    assert sent == ["chat-session-42", "chat-session-42"]
    received = [async_to_sync(layer.receive)(channel) for _ in range(2)]
    assert received == [
        {"type": realtime.FRAME_EVENT, "frame": {"type": "tool.started"}},
        {"type": realtime.FRAME_EVENT, "frame": {"type": "tool.finished"}},
    ]


@pytest.mark.django_db
def test_the_index_is_read_for_a_memory_frame_only_when_someone_listens(
    monkeypatch, django_assert_num_queries
):
    """``memory.updated`` costs a query (the index): not made for a chat nobody listens to (each
    compaction of a long tool task made it)."""
    from memory import realtime as memory_realtime
    from tests.factories import SessionFactory

    session = SessionFactory()
    sent = _counted_group_sends(monkeypatch)
    with django_assert_num_queries(0):
        memory_realtime.notify_memory_updated(session=session)
    assert sent == []
    assert realtime.frames_heard(session.pk) is False

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(realtime.session_group(session.pk), channel)
    assert realtime.frames_heard(session.pk) is True
    with django_assert_num_queries(1):
        memory_realtime.notify_memory_updated(session=session)
    assert sent == [f"chat-session-{session.pk}"]
    frame = async_to_sync(layer.receive)(channel)["frame"]
    assert frame == {"type": "memory.updated", "records": []}
