/*
 * The open chat: opening and closing it, the address bar, and reading its messages over REST
 * (the full load and the resync that recovers whatever the socket dropped).
 */
import { sameId, sessionLabel } from "../lib/format.js";
import { contextViewReset } from "../render/context_view.js";
import { contextRefreshCancel, gaugeHide, refreshContext } from "../render/gauge.js";
import { loadMarkers, markersReset } from "../render/markers.js";
import { setCompaction, setConnection, showError } from "../render/status.js";
import {
  afterMessagesChanged,
  hasActiveReply,
  removeMessage,
  revealMessage,
  scrollToBottom,
  transcriptReset,
  upsertMessage,
} from "../render/transcript.js";
import { ACTIVE_STATUSES } from "../state/messages.js";
import { ui } from "../state/page.js";
import { gaugeBotQuery } from "../state/room.js";
import { memory, sessionPath, state } from "../state/state.js";
import { messages } from "../state/store.js";
import { api, asList } from "../transport/api.js";
import { connect, disconnect, socketIsOpen, socketLastFrameAt } from "../transport/socket.js";
import { botFollowChat } from "./bots.js";
import { loadBranches } from "./branches.js";
import { updateComposer } from "./composer.js";
import { mentionReset } from "./mention.js";
import { loadRoom, roomReset } from "./participants.js";
import { sendingReset } from "./sending.js";
import { cancelRename, closeDrawer, dropSession, findSession, renderSessions } from "./sidebar.js";
import { tooLongReset } from "./toolong.js";
import { exportLinksSet } from "./transfer.js";

const STALE_STREAM_MS = 10000; // no frames for this long while a reply is active -> resync

// The read side of a chat (resync) and its life cycle here (open, close, the address bar).
let resyncing = null; // the resync in flight, shared by whoever asks meanwhile
let resyncingFull = false;
let staleTimer = null;

// ---------------------------------------------------------------------------------------------
// URLs (docs/architecture.md): /chat/<id>/ names the open chat, /chat/new/ (or /) an unsaved new one.
// Switching chats pushes a history entry, so Back/Forward move between chats and any chat can
// be bookmarked; popstate opens whatever the address now names.

const CHAT_PATH = /^\/chat\/(\d+)\/?$/;

export function sessionIdFromPath() {
  var match = CHAT_PATH.exec(location.pathname);
  return match ? match[1] : null;
}

function chatUrl(sessionId) {
  return sessionId === null || sessionId === undefined ? "/chat/new/" : "/chat/" + encodeURIComponent(sessionId) + "/";
}

// replace: true for corrections (a deleted chat, the first load); otherwise a new entry.
export function writeUrl(replace) {
  if (state.navigating) return; // popstate already moved the address
  var want = chatUrl(state.sessionId);
  if (state.sessionId === null && (location.pathname === "/" || location.pathname === want)) return;
  if (location.pathname === want) return;
  if (replace) history.replaceState({ session: state.sessionId }, "", want);
  else history.pushState({ session: state.sessionId }, "", want);
}

export function sessionBind() {
  // A hit of the chat search in the open chat only changes the address's #m<seq>.
  window.addEventListener("hashchange", function () {
    revealMessage(location.hash);
  });
  window.addEventListener("popstate", function () {
    var wanted = sessionIdFromPath();
    if (sameId(wanted, state.sessionId) || (wanted === null && state.sessionId === null)) return;
    state.navigating = true;
    try {
      if (wanted === null) {
        closeSession();
      } else if (findSession(wanted)) {
        openSession(wanted);
      } else {
        openSessionOfAnyBot(wanted);
      }
    } finally {
      state.navigating = false;
    }
  });
}

// A chat the list does not hold yet (made elsewhere since it was read): read it, then open it.
function openSessionOfAnyBot(sessionId) {
  return api("GET", "sessions/" + encodeURIComponent(sessionId) + "/").then(
    function (session) {
      if (!sameId(sessionId, sessionIdFromPath())) return;
      state.navigating = true;
      try {
        if (!findSession(session.id)) state.sessions.unshift(session);
        openSession(session.id);
      } finally {
        state.navigating = false;
      }
    },
    function (err) {
      showError(err.code === "not_found" ? "That chat does not exist (or is not yours)." : err);
    }
  );
}

// ---------------------------------------------------------------------------------------------
// Opening and closing a session

export function closeSession() {
  state.epoch++;
  disconnect();
  state.sessionId = null;
  transcriptReset();
  tooLongReset();
  markersReset();
  roomReset();
  mentionReset();
  contextViewReset();
  cancelRename();
  sendingReset();
  state.stopRequested = false;
  resyncing = null; // an in-flight read for the old chat must not be shared with the new one
  contextRefreshCancel();
  clearTimeout(staleTimer);
  ui.transcriptEmpty.textContent =
    state.botId === null ? "Choose a bot to start." : "Choose a chat on the left, or just type to start a new one.";
  ui.transcript.replaceChildren(ui.transcriptEmpty);
  // As the page starts: neither loading nor loaded (a chat left before its first read landed
  // keeps nothing hidden; "false" is what a chat's first read sets once it has drawn).
  ui.transcript.removeAttribute("aria-busy");
  ui.transcriptEmpty.hidden = false;
  ui.title.textContent = state.botId === null ? "No chat selected" : "New chat";
  ui.rename.hidden = true;
  gaugeHide();
  setCompaction("");
  setConnection("");
  if (memory) memory.setSession(null);
  exportLinksSet(null);
  updateComposer();
  renderSessions();
}

// A chat the user chose closes the drawer (narrow screens); the one the page opens by itself on
// load (opts.keepDrawer) leaves it as the user has it: a drawer opened while the list was still
// being read must not shut under their finger.
export function openSession(sessionId, opts) {
  if (sameId(sessionId, state.sessionId)) return;
  closeSession();
  var session = findSession(sessionId);
  state.sessionId = session ? session.id : sessionId;
  if (session) botFollowChat(session.bot);
  var epoch = state.epoch;
  ui.title.textContent = session ? sessionLabel(session) : "Chat";
  ui.transcriptEmpty.hidden = true;
  ui.transcript.setAttribute("aria-busy", "true");
  ui.rename.hidden = false;
  document.title = ui.title.textContent + " · chat-platform";
  renderSessions();
  writeUrl(false);
  if (!(opts && opts.keepDrawer)) closeDrawer(false);
  if (memory) memory.setSession(state.sessionId);
  exportLinksSet(state.sessionId);
  updateComposer();
  // The socket opens alongside the first read; its onopen resync covers anything in between.
  connect(epoch);
  loadRoom(epoch);
  refreshContext(epoch);
  Promise.all([loadMessages(epoch, null), loadMarkers(epoch)])
    .then(function () {
      if (epoch !== state.epoch) return;
      ui.transcript.setAttribute("aria-busy", "false");
      // A search hit's link names a message (#m<seq>): show it rather than the newest.
      if (!revealMessage(location.hash)) scrollToBottom(true);
      return loadBranches(epoch);
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      ui.transcript.setAttribute("aria-busy", "false");
      if (err.code === "not_found") {
        dropSession(sessionId);
        showError("That chat no longer exists.");
      } else {
        showError(err);
      }
    });
}

// ---------------------------------------------------------------------------------------------
// Messages: loading and resync

function lastSeq() {
  var max = 0;
  messages.forEach(function (m) {
    if (typeof m.seq === "number" && m.seq > max) max = m.seq;
  });
  return max;
}

// Messages still pending/streaming may have changed without us hearing about it, so a resync
// starts just before the oldest of them rather than after the newest message we hold.
function resyncFrom() {
  var from = lastSeq();
  messages.forEach(function (m) {
    if (ACTIVE_STATUSES[m.status] && typeof m.seq === "number" && m.seq - 1 < from) from = m.seq - 1;
  });
  return Math.max(0, from);
}

function loadMessages(epoch, afterSeq) {
  // In a room, `compacted` is the gauge's seat's (?bot=, docs/rooms.md).
  var query = gaugeBotQuery();
  if (afterSeq !== null && afterSeq !== undefined) query += (query ? "&" : "?") + "after_seq=" + afterSeq;
  return api("GET", sessionPath("messages/") + query).then(function (data) {
    if (epoch !== state.epoch) return;
    var list = asList(data);
    if (afterSeq === null || afterSeq === undefined) {
      // Full load: anything we hold within the listed range that the server no longer lists is
      // gone. Newer messages may have arrived over the socket after this list was read.
      var maxSeq = 0;
      var ids = new Set(
        list.map(function (m) {
          if (typeof m.seq === "number" && m.seq > maxSeq) maxSeq = m.seq;
          return String(m.id);
        })
      );
      messages.forEach(function (m, id) {
        if (!ids.has(id) && typeof m.seq === "number" && m.seq <= maxSeq) removeMessage(id);
      });
    }
    list.forEach(function (m) {
      upsertMessage(m);
    });
    afterMessagesChanged();
  });
}

// One resync at a time; callers that arrive while one runs share it.
export function resync(full) {
  if (state.sessionId === null) return Promise.resolve();
  if (resyncing) {
    if (!full || resyncingFull) return resyncing;
    return resyncing.then(function () {
      return resync(true);
    });
  }
  resyncingFull = !!full;
  var epoch = state.epoch;
  var run = loadMessages(epoch, full ? null : resyncFrom())
    .catch(function (err) {
      if (epoch === state.epoch && err.code !== "network_error") showError(err);
    })
    .finally(function () {
      if (resyncing === run) resyncing = null;
    });
  resyncing = run;
  return run;
}

export function maybeRefreshTitle() {
  var session = findSession(state.sessionId);
  if (!session || session.title) return;
  var epoch = state.epoch;
  api("GET", sessionPath()).then(
    function (fresh) {
      if (epoch !== state.epoch || !fresh || !fresh.title) return;
      session.title = fresh.title;
      ui.title.textContent = sessionLabel(session);
      document.title = ui.title.textContent + " · chat-platform";
      renderSessions();
    },
    function () {}
  );
}

// A reply that stays pending/streaming with no frames for a while has probably lost its
// frames: ask REST how it ended.
export function scheduleStaleCheck() {
  clearTimeout(staleTimer);
  if (!hasActiveReply()) return;
  var epoch = state.epoch;
  staleTimer = setTimeout(function () {
    if (epoch !== state.epoch || !hasActiveReply()) return;
    if (Date.now() - socketLastFrameAt() >= STALE_STREAM_MS || !socketIsOpen()) {
      resync(false).then(scheduleStaleCheck);
    } else {
      scheduleStaleCheck();
    }
  }, STALE_STREAM_MS);
}
