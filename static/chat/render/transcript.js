/*
 * The transcript: one element per message, kept in seq order, re-rendered in place as frames and
 * reads change it (markdown for replies via markdown.js, plain text for the rest), with the
 * per-message actions (retry, discard, pin) and the scroll that follows new text.
 *
 * User-supplied text is only ever written with textContent, never innerHTML.
 */
import { el } from "../lib/dom.js";
import { fmtInt, fmtTime } from "../lib/format.js";
import { hooks } from "../state/hooks.js";
import {
  ACTIVE_STATUSES,
  STATUS_LABELS,
  authorLabel,
  failureWords,
  isMarkdown,
  isNotice,
  isStopped,
  isTool,
  lookupWords,
  toolRequests,
} from "../state/messages.js";
import { ui } from "../state/page.js";
import { state } from "../state/state.js";
import {
  bySeq,
  failures,
  messages,
  nodes,
  pendingSends,
  recalls,
  storedToolCalls,
  toolSteps,
} from "../state/store.js";
import { api } from "../transport/api.js";
import { attachmentLinks, splitAttachments } from "./attachlinks.js";
import { speakerMark } from "./avatars.js";
import { contextButton } from "./context_view.js";
import { copyMessage } from "./copy.js";
import { scheduleContextRefresh } from "./gauge.js";
import { showError } from "./status.js";
import {
  callOf,
  isToolServerCall,
  isToolServerResult,
  renderLiveSteps,
  renderLoneResult,
  renderToolCall,
} from "./toolsteps.js";

const renderTimers = new Map(); // id -> timer of a throttled markdown re-render while streaming

export function transcriptReset() {
  messages.clear();
  nodes.clear();
  failures.clear();
  recalls.clear();
  bySeq.clear();
  toolSteps.clear();
  storedToolCalls.clear();
  renderTimers.forEach(function (t) {
    clearTimeout(t);
  });
  renderTimers.clear();
}

function failureOf(m) {
  var err = failures.get(String(m.id)) || m.error || null;
  if (typeof err === "string") err = { code: "", message: err };
  if (m.status === "interrupted") {
    return { code: (err && err.code) || "interrupted", message: (err && err.message) || "" };
  }
  return err || { code: "", message: "" };
}

export function buildMessageNode(m) {
  var parts = {
    who: el("span", { class: "msg-author" }),
    when: el("time", { class: "msg-time" }),
    status: el("span", { class: "msg-status" }),
    tokens: el("span", { class: "msg-tokens" }),
    tags: el("span", { class: "msg-tags" }),
    actions: el("span", { class: "msg-actions" }),
    text: el("div", { class: "msg-text", dir: "auto" }),
    steps: el("div", { class: "tool-steps-live", hidden: true }),
    note: el("p", { class: "msg-note", hidden: true }),
    error: el("div", { class: "msg-error", hidden: true }),
  };
  var p = parts;
  var node = el(
    "article",
    null,
    el("header", { class: "msg-meta" }, p.who, p.when, p.status, p.tokens, p.tags, p.actions),
    el("div", { class: "msg-bubble" }, p.steps, p.text, p.note, p.error)
  );
  node._parts = parts;
  return node;
}

// Renders the body text. Assistant replies are markdown; the rest is plain text. A streaming
// reply is re-rendered whole on a throttle (scheduleBody), highlighted once it is final.
function renderBody(node, m) {
  var p = node._parts;
  var content = m.content || "";
  var final = !ACTIVE_STATUSES[m.status];
  var key = content + "\u0000" + final;
  if (node._bodyKey === key) return;
  node._bodyKey = key;
  var attached = m.role === "user" ? splitAttachments(content) : null;
  if (attached) {
    // The files' text is what the model reads; the page shows the typed text and the files.
    p.text.classList.remove("markdown");
    p.text.textContent = attached.text;
    p.text.append(attachmentLinks(attached.files));
  } else if (isMarkdown(m) && content && window.chatMarkdown) {
    window.chatMarkdown.render(p.text, content, { final: final });
  } else {
    p.text.classList.remove("markdown");
    p.text.textContent = content;
  }
}

const RENDER_EVERY_MS = 80;

export function scheduleBody(id) {
  if (renderTimers.has(id)) return;
  renderTimers.set(
    id,
    setTimeout(function () {
      renderTimers.delete(id);
      var m = messages.get(id);
      var node = nodes.get(id);
      if (m && node) {
        withScroll(function () {
          renderBody(node, m);
        });
      }
    }, RENDER_EVERY_MS)
  );
}

// The lookups behind a reply: live recall frames, or (after a reload) the tool messages
// stored just before it.
function recallsFor(m) {
  var live = recalls.get(String(m.id));
  if (live && live.length) return live;
  var found = [];
  if (typeof m.seq !== "number") return found;
  for (var seq = m.seq - 1; seq > 0; seq--) {
    var prev = bySeq.get(seq);
    if (!prev || !isTool(prev)) break;
    if (prev.role === "assistant") found = toolRequests(prev).concat(found);
  }
  return found;
}

function renderTool(node, m) {
  var p = node._parts;
  p.text.classList.remove("markdown");
  if (isToolServerCall(m)) {
    renderToolCall(p.text, m);
    return;
  }
  if (isToolServerResult(m)) {
    // Its text goes into its call's block; shown alone only when the call is not on the page.
    var call = callOf(m);
    var callNode = call && nodes.get(String(call.id));
    node.hidden = !!callNode;
    if (callNode) renderMessage(callNode, call);
    else renderLoneResult(p.text, m);
    return;
  }
  if (m.role === "assistant") {
    var words = lookupWords(toolRequests(m));
    p.text.textContent = words ? "Looked up: " + words : "Used a tool.";
    return;
  }
  // A tool result: one line, with the recalled text behind a toggle.
  var label =
    m.tool_name === "search_records" ? "Search results" : m.tool_name === "save_record" ? "Saved" : "Recalled text";
  p.text.replaceChildren(
    el(
      "details",
      { class: "tool-result" },
      el("summary", { text: label + (m.token_count ? " (" + fmtInt(m.token_count) + " tokens)" : "") }),
      el("pre", { text: m.content || "" })
    )
  );
}

// One message's element brought up to date with the message: classes, data-*, meta line, body,
// failure words and actions.
export function renderMessage(node, m) {
  var notice = isNotice(m);
  var tool = !notice && isTool(m);
  var stopped = isStopped(m);
  var p = node._parts;
  node.className =
    "msg " +
    (notice ? "msg-notice" : tool ? "msg-tool" : "msg-" + (m.role === "user" ? "user" : "assistant")) +
    (m.pinned ? " is-pinned" : "") +
    (m.compacted ? " is-compacted" : "") +
    (stopped ? " is-stopped" : "");
  if (m.id !== undefined && m.id !== null) node.dataset.messageId = String(m.id);
  node.dataset.role = m.role || "";
  node.dataset.kind = m.kind || "";
  node.dataset.status = m.status || "";
  node.dataset.finishReason = m.finish_reason || "";
  if (typeof m.seq === "number") node.dataset.seq = String(m.seq);
  node.setAttribute("aria-busy", ACTIVE_STATUSES[m.status] || m.status === "sending" ? "true" : "false");

  p.who.textContent = authorLabel(m);
  speakerMark(node, m);
  // A notice speaks for itself; its author line would only say "System". Tool rows too.
  p.who.hidden = (notice && m.kind !== "command") || tool;
  p.when.textContent = m.created_at ? fmtTime(m.created_at) : "";
  p.when.dateTime = m.created_at || "";
  if (m.created_at) p.when.title = new Date(m.created_at).toLocaleString();

  var statusLabel = stopped ? "Stopped" : isQueued(m) ? QUEUED_LABEL : STATUS_LABELS[m.status] || "";
  p.status.textContent = statusLabel;
  p.status.hidden = !statusLabel;
  p.status.className = "msg-status" + (stopped ? " msg-status-stopped" : "");
  p.tokens.textContent =
    typeof m.token_count === "number" && m.token_count > 0 && !notice && !tool
      ? fmtInt(m.token_count) + " tokens"
      : "";
  p.tokens.hidden = !p.tokens.textContent;

  p.tags.replaceChildren();
  if (m.pinned) p.tags.append(tag("pinned", "Pinned: always kept in the bot's context"));
  if (m.compacted) p.tags.append(tag("compacted", "Summarised: the bot now sees a summary of this message"));
  if (isMarkdown(m)) {
    var lookups = recallsFor(m);
    if (lookups.length) {
      var words = lookupWords(lookups);
      var chip = tag("recall", "The bot looked in its memory for this reply" + (words ? ": " + words : ""));
      chip.textContent = words ? "Looked up: " + words : "Looked up memory";
      p.tags.append(chip);
    }
  }

  if (tool) {
    node._bodyKey = null;
    renderTool(node, m);
  } else {
    renderBody(node, m);
  }
  if (!tool && m.role === "assistant") renderLiveSteps(p.steps, m);
  var content = m.content || "";
  p.text.hidden = !tool && !content && m.status !== "pending" && m.status !== "streaming";

  // A reply that ended with no text at all says so, rather than showing an empty bubble.
  var silent = !tool && !content && m.role === "assistant" && m.status === "complete";
  p.note.textContent = stopped && !content
    ? "Stopped before any text."
    : silent ? "The model answered with no text." : "";
  p.note.hidden = !p.note.textContent;

  renderFailure(node, m);
  p.text.parentNode.hidden = p.text.hidden && p.error.hidden && p.note.hidden;

  renderActions(node, m, notice || tool);
}

function renderFailure(node, m) {
  var box = node._parts.error;
  box.replaceChildren();
  if (m.status === "unsent") {
    box.append(el("p", { text: m._error ? "Not sent: " + m._error : "Not sent." }));
    box.hidden = false;
    return;
  }
  if (m.status !== "failed" && m.status !== "interrupted") {
    box.hidden = true;
    return;
  }
  var err = failureOf(m);
  var words = failureWords(err.code, err.details);
  box.append(
    el("p", { class: "msg-error-title", text: words.title }),
    el("p", { class: "msg-error-advice", text: words.advice })
  );
  if (err.code || err.message) {
    box.append(
      el(
        "details",
        { class: "msg-error-details" },
        el("summary", { text: "Details" }),
        el(
          "p",
          null,
          el("code", { class: "msg-error-code", text: err.code || "error" }),
          err.message ? " — " + err.message : null
        )
      )
    );
  }
  if (err.code === "context_too_large" && m.role === "assistant") {
    var fit = el("p", { class: "msg-error-fit", hidden: true });
    box.append(fit);
    hooks.showFit(m, fit);
  }
  box.dataset.code = err.code || "";
  box.hidden = false;
}

function tag(text, title) {
  return el("span", { class: "tag tag-" + text, text: text, title: title });
}

function actionButton(text, className, onClick) {
  return el("button", { type: "button", class: "button button-small " + className, text: text, onclick: onClick });
}

function renderActions(node, m, quiet) {
  var actions = node._parts.actions;
  actions.replaceChildren();
  if (m.status === "unsent" && m._clientId) {
    actions.append(
      actionButton("Retry", "", function () {
        hooks.retrySend(m._clientId);
      }),
      actionButton("Discard", "button-quiet", function () {
        hooks.discardSend(m._clientId);
      })
    );
  } else if (!quiet && m.role === "assistant" && m.status === "failed" && failureOf(m).code === "context_too_large") {
    // Retrying as it is would fail the same way: offer the fix.
    var compact = actionButton("Compact and retry", "button-primary msg-compact-retry", function () {
      hooks.compactAndRetry(m, compact);
    });
    compact.title = "Run /compact, then send the message again if it fits";
    actions.append(
      compact,
      actionButton("Edit to shorten", "msg-edit-shorten", function () {
        hooks.editToShorten(m);
      })
    );
  } else if (!quiet && m.role === "assistant" && (m.status === "failed" || m.status === "interrupted")) {
    var retry = actionButton("Retry", "button-primary msg-retry", function () {
      hooks.retryReply(m, retry);
    });
    retry.setAttribute("aria-label", "Retry: run this reply again");
    actions.append(retry);
  }
  if (!quiet && m.id !== undefined && m.id !== null && (m.status === "complete" || m.pinned)) {
    var pin = actionButton(m.pinned ? "Unpin" : "Pin", "button-quiet msg-pin", function () {
      togglePin(m.id, pin);
    });
    pin.setAttribute("aria-pressed", m.pinned ? "true" : "false");
    pin.title = m.pinned
      ? "Stop always keeping this message in the bot's context"
      : "Always keep this message in the bot's context";
    actions.append(pin);
  }
  if (!quiet && m.id !== undefined && m.id !== null && m.status === "complete" && m.kind === "chat") {
    // A new version of the message, as a branch: the old one stays, one flip away.
    if (m.role === "user") {
      var edit = actionButton("Edit", "button-quiet msg-edit", function () {
        hooks.startEdit(node, m);
      });
      edit.title = "Edit this message: the bot answers the new version; the old one stays as a branch";
      actions.append(edit);
    } else if (m.role === "assistant") {
      var again = actionButton("Regenerate", "button-quiet msg-regenerate", function () {
        hooks.regenerate(m, again);
      });
      again.title = "Write this reply again: the old one stays as a branch";
      actions.append(again);
    }
  }
  var seen = quiet ? null : contextButton(node, m);
  if (seen) actions.append(seen);
  if (m.content && m.status !== "sending" && !ACTIVE_STATUSES[m.status] && !isTool(m)) {
    var copy = actionButton("Copy", "button-quiet msg-copy", function () {
      copyMessage(m, copy);
    });
    copy.title = "Copy this message as markdown";
    actions.append(copy);
  }
  actions.hidden = !actions.childElementCount;
}

// Keeps DOM order by seq. Nodes without a seq (optimistic sends, placeholders built from a
// delta whose message.created was lost) stay where they are; optimistic sends stay last.
export function insertNode(node, seq) {
  var children = ui.transcript.children;
  if (typeof seq !== "number") {
    ui.transcript.append(node);
    return;
  }
  for (var i = children.length - 1; i >= 0; i--) {
    var child = children[i];
    if (child === node || child.dataset.clientId || !child.dataset.seq) continue;
    if (Number(child.dataset.seq) < seq) {
      var after = child.nextElementSibling;
      // Skip seq-less placeholders that belong before us, never past an optimistic send.
      while (after && !after.dataset.clientId && !after.dataset.seq && after.classList.contains("msg")) {
        after = after.nextElementSibling;
      }
      ui.transcript.insertBefore(node, after);
      return;
    }
  }
  // Nothing earlier: go before the first node with a seq (a message, or a compaction marker
  // of messages that were loaded later — a marker must never end up before what it covers).
  var first = null;
  for (var j = 0; j < children.length; j++) {
    if (children[j] !== node && children[j].dataset.seq && !children[j].dataset.clientId) {
      first = children[j];
      break;
    }
  }
  ui.transcript.insertBefore(node, first || ui.transcript.querySelector(".msg"));
}

function normalise(text) {
  return String(text || "").trim();
}

// Adds or replaces a message by id. A user message the server confirms replaces the optimistic
// bubble that was shown while it was being sent.
export function upsertMessage(m) {
  if (!m || m.id === undefined || m.id === null) return;
  var id = String(m.id);
  if (typeof m.seq === "string" && /^\d+$/.test(m.seq)) m = Object.assign({}, m, { seq: Number(m.seq) });
  var existing = messages.get(id);
  if (existing && !ACTIVE_STATUSES[existing.status] && existing.status && ACTIVE_STATUSES[m.status]) {
    // A late frame or a lagging read must not move a finished message back to streaming.
    return;
  }
  if (
    existing &&
    ACTIVE_STATUSES[existing.status] &&
    ACTIVE_STATUSES[m.status] &&
    typeof existing.content === "string" &&
    typeof m.content === "string" &&
    existing.content.length > m.content.length &&
    existing.content.indexOf(m.content) === 0
  ) {
    // The stored partial text lags the deltas we already showed; keep the longer text.
    m = Object.assign({}, m, { content: existing.content });
  }
  if (m.status === "failed" && m.error) failures.set(id, m.error);
  if (existing && typeof existing.seq === "number" && bySeq.get(existing.seq) === existing) {
    bySeq.delete(existing.seq);
  }
  messages.set(id, m);
  if (typeof m.seq === "number") bySeq.set(m.seq, m);
  var node = nodes.get(id);
  if (!node && (m.role === "user" || m.kind === "command")) node = adoptOptimistic(m);
  var isNew = !node;
  if (!node) node = buildMessageNode(m);
  // A compaction notice (from /compact, whichever way it was sent): its marker is new too.
  if (isNew && m.kind === "notice" && !existing && hooks.markersAreLoaded()) hooks.loadMarkers(state.epoch);
  nodes.set(id, node);
  var seqChanged = node.dataset.seq !== (typeof m.seq === "number" ? String(m.seq) : undefined);
  renderMessage(node, m);
  if (isNew || seqChanged || !node.isConnected) {
    if (node.isConnected) node.remove();
    insertNode(node, m.seq);
  }
}

function adoptOptimistic(m) {
  var match = null;
  pendingSends.forEach(function (pending, clientId) {
    if (match) return;
    if ((m.client_id && m.client_id === clientId) || normalise(pending.content) === normalise(m.content)) {
      match = clientId;
    }
  });
  if (!match) return null;
  var pending = pendingSends.get(match);
  clearTimeout(pending.timer);
  if (pending.waitingNode) pending.waitingNode.remove();
  pendingSends.delete(match);
  var node = pending.node;
  delete node.dataset.clientId;
  node.remove(); // re-inserted at its seq position
  return node;
}

export function removeMessage(id) {
  var node = nodes.get(id);
  if (node) node.remove();
  var m = messages.get(id);
  if (m && typeof m.seq === "number" && bySeq.get(m.seq) === m) bySeq.delete(m.seq);
  nodes.delete(id);
  messages.delete(id);
}

// Replies of a chat run one at a time: a message sent while a reply is written is answered after
// it. Its pending reply says so until the one before it ends.
const QUEUED_LABEL = "Queued — answers after the reply above";

function isQueued(m) {
  if (m.role !== "assistant" || m.status !== "pending" || typeof m.seq !== "number") return false;
  var earlier = false;
  messages.forEach(function (other) {
    if (other.role === "assistant" && ACTIVE_STATUSES[other.status] && typeof other.seq === "number" && other.seq < m.seq) earlier = true;
  });
  return earlier;
}

// A queued reply's label changes when the reply before it ends.
function refreshQueued() {
  messages.forEach(function (m, id) {
    var node = nodes.get(id);
    if (!node || m.role !== "assistant" || m.status !== "pending") return;
    var label = isQueued(m) ? QUEUED_LABEL : STATUS_LABELS.pending;
    var status = node.querySelector(".msg-status");
    if (status && status.textContent !== label) renderMessage(node, m);
  });
}

export function afterMessagesChanged() {
  refreshQueued();
  // A message re-rendered or re-inserted (a reply streaming in) keeps its ‹ i/n › control.
  hooks.renderFlips();
  ui.transcriptEmpty.hidden = true;
  if (state.sessionId !== null && !ui.transcript.querySelector(".msg")) {
    ui.transcriptEmpty.textContent = "No messages yet. Say hello!";
    ui.transcriptEmpty.hidden = false;
    if (!ui.transcriptEmpty.isConnected) ui.transcript.prepend(ui.transcriptEmpty);
  }
  hooks.updateComposer();
  hooks.scheduleStaleCheck();
}

function isNearBottom() {
  var t = ui.transcript;
  return t.scrollHeight - t.scrollTop - t.clientHeight < 80;
}

export function scrollToBottom(force) {
  if (force || isNearBottom()) ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

// Wraps DOM changes so the view follows new content only if the reader was already at the end.
export function withScroll(fn) {
  var stick = isNearBottom();
  fn();
  if (stick) scrollToBottom(true);
}

// ---------------------------------------------------------------------------------------------
// Pinning

function togglePin(messageId, button) {
  var m = messages.get(String(messageId));
  if (!m) return;
  button.disabled = true;
  var action = m.pinned ? "unpin/" : "pin/";
  var epoch = state.epoch;
  api("POST", "messages/" + encodeURIComponent(messageId) + "/" + action)
    .then(function (updated) {
      if (epoch !== state.epoch) return;
      var merged = Object.assign({}, m, updated && updated.id !== undefined ? updated : { pinned: !m.pinned });
      upsertMessage(merged);
      var node = nodes.get(String(messageId));
      var pin = node && node.querySelector(".msg-pin");
      if (pin) pin.focus();
      scheduleContextRefresh(300);
    })
    .catch(function (err) {
      button.disabled = false;
      showError(err);
    });
}

export function hasActiveReply() {
  var active = false;
  messages.forEach(function (m) {
    if (m.role === "assistant" && ACTIVE_STATUSES[m.status]) active = true;
  });
  return active;
}

// A search hit's target (/chat/<id>/#m<seq>): that message scrolled into view, marked and
// focused. False when this chat holds no such message.
const HASH_SEQ = /^#m(\d+)$/;

export function revealMessage(hash) {
  var match = HASH_SEQ.exec(hash || "");
  var m = match && bySeq.get(Number(match[1]));
  var node = m && nodes.get(String(m.id));
  if (!node) return false;
  nodes.forEach(function (other) {
    delete other.dataset.found;
  });
  node.dataset.found = "true";
  node.id = "m" + m.seq;
  node.setAttribute("tabindex", "-1");
  node.scrollIntoView({ block: "center" });
  node.focus({ preventScroll: true });
  return true;
}
