/*
 * The bot picker at the top of the sidebar: the list, what the chosen bot is, and the "new bot"
 * form with its field errors.
 */
import { byId, el } from "../lib/dom.js";
import { isBuiltin, sameId } from "../lib/format.js";
import { showError } from "../render/status.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { findBot, state } from "../state/state.js";
import { api, asList, describeError } from "../transport/api.js";
import { updateComposer } from "./composer.js";
import { loadSessions } from "./sidebar.js";

export function loadBots(preferredId, preferredSessionId) {
  // Until the chat the address names (or the newest) is open, typing would start a new chat with
  // the selected bot (composer.js): the composer waits for the first list (a fast first "hello"
  // in the demo room once went to a new chat of its own).
  state.chatPending = true;
  updateComposer();
  var loading = api("GET", "bots/").then(
    function (data) {
      state.bots = asList(data);
      renderBotOptions();
      var chosen =
        findBot(preferredId) || findBot(state.botId) || (state.bots.length ? state.bots[0] : null);
      selectBot(chosen ? chosen.id : null);
      return loadSessions(preferredSessionId);
    },
    function (err) {
      ui.botSelect.replaceChildren(option("", "Could not load bots"));
      showError(err);
    }
  );
  return loading.finally(function () {
    state.chatPending = false;
    updateComposer();
  });
}

function option(value, text) {
  return el("option", { value: value, text: text });
}

function renderBotOptions() {
  var opts = state.bots.map(function (bot) {
    return option(String(bot.id), bot.name + " — " + bot.model);
  });
  if (!opts.length) opts = [option("", "No bots yet — create one below")];
  ui.botSelect.replaceChildren.apply(ui.botSelect, opts);
  ui.botSelect.disabled = !state.bots.length;
}

function renderBotInfo() {
  var bot = findBot(state.botId);
  ui.botInfo.replaceChildren();
  if (!bot) {
    ui.newSession.disabled = true;
    if (!state.bots.length) {
      ui.botInfo.textContent = "Create a bot to start chatting.";
      ui.newBotPanel.open = true;
    }
    return;
  }
  ui.newSession.disabled = false;
  ui.botInfo.append("Model: ", el("span", { class: "bot-model", text: bot.model }));
  if (isBuiltin(bot.model)) {
    ui.botInfo.append(
      " ",
      el("span", {
        class: "builtin-note",
        text:
          "built-in, not a language model — it answers by quoting what its context holds" +
          (bot.tools && bot.tools.length
            ? "; start a message with one of its tools' names to call it"
            : ""),
      })
    );
  }
  if (bot.is_shared) ui.botInfo.append(" ", el("span", { class: "tag", text: "shared" }));
}

// A bot made on this page (the New bot form, the first-run card): listed and chosen for the next
// new chat (an explicit choice, as if picked).
export function botAdded(bot) {
  state.bots = state.bots.filter(function (b) {
    return !sameId(b.id, bot.id);
  });
  state.bots.push(bot);
  renderBotOptions();
  state.botPicked = true;
  selectBot(bot.id);
  return Promise.resolve(bot);
}

// The bot the next new chat starts with ("New chat", or typing with no chat open). It opens,
// closes and filters nothing: the open chat keeps its own bot (docs/api.md, sessions).
export function selectBot(botId) {
  var hadNone = state.botId === null;
  state.botId = botId === null || botId === undefined ? null : botId;
  if (state.botId !== null) ui.botSelect.value = String(state.botId);
  renderBotInfo();
  updateComposer();
  // The first bot (none before): the empty page now says typing starts a chat.
  if (hadNone && state.sessionId === null) hooks.closeSession();
}

// Opening a chat offers its bot for the next new one, unless the user chose one since the last
// new chat (a bot the picker lists; one no longer shared leaves the picker as it was).
export function botFollowChat(botId) {
  if (!state.botPicked && findBot(botId) && !sameId(botId, state.botId)) selectBot(botId);
}


// New bot form ---------------------------------------------------------------------------------

const BOT_FIELDS = {
  name: "new-bot-name",
  system_prompt: "new-bot-system-prompt",
  model: "new-bot-model",
  api_base: "new-bot-api-base",
  api_key_env: "new-bot-api-key-env",
};

function clearBotErrors() {
  ui.newBotError.hidden = true;
  ui.newBotError.replaceChildren();
  Object.keys(BOT_FIELDS).forEach(function (field) {
    var input = byId(BOT_FIELDS[field]);
    input.removeAttribute("aria-invalid");
    var described = (input.getAttribute("aria-describedby") || "")
      .split(/\s+/)
      .filter(function (id) {
        return id && id !== input.id + "-errors";
      });
    if (described.length) input.setAttribute("aria-describedby", described.join(" "));
    else input.removeAttribute("aria-describedby");
    var old = byId(input.id + "-errors");
    if (old) old.remove();
  });
}

function messagesOf(value) {
  if (value === null || value === undefined) return [];
  if (Array.isArray(value)) {
    return value.reduce(function (acc, item) {
      return acc.concat(messagesOf(item));
    }, []);
  }
  if (typeof value === "object") {
    if (typeof value.message === "string") return [value.message];
    return Object.keys(value).reduce(function (acc, key) {
      return acc.concat(messagesOf(value[key]));
    }, []);
  }
  return [String(value)];
}

function showBotErrors(err) {
  clearBotErrors();
  var general = [];
  var firstInvalid = null;
  var details = err.details;
  if (details && typeof details === "object" && !Array.isArray(details)) {
    Object.keys(details).forEach(function (field) {
      var texts = messagesOf(details[field]);
      if (!texts.length) return;
      if (!BOT_FIELDS[field]) {
        general = general.concat(
          field === "non_field_errors" || field === "__all__"
            ? texts
            : texts.map(function (t) {
                return field + ": " + t;
              })
        );
        return;
      }
      var input = byId(BOT_FIELDS[field]);
      var list = el(
        "ul",
        { class: "field-errors", id: input.id + "-errors" },
        texts.map(function (t) {
          return el("li", { text: t });
        })
      );
      input.insertAdjacentElement("afterend", list);
      input.setAttribute("aria-invalid", "true");
      var described = input.getAttribute("aria-describedby");
      input.setAttribute("aria-describedby", (described ? described + " " : "") + list.id);
      if (!firstInvalid) firstInvalid = input;
    });
  } else {
    general = general.concat(messagesOf(details));
  }
  ui.newBotError.append(
    el("p", { text: describeError(err) }),
    ...general.map(function (t) {
      return el("p", { text: t });
    })
  );
  ui.newBotError.hidden = false;
  (firstInvalid || ui.newBotError).focus();
}

export function botsBind() {
  ui.botSelect.addEventListener("change", function () {
    var bot = findBot(ui.botSelect.value);
    if (!bot) return;
    state.botPicked = true;
    selectBot(bot.id);
  });

  ui.newBotForm.addEventListener("submit", function (event) {
    event.preventDefault();
    clearBotErrors();
    var payload = {};
    Object.keys(BOT_FIELDS).forEach(function (field) {
      payload[field] = byId(BOT_FIELDS[field]).value;
    });
    payload.name = payload.name.trim();
    payload.model = payload.model.trim() || "builtin/recall";
    payload.api_base = payload.api_base.trim();
    payload.api_key_env = payload.api_key_env.trim();
    if (!payload.name) {
      showBotErrors({
        code: "validation_error",
        message: "The bot needs a name.",
        details: { name: ["This field is required."] },
      });
      return;
    }
    ui.newBotSubmit.disabled = true;
    api("POST", "bots/", payload)
      .then(function (bot) {
        ui.newBotForm.reset();
        ui.newBotPanel.open = false;
        return botAdded(bot).then(function () {
          ui.newSession.focus();
        });
      })
      .catch(showBotErrors)
      .finally(function () {
        ui.newBotSubmit.disabled = false;
      });
  });
}
