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

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from transfer.fields import obj, text
from transfer.streaming import refused

MAX_NODES = 100_000
ROLES = ("user", "assistant", "system", "tool")


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
    on_main = {node_id: position for position, node_id in enumerate(main)}
    created = _epoch(raw.get("create_time"), f"{where}.create_time")
    skipped = 0

    def turns_of(path: list[str], start: datetime | None) -> tuple[list[Turn], int]:
        out, missing, previous = [], 0, start
        for node_id in path:
            turn = _turn(
                node_id,
                mapping[node_id].get("message"),
                f"{where}.mapping[{node_id[:40]}].message",
                previous,
            )
            if turn is None:
                missing += 1
                continue
            previous = turn.created_at or previous
            out.append(turn)
        return out, missing

    transcript, skipped = turns_of(main, created)
    seq_of: dict[str, int] = {}
    for seq, turn in enumerate(transcript, start=1):
        seq_of[turn.source_id] = seq
    branches = []
    for leaf in (n for n, kids in children.items() if not kids and n != current):
        path = _path_to(leaf, parents, where)
        fork = max((i for i, n in enumerate(path) if n in on_main), default=-1)
        shared = path[: fork + 1]
        fork_seq = max((seq_of[n] for n in shared if n in seq_of), default=0)
        turns, missing = turns_of(path[fork + 1 :], None)
        if turns:
            branches.append(Branch(fork_seq=fork_seq, turns=turns))
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
