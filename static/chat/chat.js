/*
 * chat-platform browser client: the entry module (templates/chat/chat.html loads it with
 * type="module"; no build step, the browser resolves the imports).
 *
 * Talks only to the public surface: the REST API under /api/v1/ (the source of truth) and the
 * session websocket /ws/sessions/{id}/ (a lossy, fast path for live updates). Anything the
 * socket may have dropped is recovered by re-reading messages over REST.
 *
 * One module per concern, each sharing dom.js's el() to build elements:
 *   page.js, state.js   the #chat-app root and its elements; which bot and chat are open
 *   api.js              REST calls and their errors        socket.js    the websocket
 *   frames.js           what a server frame does            session.js   open/close, URLs, resync
 *   transcript.js       messages on screen                  messages.js  messages in words
 *   sending.js          sending and confirming              composer.js  the text box, stop
 *   gauge.js            the context gauge                   markers.js   compaction markers
 *   bots.js, sidebar.js the bot picker; chats, rename, drawer
 *   memory.js           the memory panel                    status.js    banner and chips
 *   keyboard.js         focus, roving focus, shortcuts      copy.js      copy a message
 *   toolong.js          a message too long: compact or shorten
 *   attach.js           files in the composer (attachlinks.js: shown on a message)
 *   chatsettings.js     the chat's own model and extra instruction
 *   participants.js     a room's bots, who answers, reply as, whose gauge   mention.js  @ autocomplete
 *   context_view.js     a reply's "What the model saw" (its context record, diffed)
 * theme.js (a classic script in <head> of every page) applies the remembered colour theme.
 *   search.js           search all my chats                 transfer.js  export and import
 * markdown.js (a classic script, with the vendored libraries) renders replies.
 *
 * User-supplied text is only ever written with textContent, never innerHTML.
 */
import { api } from "./api.js";
import { attachBind } from "./attach.js";
import { botsBind, loadBots } from "./bots.js";
import { chatSettingsBind } from "./chatsettings.js";
import { composerBind, updateComposer } from "./composer.js";
import { keyboardBind } from "./keyboard.js";
import { mentionBind } from "./mention.js";
import { create as memoryPanelCreate } from "./memory.js";
import { roomBind } from "./participants.js";
import { root } from "./page.js";
import { searchBind } from "./search.js";
import { sessionBind, sessionIdFromPath } from "./session.js";
import { sidebarBind } from "./sidebar.js";
import { socketBind } from "./socket.js";
import { memorySet } from "./state.js";
import { statusBind } from "./status.js";
import { transferBind } from "./transfer.js";

if (root) {
  // Listeners in the order the page has always added them (Escape is handled innermost first).
  statusBind();
  sessionBind();
  botsBind();
  socketBind();
  composerBind();
  sidebarBind();
  searchBind();
  transferBind();
  attachBind();
  chatSettingsBind();
  roomBind();
  mentionBind();
  memorySet(memoryPanelCreate({ api: api }));
  keyboardBind();
  updateComposer();
  loadBots(root.dataset.botId || null, root.dataset.sessionId || sessionIdFromPath());
}
