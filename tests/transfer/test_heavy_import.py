"""Issue 30, Deliver 1 (imports): a ChatGPT tree parses in one pass over its mapping (a chain
with 10,000 leaves cost 260 s of web CPU on 94ecda9: every leaf was walked back to the root),
and a conversation's keys the import does not read are never built nor serialised (an unused
object of 8,000,000 keys held the GIL in ``json.dumps`` until uvicorn killed the worker)."""

import io
import json
import sys
import tracemalloc
from pathlib import Path

import pytest

from bots.models import ChatSession, Message
from transfer import chatgpt
from transfer.chatgpt import conversation_parse
from transfer.models import ImportChunk, ImportedBranch, ImportedConversation, ImportJob
from transfer.services import chats_import

CHAIN = 1_000
LEAVES = 10_000


def _node(node_id, parent, children, role="user", text="", when=None):
    message = {"author": {"role": role}, "content": {"parts": [text]}, "create_time": when}
    return {"id": node_id, "parent": parent, "children": children, "message": message}


def _chain_with_leaves():
    """A main path c0 -> c1 -> ... (alternating user/assistant) and 10,000 one-message leaves
    hanging off its nodes, leaf i off c(i % CHAIN)."""
    mapping = {}
    for i in range(CHAIN):
        role = "user" if i % 2 == 0 else "assistant"
        kids = [f"c{i + 1}"] if i + 1 < CHAIN else []
        mapping[f"c{i}"] = _node(f"c{i}", f"c{i - 1}" if i else None, kids, role, f"m{i}", i)
    for j in range(LEAVES):
        parent = f"c{j % CHAIN}"
        mapping[parent]["children"].append(f"l{j}")
        mapping[f"l{j}"] = _node(f"l{j}", parent, [], "assistant", f"leaf {j}", 5_000 + j)
    return {"title": "Tree", "current_node": f"c{CHAIN - 1}", "mapping": mapping}


class _TooManySteps(Exception):
    pass


def _count_steps(function, *args, most):
    """Lines of transfer/chatgpt.py executed while ``function`` runs (stops past ``most``)."""
    source = str(Path(chatgpt.__file__).resolve())
    steps = 0

    def tracer(frame, event, arg):
        nonlocal steps
        if frame.f_code.co_filename != source:
            return None
        if event == "line":
            steps += 1
            if steps > most:
                raise _TooManySteps(steps)
        return tracer

    sys.settrace(tracer)
    try:
        return function(*args), steps
    finally:
        sys.settrace(None)


def test_a_chain_with_ten_thousand_leaves_parses_in_linear_steps():
    raw = _chain_with_leaves()
    nodes = CHAIN + LEAVES
    # About 100 lines per node (reading its message included); walking every leaf back to the
    # root (94ecda9) is ~LEAVES x CHAIN / 2 node visits, 25,000,000 steps: stopped at the bound.
    bound = 150 * nodes
    conversation, steps = _count_steps(conversation_parse, raw, "conversations[0]", most=bound)
    assert steps <= bound
    assert [t.content for t in conversation.transcript] == [f"m{i}" for i in range(CHAIN)]
    assert len(conversation.branches) == LEAVES
    assert [(b.fork_seq, [t.content for t in b.turns]) for b in conversation.branches[:3]] == [
        (1, ["leaf 0"]),
        (2, ["leaf 1"]),
        (3, ["leaf 2"]),
    ]
    assert [b.fork_seq for b in conversation.branches] == [j % CHAIN + 1 for j in range(LEAVES)]
    assert conversation.skipped == 0


def test_shared_branch_nodes_are_counted_for_each_branch_and_bounded(monkeypatch):
    # u0 -> a0 (main); off u0: x1 -> x2 -> {y1, y2}: two branches sharing x1, x2.
    mapping = {
        "u0": _node("u0", None, ["a0", "x1"], "user", "hi", 1),
        "a0": _node("a0", "u0", [], "assistant", "hello", 2),
        "x1": _node("x1", "u0", ["x2"], "assistant", "other", 3),
        "x2": _node("x2", "x1", ["y1", "y2"], "user", "more", None),
        "y1": _node("y1", "x2", [], "assistant", "one", 5),
        "y2": _node("y2", "x2", [], "assistant", "two", 6),
    }
    raw = {"title": "T", "current_node": "a0", "mapping": mapping}
    parsed = conversation_parse(raw, "c")
    assert [
        (b.fork_seq, [(t.content, t.created_at.timestamp()) for t in b.turns])
        for b in parsed.branches
    ] == [
        (1, [("other", 3.0), ("more", 3.0), ("one", 5.0)]),
        (1, [("other", 3.0), ("more", 3.0), ("two", 6.0)]),
    ]
    monkeypatch.setattr(chatgpt, "MAX_BRANCH_MESSAGES", 5)
    with pytest.raises(Exception) as refused:
        conversation_parse(raw, "c")
    assert str(refused.value) == "c.mapping: its branches hold more than 5 messages together."


@pytest.mark.django_db(transaction=True)
def test_a_conversations_unused_keys_are_never_built_nor_serialised(owner, bot, monkeypatch):
    conversation = {
        "title": "Ferry",
        "current_node": "a",
        "mapping": {
            "u": _node("u", None, ["a"], "user", "When does it leave?", 1_700_000_000),
            "a": _node("a", "u", [], "assistant", "At seven.", 1_700_000_010),
        },
        "junk": {f"k{i}": i for i in range(500_000)},
    }
    data = json.dumps([conversation]).encode()
    assert len(data) > 8_000_000
    serialised = []
    real_dumps, real_iterencode = json.dumps, json.JSONEncoder.iterencode

    def holds_junk(value):
        return isinstance(value, dict) and ("junk" in value or "k499999" in value)

    def dumps(value, *args, **kwargs):
        serialised.append(holds_junk(value))
        return real_dumps(value, *args, **kwargs)

    def iterencode(self, value, *args, **kwargs):
        serialised.append(holds_junk(value))
        return real_iterencode(self, value, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", dumps)
    monkeypatch.setattr(json.JSONEncoder, "iterencode", iterencode)
    # First the conversation with a small unused object (it also warms what loads once).
    small = json.dumps([{**conversation, "junk": {"x": 1}, "update_time": 5}]).encode()
    first = chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(small), size=len(small))
    (entry,) = first.imported
    assert (entry["title"], entry["messages"], entry["branches"]) == ("Ferry", 2, 0)
    session = ChatSession.objects.get(pk=entry["session"])
    assert list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", "content")
    ) == [("user", "When does it leave?"), ("assistant", "At seven.")]
    serialised.clear()
    tracemalloc.start()
    try:
        again = chats_import(user=owner, bot_id=bot.pk, raw=io.BytesIO(data), size=len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert True not in serialised
    # The 500,000-key object was never built: the peak is a small part of the file.
    assert peak < len(data) / 4, (peak, len(data))
    # What the import reads is the same: the same conversation, skipped.
    assert (again.imported, [s["session"] for s in again.skipped]) == ([], [session.pk])
    assert ImportedConversation.objects.count() == 1
    assert Message.objects.count() == 2
    assert ImportedBranch.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_import_past_the_users_heavy_request_limit_is_refused_and_stores_nothing(
    owner, bot, owner_client, settings
):
    """Storing an upload keeps a web thread busy while the file is copied: the POST holds one of
    the user's heavy-request slots (docs/security.md, "Heavy requests"), and one past the limit
    is refused at once with nothing stored; once the slot is free the same file imports."""
    from tests.compaction.test_heavy_requests import assert_rate_limited, slot_held_elsewhere
    from tests.transfer.test_import_export import _import, _stored_counts, chatgpt_conversation
    from tests.transfer.test_import_export import imported as import_and_run

    settings.HEAVY_REQUESTS_PER_USER = 1
    data = json.dumps([chatgpt_conversation()]).encode()
    before = _stored_counts()
    with slot_held_elsewhere(owner):
        assert_rate_limited(_import(owner_client, bot, data), limit=1)
        assert _stored_counts() == before
        assert (ImportJob.objects.count(), ImportChunk.objects.count()) == (0, 0)
    assert import_and_run(owner_client, bot, data)["status"] == "done"
    assert ChatSession.objects.filter(user=owner).count() == 3  # the chat and its two branches
