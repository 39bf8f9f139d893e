/*
 * Sending a message: an optimistic bubble at once, the frame over the socket (or a POST when the
 * socket is not live), and confirmation over REST when the echo is lost. The same client_id makes
 * a repeated send the same request, so a message is never stored twice.
 */
import { scheduleContextRefresh } from "../render/gauge.js";
import { loadMarkers } from "../render/markers.js";
import { hideError, showError } from "../render/status.js";
import {
  afterMessagesChanged,
  buildMessageNode,
  renderMessage,
  scrollToBottom,
  upsertMessage,
  withScroll,
} from "../render/transcript.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { sessionPath, state } from "../state/state.js";
import { failures, messages, pendingSends } from "../state/store.js";
import { api, describeError } from "../transport/api.js";
import { sendFrame, socketIsConnecting, waitForSocket } from "../transport/socket.js";
import { replyAsValue } from "./participants.js";

const CONFIRM_AFTER_MS = 6000; // an unconfirmed websocket send is checked over REST after this


export function sendingReset() {
  pendingSends.forEach(function (p) {
    clearTimeout(p.timer);
  });
  pendingSends.clear();
}

// The user message a reply answers: the nearest user chat message before it.
export function questionOf(reply) {
  var best = null;
  messages.forEach(function (m) {
    if (m.role !== "user" || m.kind !== "chat" || typeof m.seq !== "number") return;
    if (typeof reply.seq === "number" && m.seq >= reply.seq) return;
    if (!best || m.seq > best.seq) best = m;
  });
  return best;
}

// Retry runs the failed reply again, in place, for the same question (POST messages/{id}/retry/):
// nothing new is stored, so neither the transcript nor the model's request holds the question
// twice (docs/chat-turn.md "Retry"). The reply comes back pending; its frames stream it.
export function retryReply(reply, button) {
  if (reply.id === undefined || reply.id === null) return;
  if (button) button.disabled = true;
  hideError();
  var epoch = state.epoch;
  api("POST", "messages/" + reply.id + "/retry/")
    .then(function (result) {
      if (epoch !== state.epoch) return;
      failures.delete(String(reply.id));
      withScroll(function () {
        if (result && result.assistant_message) upsertMessage(result.assistant_message);
        afterMessagesChanged();
      });
      hooks.updateComposer();
      scheduleContextRefresh(300);
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      if (button) button.disabled = false;
      // A refusal says why in details.message (e.g. only the chat's last reply can be retried).
      var why = err.details && Array.isArray(err.details.message) ? err.details.message[0] : "";
      showError(why || err);
    });
}

function newClientId() {
  if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
  // randomUUID needs a secure context; plain-http LAN installs still deserve a usable id.
  var bytes = new Uint8Array(16);
  window.crypto.getRandomValues(bytes);
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  var hex = Array.prototype.map
    .call(bytes, function (b) {
      return (b + 0x100).toString(16).slice(1);
    })
    .join("");
  return hex.slice(0, 8) + "-" + hex.slice(8, 12) + "-" + hex.slice(12, 16) + "-" + hex.slice(16, 20) + "-" + hex.slice(20);
}

export function sendContent(content) {
  hideError();
  hooks.updateComposer();
  var clientId = newClientId();
  var m = { role: "user", kind: content.indexOf("/compact") === 0 ? "command" : "chat", content: content, status: "sending", created_at: new Date().toISOString() };
  var node = buildMessageNode(m);
  node.dataset.clientId = clientId;
  var pending = { content: content, node: node, message: m, timer: null, transport: null };
  // Manual mode's "reply as …", fixed when sent (a retry asks the same bot).
  var replyAs = m.kind === "chat" ? replyAsValue() : null;
  if (replyAs !== null) pending.replyAs = replyAs;
  pendingSends.set(clientId, pending);
  withScroll(function () {
    renderMessage(node, m);
    ui.transcript.append(node);
    afterMessagesChanged();
  });
  scrollToBottom(true);
  dispatchSend(clientId);
}

function dispatchSend(clientId) {
  var pending = pendingSends.get(clientId);
  if (!pending) return;
  setPendingStatus(pending, "sending");
  if (socketIsConnecting() && !pending.waitedForSocket) {
    // Just opened this chat: give the socket a moment so the reply can stream.
    pending.waitedForSocket = true;
    var epoch = state.epoch;
    waitForSocket(3000).then(function () {
      if (epoch === state.epoch) dispatchSend(clientId);
    });
    return;
  }
  var frame = { type: "message.send", content: pending.content, client_id: clientId };
  if (pending.replyAs !== undefined) frame.reply_as = pending.replyAs;
  if (sendFrame(frame)) {
    pending.transport = "ws";
    clearTimeout(pending.timer);
    pending.timer = setTimeout(function () {
      confirmSend(clientId);
    }, CONFIRM_AFTER_MS);
  } else {
    sendOverHttp(clientId, true);
  }
}

function setPendingStatus(pending, status, error) {
  pending.message = Object.assign({}, pending.message, { status: status, _clientId: status === "unsent" ? findClientId(pending) : undefined, _error: error });
  renderMessage(pending.node, pending.message);
}

function findClientId(pending) {
  var found = null;
  pendingSends.forEach(function (p, id) {
    if (p === pending) found = id;
  });
  return found;
}

// The websocket echo may have been dropped by the channel layer. Look over REST first; if the
// server still has no such message, post it over HTTP with the same client_id, which the server
// treats as the same request (idempotent), so it can never be stored twice.
function confirmSend(clientId) {
  var pending = pendingSends.get(clientId);
  if (!pending) return;
  var epoch = state.epoch;
  hooks.resync(false).then(function () {
    if (epoch !== state.epoch || !pendingSends.has(clientId)) return;
    sendOverHttp(clientId, false);
  });
}

// Sends made over the socket and still unconfirmed: check them over REST (after a reconnect).
export function confirmSocketSends() {
  pendingSends.forEach(function (pending, clientId) {
    if (pending.transport === "ws" && pending.node.dataset.status === "sending") confirmSend(clientId);
  });
}

// The same, half a second from now (the socket refused a frame).
export function confirmSocketSendsSoon() {
  pendingSends.forEach(function (pending, clientId) {
    if (pending.transport === "ws" && pending.node.dataset.status === "sending") {
      clearTimeout(pending.timer);
      pending.timer = setTimeout(function () {
        confirmSend(clientId);
      }, 500);
    }
  });
}

function sendOverHttp(clientId, wait) {
  ui.composerNote.hidden = true;
  var pending = pendingSends.get(clientId);
  if (!pending) return;
  pending.transport = "http";
  clearTimeout(pending.timer);
  var epoch = state.epoch;
  var body = { content: pending.content, client_id: clientId };
  if (pending.replyAs !== undefined) body.reply_as = pending.replyAs;
  if (wait) body.wait = true;
  if (wait) showWaitingReply(clientId);
  api("POST", sessionPath("messages/"), body)
    .then(function (result) {
      if (epoch !== state.epoch) return;
      withScroll(function () {
        ["user_message", "notice", "assistant_message"].forEach(function (key) {
          if (result && result[key] && typeof result[key] === "object") upsertMessage(result[key]);
        });
        if (result && result.compaction && typeof result.compaction === "object") {
          var c = result.compaction;
          if (c.outcome === "compacted") {
            hooks.resync(true);
            loadMarkers(epoch);
          }
        }
        dropPending(clientId);
        afterMessagesChanged();
      });
      scheduleContextRefresh(300);
      hooks.maybeRefreshTitle();
      return hooks.resync(false);
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      removeWaitingReply(clientId);
      var stored = err.details && typeof err.details === "object" ? err.details : null;
      if (stored && stored.user_message && stored.assistant_message) {
        // The exchange is stored and the reply carries the error: show it there, in words.
        withScroll(function () {
          upsertMessage(stored.user_message);
          upsertMessage(stored.assistant_message);
          dropPending(clientId);
          afterMessagesChanged();
        });
        scheduleContextRefresh(300);
        hooks.maybeRefreshTitle();
        var reply = stored.assistant_message;
        if (err.code === "service_unavailable" && (reply.status === "pending" || reply.status === "streaming")) {
          // Stored, but the task queue is down: the reply is waiting, not failed; say so.
          showError("Your message is saved. The task queue is not answering, so the reply has not started yet: it starts by itself when the service is back.");
        }
        return;
      }
      // Some errors (context_too_large, model_unavailable) come after the user message was
      // stored; a resync shows it, and whatever is still unconfirmed is marked not sent.
      hooks.resync(false).then(function () {
        if (epoch !== state.epoch) return;
        var p = pendingSends.get(clientId);
        if (p) setPendingStatus(p, "unsent", describeError(err));
      });
      showError(err);
    });
}

// While a wait=true request is open nothing streams, so show that a reply is on its way.
function showWaitingReply(clientId) {
  var pending = pendingSends.get(clientId);
  if (!pending || pending.waitingNode) return;
  var m = { role: "assistant", kind: "chat", content: "", status: "pending" };
  var node = buildMessageNode(m);
  node.dataset.clientId = clientId + "-reply";
  renderMessage(node, m);
  delete node.dataset.messageId;
  pending.node.insertAdjacentElement("afterend", node);
  pending.waitingNode = node;
}

function removeWaitingReply(clientId) {
  var pending = pendingSends.get(clientId);
  if (pending && pending.waitingNode) {
    pending.waitingNode.remove();
    pending.waitingNode = null;
  }
}

function dropPending(clientId) {
  var pending = pendingSends.get(clientId);
  if (!pending) return;
  clearTimeout(pending.timer);
  removeWaitingReply(clientId);
  // The server's copy normally adopted the node already; if not (no user message in the
  // response, e.g. a command), the resync that follows brings it in.
  if (pending.node.dataset.clientId) pending.node.remove();
  pendingSends.delete(clientId);
}

export function retrySend(clientId) {
  hideError();
  dispatchSend(clientId);
}

export function discardSend(clientId) {
  var pending = pendingSends.get(clientId);
  if (!pending) return;
  if (!ui.composer.value.trim()) {
    ui.composer.value = pending.content;
    hooks.autoResize();
  }
  dropPending(clientId);
  afterMessagesChanged();
  ui.composer.focus();
}
