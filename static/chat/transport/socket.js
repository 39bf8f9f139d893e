/*
 * The session websocket /ws/sessions/{id}/: a lossy, fast path for live updates. Frames go to
 * frames.js; whatever it may have dropped is recovered over REST (session.js resync) on open.
 */
import { hooks } from "../state/hooks.js";
import { LOGIN_URL, WS_PATH } from "../state/page.js";
import { state } from "../state/state.js";

const RECONNECT_MAX_MS = 15000;

// This chat's socket and its reconnect back-off; nothing outside this module touches them.
const live = {
  socket: null,
  open: false,
  reconnectTimer: null,
  reconnectAttempts: 0,
  lastFrameAt: 0,
  unavailableCloses: 0,
};

export function socketIsOpen() {
  return live.open;
}

// The socket of this chat is still connecting (a send may wait a moment for it).
export function socketIsConnecting() {
  return !!live.socket && live.socket.readyState === WebSocket.CONNECTING;
}

export function socketLastFrameAt() {
  return live.lastFrameAt;
}

function socketUrl(sessionId) {
  return (
    (location.protocol === "https:" ? "wss" : "ws") +
    "://" +
    location.host +
    WS_PATH +
    encodeURIComponent(sessionId) +
    "/"
  );
}

export function connect(epoch) {
  if (epoch !== state.epoch || state.sessionId === null) return;
  if (typeof window.WebSocket !== "function") {
    hooks.setConnection("Live updates unavailable", "offline");
    return;
  }
  clearTimeout(live.reconnectTimer);
  var reconnecting = live.reconnectAttempts > 0;
  if (reconnecting) hooks.setConnection("Reconnecting…", "reconnecting");
  else hooks.setConnection("Connecting…", "connecting");
  var socket;
  try {
    socket = new WebSocket(socketUrl(state.sessionId));
  } catch (e) {
    scheduleReconnect(epoch);
    return;
  }
  live.socket = socket;

  socket.onopen = function () {
    if (epoch !== state.epoch || live.socket !== socket) return;
    live.open = true;
    live.reconnectAttempts = 0;
    live.lastFrameAt = Date.now();
    hooks.setConnection("Live", "live");
    hooks.updateComposer();
    // Frames sent while we were connecting or away are not replayed: catch up over REST.
    hooks.resync(false).then(function () {
      if (epoch !== state.epoch) return;
      hooks.confirmSocketSends();
    });
  };

  socket.onmessage = function (event) {
    if (epoch !== state.epoch || live.socket !== socket) return;
    live.lastFrameAt = Date.now();
    live.unavailableCloses = 0;
    var frame;
    try {
      frame = JSON.parse(event.data);
    } catch (e) {
      return;
    }
    hooks.handleFrame(frame);
  };

  socket.onclose = function (event) {
    if (live.socket !== socket) return;
    live.socket = null;
    live.open = false;
    hooks.updateComposer();
    if (epoch !== state.epoch) return;
    if (event.code === 4404) {
      hooks.setConnection("", "");
      hooks.showError("This chat is not available (it may have been deleted).");
      hooks.dropSession(state.sessionId);
      return;
    }
    if (event.code === 4401 || event.code === 4403) {
      hooks.setConnection("Signed out", "offline");
      window.location.assign(LOGIN_URL + "?next=" + encodeURIComponent(location.pathname));
      return;
    }
    if (event.code === 4503) {
      // The server is up but a service it needs is down (event.reason says so): the socket
      // opened before it closed, so keep the back-off growing across these closes.
      live.unavailableCloses = (live.unavailableCloses || 0) + 1;
      live.reconnectAttempts = live.unavailableCloses;
      scheduleReconnect(epoch);
      hooks.setConnection("Live updates unavailable (" + (event.reason || "service unavailable") + ") — retrying…", "reconnecting");
      return;
    }
    live.unavailableCloses = 0;
    scheduleReconnect(epoch);
  };
}

function scheduleReconnect(epoch) {
  live.reconnectAttempts++;
  var base = Math.min(RECONNECT_MAX_MS, 500 * Math.pow(2, live.reconnectAttempts - 1));
  var delay = Math.round(base / 2 + Math.random() * (base / 2));
  hooks.setConnection(
    live.reconnectAttempts > 3 ? "Offline — reconnecting… (messages are sent over HTTP meanwhile)" : "Reconnecting…",
    "reconnecting"
  );
  clearTimeout(live.reconnectTimer);
  live.reconnectTimer = setTimeout(function () {
    connect(epoch);
  }, delay);
}

export function disconnect() {
  clearTimeout(live.reconnectTimer);
  live.reconnectAttempts = 0;
  var socket = live.socket;
  live.socket = null;
  live.open = false;
  if (socket) {
    socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
    try {
      socket.close(1000);
    } catch (e) {
      /* already closed */
    }
  }
}

export function sendFrame(frame) {
  if (!live.socket || !live.open || live.socket.readyState !== WebSocket.OPEN) return false;
  try {
    live.socket.send(JSON.stringify(frame));
    return true;
  } catch (e) {
    return false;
  }
}

// Re-open immediately when the browser says the network is back or the tab becomes visible.
function nudgeReconnect() {
  if (state.sessionId !== null && !live.socket && live.reconnectTimer) {
    clearTimeout(live.reconnectTimer);
    connect(state.epoch);
  }
}
export function socketBind() {
  window.addEventListener("online", nudgeReconnect);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") nudgeReconnect();
  });
}

export function waitForSocket(timeoutMs) {
  return new Promise(function (resolve) {
    var started = Date.now();
    (function poll() {
      var s = live.socket;
      if (!s || s.readyState !== WebSocket.CONNECTING || live.open || Date.now() - started >= timeoutMs) {
        resolve();
        return;
      }
      setTimeout(poll, 50);
    })();
  });
}
