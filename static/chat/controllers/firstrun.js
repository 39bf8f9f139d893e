/*
 * The first-run card (staff, while every bot the page lists runs a built-in model): connect a
 * model provider (an OpenAI-compatible URL and key, an Ollama URL, an Anthropic key), list its
 * models, make a bot with one of them and open a chat with it. Through the connections API that
 * staff use anywhere else (docs/connections.md "First run"); nothing here stores a key itself.
 */
import { byId, el } from "../lib/dom.js";
import { fmtInt, isBuiltin } from "../lib/format.js";
import { state } from "../state/state.js";
import { api, asList, describeError } from "../transport/api.js";
import { botAdded } from "./bots.js";
import { createSession } from "./sidebar.js";

// What each kind asks for: a base URL (with its usual value), a key (required or not).
const KINDS = {
  openai: { label: "OpenAI-compatible", url: "https://api.openai.com/v1", key: "optional" },
  ollama: { label: "Ollama", url: "http://localhost:11434", key: "none" },
  anthropic: { label: "Anthropic", url: "", key: "required" },
};

let card = null;

function part(id) {
  return byId("first-run-" + id);
}

function kind() {
  var checked = card.querySelector("input[name=first-run-kind]:checked");
  return checked ? checked.value : "openai";
}

function showKind() {
  var k = KINDS[kind()];
  part("url-field").hidden = !k.url;
  part("url").placeholder = k.url;
  part("key-field").hidden = k.key === "none";
  part("key-note").textContent = k.key === "optional" ? "(none for a local server)" : "";
}

// Shown while every bot listed runs a built-in model (and the page has bots to judge by).
export function firstRunUpdate() {
  if (!card) return;
  var onlyBuiltin = state.bots.every(function (bot) {
    return isBuiltin(bot.model);
  });
  card.hidden = !onlyBuiltin;
}

function fail(text) {
  var box = part("error");
  box.textContent = text;
  box.hidden = !text;
}

function hostOf(url) {
  try {
    return new URL(url).host;
  } catch (e) {
    return url;
  }
}

// The same kind and address again (a second try, another key): that connection, not a second.
function findOrCreate(fields) {
  return api("GET", "connections/").then(function (data) {
    var same = asList(data).find(function (c) {
      return c.kind === fields.kind && (c.base_url || "") === (fields.base_url || "");
    });
    if (!same) return api("POST", "connections/", fields);
    var change = fields.api_key ? { api_key: fields.api_key } : null;
    return change ? api("PATCH", "connections/" + same.id + "/", change) : same;
  });
}

function connect(event) {
  event.preventDefault();
  fail("");
  var k = kind();
  var url = part("url").value.trim();
  var key = part("key").value.trim();
  if (KINDS[k].url && !url) return fail("Enter the provider's base URL, e.g. " + KINDS[k].url + ".");
  if (KINDS[k].key === "required" && !key) return fail("Enter the " + KINDS[k].label + " API key.");
  var fields = { kind: k, name: KINDS[k].label + (url ? " at " + hostOf(url) : "") };
  if (KINDS[k].url) fields.base_url = url;
  if (key && KINDS[k].key !== "none") fields.api_key = key;
  var button = part("connect");
  button.disabled = true;
  part("status").textContent = "Connecting and asking for its models…";
  part("models").hidden = true;
  findOrCreate(fields)
    .then(function (connection) {
      part("key").value = "";
      return api("POST", "connections/" + connection.id + "/refresh-models/").then(function (found) {
        listModels(connection, (found && found.models) || []);
      });
    })
    .catch(function (err) {
      part("status").textContent = "";
      fail(describeError(err));
    })
    .finally(function () {
      button.disabled = false;
    });
}

function listModels(connection, models) {
  var list = part("models");
  part("status").textContent = models.length
    ? connection.name + " offers " + fmtInt(models.length) + (models.length === 1 ? " model." : " models.")
    : connection.name + " is connected but listed no models; check that the server serves some.";
  list.replaceChildren.apply(
    list,
    models.map(function (model) {
      var make = el("button", {
        type: "button",
        class: "button button-small button-primary first-run-make",
        text: "Make a bot with this model",
      });
      make.addEventListener("click", function () {
        makeBot(connection, model, make);
      });
      var window_ = model.context_window ? fmtInt(model.context_window) + " tokens" : "";
      return el(
        "li",
        { dataset: { model: model.id } },
        el("span", { class: "first-run-model-id", text: model.id }),
        window_ ? el("span", { class: "muted", text: window_ }) : null,
        make
      );
    })
  );
  list.hidden = !models.length;
}

function makeBot(connection, model, button) {
  fail("");
  button.disabled = true;
  var name = model.id.slice(model.id.indexOf("/") + 1);
  api("POST", "bots/", { name: name, connection: connection.id, model: model.id })
    .then(function (bot) {
      return botAdded(bot).then(function () {
        firstRunUpdate();
        return createSession();
      });
    })
    .catch(function (err) {
      button.disabled = false;
      fail(describeError(err));
    });
}

export function firstRunBind() {
  card = byId("first-run");
  if (!card) return; // not staff: the page has no card
  card.querySelectorAll("input[name=first-run-kind]").forEach(function (radio) {
    radio.addEventListener("change", showKind);
  });
  part("form").addEventListener("submit", connect);
  showKind();
  // The bot list changes (loaded, a bot made in the sidebar): judge again.
  new MutationObserver(firstRunUpdate).observe(byId("bot-select"), { childList: true });
}
