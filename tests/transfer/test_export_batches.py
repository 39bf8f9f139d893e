"""An export served over ASGI hops to the request's sync thread once per batch of about
``BATCH_BYTES``, not once per message (``transfer/api.py``): a 10,000-message chat was
thousands of hops and ASGI sends, 104-246 s on a loaded machine. Counts, never timings."""

import asyncio
import json
import secrets

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import AsyncClient
from rest_framework.authtoken.models import Token

from bots.models import Message
from tests.factories import SessionFactory
from tests.pooled import pooled_only
from transfer import api

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = 1_200
BATCH = 64 * 1024  # transfer.api.BATCH_BYTES


@pytest.fixture
def long_chat(owner):
    session = SessionFactory(user=owner, bot__owner=owner, title="Long")
    Message.objects.bulk_create(
        [
            Message(
                session=session,
                seq=seq,
                role="user" if seq % 2 else "assistant",
                # a token each: the zip cannot squeeze the chat into one batch
                content=f"message {seq}: {secrets.token_hex(24)} " + "words of a long chat " * 3,
                token_count=24,
                status="complete",
            )
            for seq in range(1, MESSAGES + 1)
        ]
    )
    session.last_seq = MESSAGES
    session.save(update_fields=["last_seq"])
    return session


def _asgi_download(user, path: str, monkeypatch) -> tuple[list[bytes], int]:
    """The response's pieces as an ASGI server gets them, and the hops to the sync thread."""
    hops = []

    def counted(function, **kwargs):
        hops.append(1)
        return sync_to_async(function, **kwargs)

    async def fetch():
        token = await sync_to_async(lambda: Token.objects.get_or_create(user=user)[0].key)()
        response = await AsyncClient().get(path, headers={"Authorization": f"Token {token}"})
        assert response.status_code == 200
        return [piece async for piece in response.streaming_content]

    monkeypatch.setattr(api, "sync_to_async", counted)
    return asyncio.run(fetch()), len(hops)


@pytest.mark.parametrize("wanted", ["json", "markdown"])
def test_a_long_chat_s_export_is_served_in_batches_and_says_the_same(
    owner, owner_client, long_chat, wanted, monkeypatch
):
    path = f"/api/v1/sessions/{long_chat.pk}/export/?format={wanted}"
    pieces, hops = _asgi_download(owner, path, monkeypatch)
    body = b"".join(pieces)
    assert body == b"".join(owner_client.get(path).streaming_content)  # the WSGI road's
    if wanted == "json":
        assert len(json.loads(body)["messages"]) == MESSAGES
    # every piece but the last is a full batch; one more hop finds the end
    assert all(len(piece) >= BATCH for piece in pieces[:-1])
    assert len(pieces) <= len(body) // BATCH + 1
    assert hops == len(pieces) + 1
    assert len(pieces) < MESSAGES // 10  # was a piece per message: 1,200 and more


def test_the_zip_of_every_chat_is_served_in_batches(owner, long_chat, monkeypatch):
    pieces, hops = _asgi_download(owner, "/api/v1/export/", monkeypatch)
    assert all(len(piece) >= BATCH for piece in pieces[:-1])
    assert hops == len(pieces) + 1
    assert b"".join(pieces)[:2] == b"PK"


@pooled_only
@pytest.mark.parametrize("path", ["sessions/{pk}/export/?format=json", "export/"])
def test_the_download_holds_no_connection_while_the_client_reads_a_batch(
    owner, long_chat, path, monkeypatch
):
    """Between batches the client reads at its own pace (a slow one for minutes): the request's
    pooled connection is back in the pool then, or a few slow downloads emptied the web
    process's pool for everyone. The exports read in pages (``in_pages``), so no cursor spans a
    batch."""
    held_after = []
    batch = api._batch

    def recording(chunks):
        out = batch(chunks)
        held_after.append(connection.connection is not None)
        return out

    monkeypatch.setattr(api, "_batch", recording)
    pieces, _ = _asgi_download(owner, "/api/v1/" + path.format(pk=long_chat.pk), monkeypatch)
    assert len(held_after) == len(pieces) + 1 > 2
    assert held_after == [False] * len(held_after)
    if path.endswith("json"):
        assert len(json.loads(b"".join(pieces))["messages"]) == MESSAGES
