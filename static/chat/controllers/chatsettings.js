/*
 * The "Chat settings" panel: this chat's model (among the bot's: its model and allowed models)
 * and an extra instruction sent after the bot's system prompt, saved with PATCH sessions/{id}/.
 * Read when the panel opens, so it always shows what is stored.
 */
import { byId, el } from "../lib/dom.js";
import { scheduleContextRefresh } from "../render/gauge.js";
import { sessionPath, state } from "../state/state.js";
import { api, describeError } from "../transport/api.js";

const panel = byId("chat-settings");
const form = byId("chat-settings-form");
const model = byId("chat-settings-model");
const instruction = byId("chat-settings-instruction");
const error = byId("chat-settings-error");
const status = byId("chat-settings-status");

function showProblem(text) {
  error.textContent = text || "";
  error.hidden = !text;
}

function load() {
  if (state.sessionId === null) {
    showProblem("Open or start a chat first.");
    return;
  }
  showProblem("");
  status.textContent = "Loading…";
  var epoch = state.epoch;
  api("GET", sessionPath(""))
    .then(function (session) {
      return api("GET", "bots/" + session.bot + "/").then(function (bot) {
        if (epoch !== state.epoch) return;
        var models = [bot.model].concat(
          (bot.allowed_models || []).filter(function (m) {
            return m !== bot.model;
          })
        );
        model.replaceChildren(
          ...models.map(function (name, i) {
            return el("option", { value: i === 0 ? "" : name, text: i === 0 ? name + " (the bot's)" : name });
          })
        );
        model.value = session.model_override || "";
        model.disabled = models.length < 2;
        instruction.value = session.extra_instruction || "";
        status.textContent = models.length < 2 ? "This bot lists no other models." : "";
      });
    })
    .catch(function (err) {
      status.textContent = "";
      showProblem(describeError(err));
    });
}

function save(event) {
  event.preventDefault();
  showProblem("");
  status.textContent = "Saving…";
  api("PATCH", sessionPath(""), { model: model.value, extra_instruction: instruction.value })
    .then(function (session) {
      model.value = session.model_override || "";
      instruction.value = session.extra_instruction || "";
      status.textContent = "Saved. The next reply uses these settings.";
      scheduleContextRefresh(0);
    })
    .catch(function (err) {
      status.textContent = "";
      var details = err.details || {};
      var first = details.model || details.extra_instruction;
      showProblem(first ? first.join(" ") : describeError(err));
    });
}

export function chatSettingsBind() {
  if (!panel || !form) return;
  panel.addEventListener("toggle", function () {
    if (panel.open) load();
  });
  form.addEventListener("submit", save);
}
