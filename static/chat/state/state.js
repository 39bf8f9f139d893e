/*
 * What the modules share about the page: which bot and chat are open, and the epoch that makes
 * async results of an older chat harmless. The open chat's messages and unconfirmed sends are in
 * store.js, its room in room.js; everything else lives with the module that owns it (the socket
 * in transport/socket.js...).
 */
import { sameId } from "../lib/format.js";

export const state = {
  bots: [],
  botId: null, // the Bot picker's: the bot a new chat starts with (the open chat has its own)
  // The user chose that bot (picker, new bot form) since the last new chat: opening a chat
  // then leaves the choice alone, the first chat the page opens by itself included.
  botPicked: false,
  sessions: [],
  sessionId: null,
  // Bumped on every session switch; async results for an older epoch are dropped.
  epoch: 0,
  navigating: false, // popstate is opening what the address names: do not write it back
  creatingSession: false,
  // The first load: the chat the address names (or the newest) is not open yet.
  chatPending: false,
  stopRequested: false,
};

// The memory panel (memory.js), once chat.js has made it.
export let memory = null;

export function memorySet(panel) {
  memory = panel;
}

export function findBot(id) {
  for (var i = 0; i < state.bots.length; i++) {
    if (sameId(state.bots[i].id, id)) return state.bots[i];
  }
  return null;
}

// A chat's bot: the listed bot, else what the chat list says of it (a bot no longer shared is
// not in the bot list), else a placeholder.
export function sessionBot(session) {
  var id = session && session.bot;
  return findBot(id) || (session && session.bot_info) || { id: id, slug: "", name: "Bot" };
}

// The open chat's bot (before a chat is open: the picker's).
export function openBot() {
  if (state.sessionId === null) return findBot(state.botId);
  for (var i = 0; i < state.sessions.length; i++) {
    if (sameId(state.sessions[i].id, state.sessionId)) return sessionBot(state.sessions[i]);
  }
  return findBot(state.botId);
}

// The open chat's REST path: sessions/{id}/ and what follows it.
export function sessionPath(suffix) {
  return "sessions/" + encodeURIComponent(state.sessionId) + "/" + (suffix || "");
}
