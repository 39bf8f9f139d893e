/*
 * What the modules share about the page: which bot and chat are open, and the epoch that makes
 * async results of an older chat harmless. The open chat's messages and unconfirmed sends are in
 * store.js, its room in room.js; everything else lives with the module that owns it (the socket
 * in transport/socket.js...).
 */
import { sameId } from "../lib/format.js";

export const state = {
  bots: [],
  botId: null,
  sessions: [],
  sessionId: null,
  // Bumped on every session switch; async results for an older epoch are dropped.
  epoch: 0,
  navigating: false, // popstate is opening what the address names: do not write it back
  creatingSession: false,
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

// The open chat's REST path: sessions/{id}/ and what follows it.
export function sessionPath(suffix) {
  return "sessions/" + encodeURIComponent(state.sessionId) + "/" + (suffix || "");
}
