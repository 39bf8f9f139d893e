"""Provenance: which stored things each part of a model call came from (docs/context-records.md).

The pipeline renders a call's messages; beside them it describes the call as ordered parts —
``{kind, ref, tokens, trimmed?}`` — that name what is already stored (message seqs and ids,
summary ids, the bot's prompt version) and carry rendered text only for what nothing else keeps
(the memory index block, a room's header and its speakers, the chat's instruction, an API
client's system part). ``compaction.records`` stores them and rebuilds the messages from them.

No queries here: everything comes from what the pipeline already read.
"""

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from chat_platform.llm.recall_protocol import MEMORY_TOOLS
from compaction.admission import Admission

# What a part is (docs/context-records.md), in the order a call renders them: the fixed system
# parts, the summaries and the index, then the chosen rows in seq order.
PART_KINDS = (
    "system",
    "room",
    "client_system",
    "summary",
    "memory_index",
    "pinned",
    "history",
    "user",
    "recalled",
    "tool",
    "tools",
)
# The rows' kinds, rendered from stored messages in seq order.
ROW_KINDS = ("pinned", "history", "user", "recalled", "tool")
# The memory tools: a round that asks only for these is a recall round (``recalled``); one that
# calls the bot's MCP tools is a ``tool`` round (docs/tools.md).


@lru_cache(maxsize=512)
def prompt_version(text: str) -> str:
    """A system prompt's version: the first 16 hex digits of its SHA-256 (content-addressed, so
    the same prompt is one version however often it is sent or restored)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def seq_ranges(seqs: Iterable[int]) -> list[list[int]]:
    """Ascending seqs compressed into ``[first, last]`` runs: [1, 2, 3, 5] -> [[1, 3], [5, 5]]."""
    ranges: list[list[int]] = []
    for seq in seqs:
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    return ranges


def seqs_of(ranges: Iterable[Sequence[int]]) -> list[int]:
    """The inverse of ``seq_ranges``."""
    return [seq for first, last in ranges for seq in range(first, last + 1)]


def part(kind: str, ref: dict[str, Any], tokens: int, *, trimmed: bool = False) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": kind, "ref": ref, "tokens": tokens}
    if trimmed:
        entry["trimmed"] = True
    return entry


@dataclass(frozen=True)
class ChosenRow:
    """One rendered row as provenance needs it: its id, seq, what it is and what it cost."""

    id: int
    seq: int
    kind: str  # one of ROW_KINDS
    tokens: int
    calls: str | None = None  # the assistant's tool calls as JSON text (recall requests)
    image: bool = False  # sent with its attached images
    expanded: str = ""  # the record whose span is sent verbatim this call ("use the full text")


def _recall_requests(calls: str | None) -> list[dict[str, Any]]:
    """What a recall request asked for: each tool call's name and its arguments' names/query."""
    if not calls or calls in ("[]", "null"):
        return []
    asked = []
    for call in json.loads(calls):
        function = call.get("function") or {}
        entry: dict[str, Any] = {"tool": function.get("name", "")}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {}
        if isinstance(arguments, dict):
            if isinstance(arguments.get("names"), list):
                entry["names"] = [str(n) for n in arguments["names"]]
            if isinstance(arguments.get("query"), str):
                entry["query"] = arguments["query"]
        asked.append(entry)
    return asked


def _call_names(calls: str | None) -> list[str]:
    if not calls or calls in ("[]", "null"):
        return []
    return [str((c.get("function") or {}).get("name", "")) for c in json.loads(calls)]


def _round_kinds(rows: Sequence[ChosenRow]) -> list[str]:
    """Each row's part kind: the turn's exchange rows (``recalled``) are ``tool`` when their
    round called the bot's MCP tools (its request names a function that is not a memory
    tool), else ``recalled``; other rows keep theirs."""
    kinds: list[str] = []
    current = "recalled"
    for row in rows:
        if row.kind != "recalled":
            kinds.append(row.kind)
            continue
        names = _call_names(row.calls)
        if names:
            current = "tool" if any(n not in MEMORY_TOOLS for n in names) else "recalled"
        kinds.append(current)
    return kinds


def row_parts(rows: Sequence[ChosenRow]) -> list[dict[str, Any]]:
    """The chosen rows (in seq order) as parts: one per run of rows of the same kind, so the
    parts keep the order the messages were sent in. History runs name seq ranges; pins, the
    new message and the turn's rounds name ids (and seqs, for a reader); the rounds split at
    each request (one part per round, numbered across recall and tool rounds): a recall round
    is ``recalled`` (with what it asked for), a round of the bot's MCP tools is ``tool`` (with
    the functions it called)."""
    parts: list[dict[str, Any]] = []
    exchange_round = 0
    for row, kind in zip(rows, _round_kinds(rows), strict=True):
        last = parts[-1] if parts else None
        new_round = kind in ("recalled", "tool") and row.calls not in (None, "", "[]", "null")
        if new_round:
            exchange_round += 1
        if (
            last is None
            or last["kind"] != kind
            or new_round
            or last["ref"].get("expanded", "") != row.expanded
        ):
            last = part(kind, {}, 0)
            if kind in ("recalled", "tool"):
                last["ref"]["round"] = exchange_round
            if row.expanded:
                last["ref"]["expanded"] = row.expanded
            parts.append(last)
        ref = last["ref"]
        last["tokens"] += row.tokens
        if kind == "history":
            ranges = ref.setdefault("seqs", [])
            if ranges and row.seq == ranges[-1][1] + 1:
                ranges[-1][1] = row.seq
            else:
                ranges.append([row.seq, row.seq])
        else:
            ref.setdefault("ids", []).append(row.id)
            ref.setdefault("seqs", []).append(row.seq)
        if kind == "recalled" and new_round:
            ref["requests"] = _recall_requests(row.calls)
        if kind == "tool" and new_round:
            ref["calls"] = _call_names(row.calls)
        if row.image:
            ref.setdefault("images", []).append(row.id)
    return parts


def trimmed_history_part(admission: Admission, *, dropped_tokens: int) -> dict[str, Any] | None:
    """The history admission left out (the oldest uncompacted messages before the admitted
    run): not sent, so named by how many and where they end, not by their text."""
    if not admission.dropped_messages:
        return None
    ref: dict[str, Any] = {"messages": admission.dropped_messages}
    if admission.admitted_from_seq is not None:
        ref["before_seq"] = admission.admitted_from_seq
    return part("history", ref, dropped_tokens, trimmed=True)


def admission_info(
    admission: Admission, *, index_lines: int, dropped_tokens: int
) -> dict[str, Any]:
    """The admission as a record keeps it: its decision and totals, what it trimmed and why."""
    info: dict[str, Any] = {
        **admission.log_fields(),
        "dropped_tokens": dropped_tokens,
        "index_lines_kept": admission.kept_index_lines,
        "index_lines_offered": index_lines,
    }
    # Why it trimmed, when it did: "history" (the oldest messages did not fit), "index" (only
    # the memory index was shortened).
    if admission.dropped_messages:
        info["trimmed"] = "history"
    elif admission.kept_index_lines < index_lines:
        info["trimmed"] = "index"
    return info
