/*
 * The calls a lower floor makes into a higher one, wired once by the entry module (chat.js):
 * the socket hands each frame to hooks.handleFrame, the transcript's Retry button calls
 * hooks.retrySend, and so on, without importing the module that owns them. The import graph
 * stays one-way (lib -> state -> transport -> render -> controllers -> chat.js, docs/architecture.md);
 * which module answers each call is read in one place, chat.js's provide({...}).
 *
 * A hook that is called before it was provided, or provided twice, or not declared here throws:
 * a wiring mistake fails loudly on first use instead of doing nothing.
 */

const DECLARED = [
  // controllers/composer.js
  "updateComposer",
  "autoResize",
  // controllers/session.js
  "resync",
  "openSession",
  "closeSession",
  "writeUrl",
  "maybeRefreshTitle",
  "scheduleStaleCheck",
  // controllers/sidebar.js
  "dropSession",
  // controllers/frames.js
  "handleFrame",
  // controllers/sending.js
  "confirmSocketSends",
  "retrySend",
  "retryReply",
  "discardSend",
  // controllers/branches.js
  "regenerate",
  "startEdit",
  "renderFlips",
  // controllers/toolong.js
  "showFit",
  "compactAndRetry",
  "editToShorten",
  // controllers/marker_actions.js
  "markerActions",
  "markerActionsReset",
  // render/markers.js (the transcript reloads the markers it is drawn beside)
  "loadMarkers",
  "markersAreLoaded",
  // render/status.js (the socket's chip and banner)
  "showError",
  "setConnection",
];

export const hooks = {};
const provided = new Set();

DECLARED.forEach(function (name) {
  hooks[name] = function () {
    throw new Error("hooks." + name + " was called before chat.js provided it");
  };
});

export function provide(functions) {
  Object.keys(functions).forEach(function (name) {
    if (!DECLARED.includes(name)) throw new Error("hooks." + name + " is not declared in hooks.js");
    if (provided.has(name)) throw new Error("hooks." + name + " was provided twice");
    if (typeof functions[name] !== "function") throw new Error("hooks." + name + " is not a function");
    provided.add(name);
    hooks[name] = functions[name];
  });
}
