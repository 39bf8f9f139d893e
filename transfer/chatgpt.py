"""A ChatGPT export's conversation (one item of ``conversations.json``) as a transcript and its
alternate branches. Pure: no database.

A conversation is a tree: ``mapping`` holds nodes ``{id, message, parent, children}`` and
``current_node`` is the leaf the user last saw. The transcript is the path from the root to
``current_node`` (walking ``parent``). Every other leaf is a branch: the nodes from where it
leaves the transcript (the deepest shared node) down to that leaf, kept as an alternate branch.

Node to message: ``author.role`` ``user``/``assistant`` as they are; ``system`` nodes with text
become a pinned system note (always kept in context), empty ones (ChatGPT's hidden root) are
skipped; ``tool`` nodes (code results, browsing) are folded into the text as an assistant
message headed ``[<tool name> output]`` — this platform's tool messages must answer a tool call
of its own protocol, which an imported tree does not carry. Text comes from ``parts`` (strings
joined; an image or file part becomes ``[image]``/``[file]``), else ``text`` (code), else the
user's custom-instructions fields; nodes with no text are skipped. Times from ``create_time``
(epoch seconds; a missing one takes the previous message's), models from
``metadata.model_slug``.
"""

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from transfer.fields import obj, text
from transfer.streaming import refused

MAX_NODES = 100_000
# Branches that share nodes below their fork each carry them: their messages, all together.
MAX_BRANCH_MESSAGES = 2 * MAX_NODES
ROLES = ("user", "assistant", "system", "tool")
# The keys of a conversation the import reads; the streaming reader skips every other one
# unbuilt (``transfer.streaming.items``'s ``keep``), so they never cost memory or time.
CONVERSATION_KEYS = frozenset(
    {"title", "create_time", "mapping", "current_node", "conversation_id", "id"}
)


@dataclass
class Turn:
    role: str  # user | assistant | system
    content: str
    created_at: datetime | None
    model: str = ""
    pinned: bool = False
    source_id: str = ""


@dataclass
class Branch:
    fork_seq: int  # the transcript seq the branch continues (0: from the very start)
    turns: list[Turn] = field(default_factory=list)


@dataclass
class Conversation:
    source_id: str
    title: str
    created_at: datetime | None
    transcript: list[Turn]
    branches: list[Branch]
    skipped: int  # nodes without text


def _epoch(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise refused(f"{where}: must be a number of seconds (or null).")
    if not 0 <= value < 32_503_680_000:  # before the year 3000
        raise refused(f"{where}: {value} is not a time.")
    return datetime.fromtimestamp(value, tz=UTC)


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    content = obj(content, where)
    parts = content.get("parts")
    if isinstance(parts, list):
        pieces = []
        for part in parts:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict):
                kind = str(part.get("content_type", ""))
                pieces.append("[image]" if "image" in kind else "[file]")
            elif part is not None:
                raise refused(f"{where}.parts: holds {type(part).__name__}, not text.")
        return "\n".join(p for p in pieces if p)
    if parts is not None:
        raise refused(f"{where}.parts: must be a list.")
    if isinstance(content.get("text"), str):
        return content["text"]
    extra = [content.get(k) for k in ("user_profile", "user_instructions")]
    return "\n\n".join(v for v in extra if isinstance(v, str) and v.strip())


def _turn(node_id: str, message: Any, where: str, previous: datetime | None) -> Turn | None:
    if message is None:
        return None
    message = obj(message, where)
    author = obj(message.get("author"), f"{where}.author")
    role = author.get("role")
    if role not in ROLES:
        raise refused(f"{where}.author.role: must be one of {', '.join(ROLES)}, not {role!r:.40}.")
    body = text(_content_text(message.get("content"), f"{where}.content"), f"{where}.content")
    if not body.strip():
        return None
    created = _epoch(message.get("create_time"), f"{where}.create_time") or previous
    metadata = message.get("metadata")
    model = ""
    if isinstance(metadata, dict) and isinstance(metadata.get("model_slug"), str):
        model = text(metadata["model_slug"], f"{where}.metadata.model_slug", max_bytes=200)
    if role == "tool":
        name = author.get("name") if isinstance(author.get("name"), str) else "tool"
        body = f"[{name[:80]} output]\n{body}"
        role = "assistant"
    return Turn(
        role=role,
        content=body,
        created_at=created,
        model=model if role == "assistant" else "",
        pinned=role == "system",
        source_id=node_id,
    )


def conversation_parse(raw: Any, where: str) -> Conversation:
    """One ``conversations.json`` item; a ``validation_error`` naming the field otherwise."""
    raw = obj(raw, where)
    mapping = obj(raw.get("mapping"), f"{where}.mapping")
    if len(mapping) > MAX_NODES:
        raise refused(f"{where}.mapping: more than {MAX_NODES:,} nodes.")
    parents: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    for node_id, node in mapping.items():
        node = obj(node, f"{where}.mapping[{node_id[:40]}]")
        parent = node.get("parent")
        if parent is not None and (not isinstance(parent, str) or parent not in mapping):
            raise refused(f"{where}.mapping[{node_id[:40]}].parent: names no node of the mapping.")
        parents[node_id] = parent
        kids = node.get("children", [])
        if not isinstance(kids, list) or not all(isinstance(k, str) and k in mapping for k in kids):
            raise refused(
                f"{where}.mapping[{node_id[:40]}].children: must list nodes of the mapping."
            )
        children[node_id] = kids
    current = raw.get("current_node")
    if not isinstance(current, str) or current not in mapping:
        leaves = [n for n, kids in children.items() if not kids]
        if current is not None or not leaves:
            raise refused(f"{where}.current_node: names no node of the mapping.")
        current = leaves[-1]
    main = _path_to(current, parents, where)
    created = _epoch(raw.get("create_time"), f"{where}.create_time")
    turns = _Turns(mapping, where)
    transcript, skipped = turns.along(main, created)
    # The transcript seq at or before each node of the main path (0 before the first text).
    seq_of = {turn.source_id: seq for seq, turn in enumerate(transcript, start=1)}
    seq_upto: dict[str, int] = {}
    last = 0
    for node_id in main:
        last = seq_of.get(node_id, last)
        seq_upto[node_id] = last
    forks = _Forks(main, parents, where)
    branches = []
    total = 0
    for leaf in (n for n, kids in children.items() if not kids and n != current):
        fork, own = forks.of(leaf)
        total += own
        if total > MAX_BRANCH_MESSAGES:
            raise refused(
                f"{where}.mapping: its branches hold more than {MAX_BRANCH_MESSAGES:,} "
                "messages together."
            )
        branch_turns, missing = turns.along(forks.path_below(leaf, own), None)
        if branch_turns:
            fork_seq = seq_upto[fork] if fork is not None else 0
            branches.append(Branch(fork_seq=fork_seq, turns=branch_turns))
        skipped += missing
    title = raw.get("title")
    source_id = raw.get("conversation_id", raw.get("id", ""))
    return Conversation(
        source_id=source_id[:200] if isinstance(source_id, str) else "",
        title=" ".join(title.split())[:200] if isinstance(title, str) else "",
        created_at=created,
        transcript=transcript,
        branches=branches,
        skipped=skipped,
    )


class _Turns:
    """Each node's turn, read once however many paths cross it."""

    def __init__(self, mapping: dict[str, Any], where: str) -> None:
        self.mapping, self.where = mapping, where
        self.done: dict[str, Turn | None] = {}

    def of(self, node_id: str) -> Turn | None:
        if node_id not in self.done:
            self.done[node_id] = _turn(
                node_id,
                self.mapping[node_id].get("message"),
                f"{self.where}.mapping[{node_id[:40]}].message",
                None,
            )
        return self.done[node_id]

    def along(self, path: list[str], start: datetime | None) -> tuple[list[Turn], int]:
        """The turns of ``path`` (a node without a time takes the one before it) and how many
        of its nodes had no text."""
        out: list[Turn] = []
        missing, previous = 0, start
        for node_id in path:
            turn = self.of(node_id)
            if turn is None:
                missing += 1
                continue
            if turn.created_at is None and previous is not None:
                turn = replace(turn, created_at=previous)
            previous = turn.created_at or previous
            out.append(turn)
        return out, missing


class _Forks:
    """Where each node leaves the main path: its nearest ancestor on it (None: it has none) and
    how many of its own nodes lie below that fork, found for every node in one amortised pass
    (each node's parent chain is climbed once, then remembered), never by walking every leaf
    back to the root."""

    def __init__(self, main: list[str], parents: dict[str, str | None], where: str) -> None:
        self.parents, self.where = parents, where
        self.fork: dict[str, str | None] = {n: n for n in main}
        self.depth: dict[str, int] = {n: 0 for n in main}

    def of(self, node_id: str) -> tuple[str | None, int]:
        chain: list[str] = []
        climbing: set[str] = set()
        at: str | None = node_id
        while at is not None and at not in self.fork:
            if at in climbing:
                raise refused(
                    f"{self.where}.mapping: the parents of node {node_id[:40]} form a loop."
                )
            climbing.add(at)
            chain.append(at)
            at = self.parents.get(at)
        fork = self.fork[at] if at is not None else None
        depth = self.depth[at] if at is not None else 0
        for n in reversed(chain):
            depth += 1
            self.fork[n], self.depth[n] = fork, depth
        return self.fork[node_id], self.depth[node_id]

    def path_below(self, node_id: str, own: int) -> list[str]:
        """The ``own`` nodes from just below the fork down to ``node_id``."""
        path: list[str] = []
        at: str | None = node_id
        for _ in range(own):
            assert at is not None
            path.append(at)
            at = self.parents.get(at)
        path.reverse()
        return path


def _path_to(node_id: str, parents: dict[str, str | None], where: str) -> list[str]:
    path: list[str] = []
    seen: set[str] = set()
    at: str | None = node_id
    while at is not None:
        if at in seen:
            raise refused(f"{where}.mapping: the parents of node {node_id[:40]} form a loop.")
        seen.add(at)
        path.append(at)
        at = parents.get(at)
    path.reverse()
    return path
