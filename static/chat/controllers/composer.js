/*
 * The composer: the text box, Enter to send, Esc or the button to stop a reply, the slash-command
 * hint; with no chat open, typing starts one with the selected bot.
 */
import { el } from "../lib/dom.js";
import { showError } from "../render/status.js";
import { hasActiveReply } from "../render/transcript.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { state } from "../state/state.js";
import { sendFrame, socketIsOpen } from "../transport/socket.js";
import {
  attachmentsProcessing,
  attachmentsWaiting,
  renderAttachments,
  sendWithAttachments,
} from "./attach.js";
import { sendContent } from "./sending.js";
import { createSession } from "./sidebar.js";

export function updateComposer() {
  var hasSession = state.sessionId !== null;
  var canWrite = hasSession || (state.botId !== null && !state.creatingSession && !state.chatPending);
  ui.composer.disabled = !canWrite;
  // A file still being read (a PDF) holds the send until it is ready.
  ui.send.disabled =
    !canWrite || attachmentsProcessing() || (!ui.composer.value.trim() && !attachmentsWaiting());
  renderAttachments();
  var streaming = hasSession && hasActiveReply();
  ui.stop.hidden = !streaming;
  ui.stop.disabled = !socketIsOpen() || state.stopRequested;
  ui.stop.textContent = state.stopRequested ? "Stopping…" : "Stop";
  ui.stop.title = socketIsOpen() ? "Stop the reply (Esc)" : "Reconnecting — stop is available once live again";
}

function submitComposer() {
  var unknown = unknownCommand(ui.composer.value);
  if (unknown) {
    // As the hint says: an unknown command is not sent (a typo of /compact went to the bot as
    // text, and titled the chat); a leading space sends text that begins with /.
    ui.commandHint.textContent = "Unknown command " + unknown + ": not sent. Available: /compact [focus]. Start with a space to send text that begins with /.";
    ui.commandHint.hidden = false;
    return;
  }
  if (state.sessionId === null) {
    startSessionThenSend();
    return;
  }
  var content = ui.composer.value.replace(/\s+$/, "");
  if (attachmentsProcessing()) return; // Enter while a file is being read: the button waits too
  if (attachmentsWaiting()) {
    ui.composer.value = "";
    autoResize();
    updateCommandHint();
    sendWithAttachments(content).finally(updateComposer);
    return;
  }
  if (!content.trim()) return;
  ui.composer.value = "";
  autoResize();
  updateCommandHint();
  sendContent(content);
}

// Typing with no chat open starts one with the selected bot, as the "New chat" button would.
function startSessionThenSend() {
  if (state.botId === null || state.creatingSession || !ui.composer.value.trim()) return;
  state.creatingSession = true;
  updateComposer();
  createSession()
    .then(function (session) {
      if (session) submitComposer();
    })
    .finally(function () {
      state.creatingSession = false;
      updateComposer();
      ui.composer.focus();
    });
}

export function requestStop() {
  if (!hasActiveReply() || state.stopRequested) return;
  if (sendFrame({ type: "generation.stop" })) {
    state.stopRequested = true;
    updateComposer();
    // If the final frame for the stopped reply is lost, REST will tell us how it ended.
    var epoch = state.epoch;
    setTimeout(function () {
      if (epoch === state.epoch && state.stopRequested) {
        hooks.resync(false).then(function () {
          state.stopRequested = false;
          updateComposer();
        });
      }
    }, 3000);
  } else {
    showError("Can't stop the reply while reconnecting. Try again in a moment.");
  }
}

export function autoResize() {
  ui.composer.style.height = "auto";
  ui.composer.style.height = Math.min(ui.composer.scrollHeight + 2, 240) + "px";
}

// Slash-command hint

const COMMANDS = [
  {
    name: "/compact",
    usage: "/compact [focus]",
    help: "Summarise the older messages now, to free context. Add a focus to say what the summary must keep.",
  },
];

function unknownCommand(content) {
  if (content.charAt(0) !== "/") return null;
  var word = content.split(/\s/)[0];
  return COMMANDS.some(function (c) { return c.name === word; }) ? null : word;
}

function updateCommandHint() {
  var value = ui.composer.value;
  if (value.charAt(0) !== "/") {
    ui.commandHint.hidden = true;
    ui.commandHint.replaceChildren();
    return;
  }
  var word = value.split(/\s/)[0];
  var matches = COMMANDS.filter(function (c) {
    return c.name.indexOf(word) === 0 || word.indexOf(c.name) === 0;
  });
  ui.commandHint.replaceChildren();
  if (!matches.length) {
    ui.commandHint.textContent = "Unknown command. Available: /compact [focus]. Start with a space to send text that begins with /.";
  } else {
    matches.forEach(function (c) {
      ui.commandHint.append(el("p", null, el("code", { text: c.usage }), " — " + c.help));
    });
  }
  ui.commandHint.hidden = false;
}

export function composerBind() {
  ui.composerForm.addEventListener("submit", function (event) {
    event.preventDefault();
    submitComposer();
  });

  ui.composer.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.ctrlKey && !event.metaKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      submitComposer();
    } else if (event.key === "Escape" && hasActiveReply()) {
      event.preventDefault();
      requestStop();
    }
  });

  ui.composer.addEventListener("input", function () {
    autoResize();
    updateComposer();
  });

  ui.stop.addEventListener("click", function () {
    requestStop();
    ui.composer.focus();
  });

  ui.composer.addEventListener("input", updateCommandHint);
}
