/*
 * What the modules share about the page: which bot and chat are open, and the epoch that makes
 * async results of an older chat harmless. Everything else lives with the module that owns it
 * (messages in transcript.js, the socket in socket.js, unconfirmed sends in sending.js...).
 */

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
