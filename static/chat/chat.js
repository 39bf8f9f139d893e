/*
 * chat-platform browser client: the entry module (templates/chat/chat.html loads it with
 * type="module"; no build step, the browser resolves the imports).
 *
 * Talks only to the public surface: the REST API under /api/v1/ (the source of truth) and the
 * session websocket /ws/sessions/{id}/ (a lossy, fast path for live updates). Anything the
 * socket may have dropped is recovered by re-reading messages over REST.
 *
 * One module per concern, each sharing lib/dom.js's el() to build elements, on five floors; a
 * module imports only from its own floor or one below, never in a circle (docs/architecture.md,
 * checked by tests/test_static_graph.py):
 *   lib/          dom.js (the element builder), format.js (numbers, times, labels)
 *   state/        page.js (the #chat-app root and its elements), state.js (which bot and chat
 *                 are open), store.js (the open chat's messages, unconfirmed sends), room.js
 *                 (its participants), messages.js (messages in words), hooks.js (calls upward)
 *   transport/    api.js (REST calls and their errors), socket.js (the websocket)
 *   render/       transcript.js (messages on screen), markers.js (compaction markers),
 *                 gauge.js (the context gauge), fold.js (on a phone, the room bar and gauge
 *                 folded into one line), status.js (banner and chips), avatars.js,
 *                 attachlinks.js (files on a message), copy.js, memory.js (the memory panel),
 *                 context_view.js (a reply's "What the model saw", diffed)
 *   controllers/  session.js (open/close, URLs, resync), frames.js (what a server frame does),
 *                 sending.js (sending and confirming), composer.js (the text box, stop),
 *                 bots.js, sidebar.js (the bot picker; chats, rename, drawer), branches.js,
 *                 keyboard.js (focus, roving focus, shortcuts), toolong.js (a message too long:
 *                 compact or shorten), attach.js (files in the composer), chatsettings.js (the
 *                 chat's own model and instruction), participants.js (a room's bots, who answers,
 *                 reply as, whose gauge), mention.js (@ autocomplete), marker_actions.js,
 *                 search.js (search all my chats), transfer.js (export and import)
 * A lower floor that must call a higher one (the socket handing a frame to frames.js, a Retry
 * button calling sending.js) calls hooks.<name>(); this module provides each hook below.
 * theme.js (a classic script in <head> of every page) applies the remembered colour theme.
 * markdown.js (a classic script, with the vendored libraries) renders replies.
 *
 * User-supplied text is only ever written with textContent, never innerHTML.
 */
import { attachBind } from "./controllers/attach.js";
import { botsBind, loadBots } from "./controllers/bots.js";
import { regenerate, renderFlips, startEdit } from "./controllers/branches.js";
import { chatSettingsBind } from "./controllers/chatsettings.js";
import { autoResize, composerBind, updateComposer } from "./controllers/composer.js";
import { firstRunBind } from "./controllers/firstrun.js";
import { handleFrame } from "./controllers/frames.js";
import { keyboardBind } from "./controllers/keyboard.js";
import { markerActions, markerActionsReset } from "./controllers/marker_actions.js";
import { mentionBind } from "./controllers/mention.js";
import { roomBind } from "./controllers/participants.js";
import { searchBind } from "./controllers/search.js";
import { confirmSocketSends, discardSend, retryReply, retrySend } from "./controllers/sending.js";
import {
  closeSession,
  maybeRefreshTitle,
  openSession,
  resync,
  scheduleStaleCheck,
  sessionBind,
  sessionIdFromPath,
  writeUrl,
} from "./controllers/session.js";
import { dropSession, sidebarBind } from "./controllers/sidebar.js";
import { compactAndRetry, editToShorten, showFit } from "./controllers/toolong.js";
import { transferBind } from "./controllers/transfer.js";
import { foldBind } from "./render/fold.js";
import { loadMarkers, markersAreLoaded } from "./render/markers.js";
import { create as memoryPanelCreate } from "./render/memory.js";
import { setConnection, showError, statusBind } from "./render/status.js";
import { provide } from "./state/hooks.js";
import { root } from "./state/page.js";
import { memorySet } from "./state/state.js";
import { api } from "./transport/api.js";
import { socketBind } from "./transport/socket.js";

// Every call a lower floor makes upward, answered here and nowhere else (state/hooks.js).
provide({
  updateComposer,
  autoResize,
  resync,
  openSession,
  closeSession,
  writeUrl,
  maybeRefreshTitle,
  scheduleStaleCheck,
  dropSession,
  handleFrame,
  confirmSocketSends,
  retrySend,
  retryReply,
  discardSend,
  regenerate,
  startEdit,
  renderFlips,
  showFit,
  compactAndRetry,
  editToShorten,
  markerActions,
  markerActionsReset,
  loadMarkers,
  markersAreLoaded,
  showError,
  setConnection,
});

if (root) {
  // Listeners in the order the page has always added them (Escape is handled innermost first).
  statusBind();
  sessionBind();
  botsBind();
  firstRunBind();
  socketBind();
  composerBind();
  sidebarBind();
  searchBind();
  transferBind();
  attachBind();
  chatSettingsBind();
  roomBind();
  foldBind();
  mentionBind();
  memorySet(memoryPanelCreate({ api: api }));
  keyboardBind();
  updateComposer();
  loadBots(root.dataset.botId || null, root.dataset.sessionId || sessionIdFromPath());
}
