/*
 * What a server frame on the socket does to the page: messages created, streamed, completed or
 * failed, compaction, memory, recall and context updates, errors.
 */
import { fmtInt } from "../lib/format.js";
import { contextRefreshCancel, renderContext, scheduleContextRefresh } from "../render/gauge.js";
import { loadMarkers } from "../render/markers.js";
import { setCompaction, showError } from "../render/status.js";
import { noteToolFrame } from "../render/toolsteps.js";
import {
  afterMessagesChanged,
  renderMessage,
  scheduleBody,
  upsertMessage,
  withScroll,
} from "../render/transcript.js";
import { ACTIVE_STATUSES } from "../state/messages.js";
import { gaugeShows } from "../state/room.js";
import { memory, state } from "../state/state.js";
import { bySeq, failures, messages, nodes, recalls } from "../state/store.js";
import { updateComposer } from "./composer.js";
import { confirmSocketSendsSoon } from "./sending.js";
import { maybeRefreshTitle, resync } from "./session.js";

export function handleFrame(frame) {
  switch (frame && frame.type) {
    case "message.created":
    case "message.completed":
      if (frame.message) {
        withScroll(function () {
          upsertMessage(frame.message);
          afterMessagesChanged();
        });
        if (frame.type === "message.completed") {
          state.stopRequested = false;
          scheduleContextRefresh();
          maybeRefreshTitle();
        }
      }
      break;
    case "message.delta":
      applyDelta(frame.message_id, frame.delta, frame.offset);
      break;
    case "message.failed":
      markFailed(frame.message_id, frame.error, frame.message);
      break;
    case "compaction.started":
      setCompaction("Compacting context…", "running");
      break;
    case "compaction.finished":
      compactionFinished(frame.event || {});
      break;
    case "memory.updated":
      if (memory) memory.onUpdated(frame.records);
      break;
    case "tool.started":
    case "tool.finished":
      noteToolStep(frame);
      break;
    case "recall":
      noteRecall(frame);
      break;
    case "context.updated":
      // Rooms: a report from another bot's seat than the gauge shows asks for the right one.
      if (!gaugeShows(frame.bot !== undefined ? frame.bot : frame.context && frame.context.bot)) {
        scheduleContextRefresh(300);
        break;
      }
      contextRefreshCancel();
      renderContext(frame.context);
      break;
    case "error":
      socketError(frame.error || {});
      break;
    default:
      break;
  }
}

function applyDelta(messageId, delta, offset) {
  if (messageId === undefined || messageId === null || typeof delta !== "string") return;
  var id = String(messageId);
  var m = messages.get(id);
  if (m && !ACTIVE_STATUSES[m.status]) return; // already final: the completed frame wins
  if (m && typeof offset === "number") {
    // Where the delta starts in the reply: after a reconnect the text came from the saved
    // copy (up to half a second behind), so a delta may overlap it (keep what follows) or
    // start past it (a gap: the text stays as it is until the completed frame brings it whole).
    var have = (m.content || "").length;
    if (offset === 0 && have > 0) {
      // A new model call of the reply (after a tool or recall round): what the call before it
      // said went with its tool calls, and the reply's text starts again, as its stored copy
      // does; a gap in the call before it is behind us.
      m = Object.assign({}, m, { content: "", _streamGap: false });
      messages.set(id, m);
      if (typeof m.seq === "number") bySeq.set(m.seq, m);
      have = 0;
    }
    if (m._streamGap || offset > have) {
      m._streamGap = true;
      return;
    }
    if (offset < have) delta = delta.slice(have - offset);
    if (!delta) return;
  }
  withScroll(function () {
    if (!m) {
      // message.created was lost; show the text now and let a resync fill in the rest.
      upsertMessage({ id: messageId, role: "assistant", kind: "chat", content: delta, status: "streaming" });
      afterMessagesChanged();
      resync(false);
      return;
    }
    var next = Object.assign({}, m, { content: (m.content || "") + delta, status: "streaming" });
    messages.set(id, next);
    if (typeof next.seq === "number") bySeq.set(next.seq, next);
    var node = nodes.get(id);
    if (node) {
      // Markdown is re-rendered whole, at most every RENDER_EVERY_MS, not on every token.
      node._parts.text.hidden = false;
      node._parts.text.parentNode.hidden = false;
      if (m.status !== "streaming") renderMessage(node, next);
      else scheduleBody(id);
    }
  });
  if (!m || m.status !== "streaming") updateComposer();
}

function markFailed(messageId, error, stored) {
  if (messageId === undefined || messageId === null) return;
  var id = String(messageId);
  if (error) failures.set(id, error);
  var m = messages.get(id);
  state.stopRequested = false;
  withScroll(function () {
    // The frame carries the stored message (status failed or interrupted, partial text kept).
    if (stored) upsertMessage(stored);
    else if (m) upsertMessage(Object.assign({}, m, { status: "failed" }));
    afterMessagesChanged();
  });
  if (!m) resync(false);
}

// The same plain words as compaction/services.py REASON_TEXT, for the header chip.
var COMPACTION_REASONS = {
  summariser_error: "the summariser did not answer",
  empty: "the summary came back empty",
  finish_reason: "the summary was cut off before it finished",
  too_short: "the summary was too short to be useful",
  tool_syntax: "the summary contained tool-call syntax",
  over_budget: "the summary would not fit beside what every call sends",
  conflict: "the messages changed while they were being summarised",
  busy: "another compaction of this session did not finish in time",
  internal_error: "an internal error stopped it",
  service_unavailable: "Redis, which guards compaction, is not answering",
};

function compactionFinished(event) {
  var outcome = event.outcome || "";
  if (outcome === "compacted") {
    setCompaction(
      "Context compacted: " + fmtInt(event.tokens_before) + " → " + fmtInt(event.tokens_after) + " tokens",
      "done",
      8000
    );
    // Compaction flips `compacted` on older messages, which after_seq would not return.
    resync(true);
    loadMarkers(state.epoch);
  } else if (event.reason === "not_shorter" || event.reason === "not_lower") {
    // Not a failure: a summary would not shorten the messages or lower the context. Said once
    // for /compact (its notice says it too); an automatic attempt that found nothing to gain
    // shows nothing.
    if (event.trigger === "manual") setCompaction("Nothing worth compacting yet", "done", 8000);
    else setCompaction("", "");
  } else if (outcome === "failed" || outcome === "rejected") {
    var why = COMPACTION_REASONS[event.reason] || event.reason || "";
    setCompaction("Compaction did not happen" + (why ? ": " + why : ""), "failed", 12000);
  } else {
    setCompaction("", "");
  }
  scheduleContextRefresh();
}

function socketError(error) {
  showError(error);
  // A refused message.send leaves its bubble unconfirmed; check now instead of waiting.
  confirmSocketSendsSoon();
  if (state.stopRequested) {
    state.stopRequested = false;
    updateComposer();
  }
}

// Recall frames: the reply being written looked something up.

function noteRecall(frame) {
  if (frame.message_id === undefined || frame.message_id === null) return;
  var id = String(frame.message_id);
  var list = recalls.get(id) || [];
  list.push({
    tool: frame.tool,
    names: Array.isArray(frame.names) ? frame.names : [],
    query: frame.query || "",
    found: frame.found,
  });
  recalls.set(id, list);
  var m = messages.get(id);
  var node = nodes.get(id);
  if (m && node) renderMessage(node, m);
}

// Tool frames: a call of the reply being written started or ended (render/toolsteps.js).
function noteToolStep(frame) {
  var id = noteToolFrame(frame);
  var m = id && messages.get(id);
  var node = id && nodes.get(id);
  if (m && node) renderMessage(node, m);
}
