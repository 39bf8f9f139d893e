/*
 * Rooms (docs/rooms.md): the participants bar of the open chat — each bot with its initials, the
 * default marked, "Make default" and remove; "Add a bot" from the bots the user may use, seeing
 * everything or only from when it joins; who answers (reply_mode); "Reply as …" beside Send in
 * manual mode; and which bot's seat the gauge and the markers show (?bot=).
 *
 * Reads and writes only GET/POST/PATCH/DELETE sessions/{id}/participants/ and PATCH sessions/{id}/.
 */
import { byId, el } from "../lib/dom.js";
import { fmtTime, sameId } from "../lib/format.js";
import { avatar } from "../render/avatars.js";
import { foldUpdate } from "../render/fold.js";
import { refreshContext } from "../render/gauge.js";
import { loadMarkers } from "../render/markers.js";
import { hooks } from "../state/hooks.js";
import { activeParticipants, defaultParticipant, room } from "../state/room.js";
import { sessionPath, state } from "../state/state.js";
import { api, describeError } from "../transport/api.js";

const bar = byId("room-bar");
const list = byId("room-participants");
const addPanel = byId("room-add");
const addForm = byId("room-add-form");
const addBot = byId("room-add-bot");
const addDefault = byId("room-add-default");
const addError = byId("room-add-error");
const modeSelect = byId("room-reply-mode");
const roomStatus = byId("room-status");
const replyAsBox = byId("reply-as-box");
const replyAs = byId("reply-as");
const gaugeBotBox = byId("gauge-bot-box");
const gaugeBot = byId("gauge-bot");
const addCompact = byId("room-add-compact");

export function roomReset() {
  room.sessionId = null;
  room.replyMode = "mentioned";
  room.participants = [];
  room.gaugeBotId = null;
  room.ready = null;
  if (bar) bar.hidden = true;
  if (addPanel) addPanel.open = false;
  render();
}

// What the composer sends as reply_as: the picked bot in manual mode, else nothing.
export function replyAsValue() {
  if (room.replyMode !== "manual" || !replyAs || !replyAs.value) return null;
  return Number(replyAs.value);
}

export function loadRoom(epoch) {
  if (state.sessionId === null) return Promise.resolve();
  room.sessionId = state.sessionId;
  room.ready = api("GET", sessionPath("participants/")).then(
    function (data) {
      if (epoch !== state.epoch) return;
      apply(data);
    },
    function (err) {
      if (epoch !== state.epoch) return;
      say("Could not read the bots in this chat: " + describeError(err));
    }
  );
  return room.ready;
}

function apply(data) {
  room.replyMode = (data && data.reply_mode) || "mentioned";
  room.participants = (data && Array.isArray(data.participants) ? data.participants : []).filter(function (p) {
    return p && p.bot;
  });
  if (room.gaugeBotId !== null && !room.participants.some(function (p) { return sameId(p.bot.id, room.gaugeBotId); })) {
    room.gaugeBotId = null;
  }
  render();
}

function say(text) {
  if (roomStatus) roomStatus.textContent = text || "";
}

// ---------------------------------------------------------------------------------------------
// Drawing

function render() {
  if (!bar) return;
  var active = activeParticipants();
  bar.hidden = state.sessionId === null || !room.participants.length;
  // A chat that only ever had one bot: on a phone the bar folds into the header's "Add a bot"
  // (CSS, css/rooms.css), and opens again while a bot is being added.
  var solo = room.participants.length < 2;
  bar.dataset.solo = solo ? "true" : "false";
  if (!solo || !addPanel.open) delete bar.dataset.adding;
  if (addCompact) addCompact.hidden = bar.hidden || !solo;
  // Active bots first, in the order they joined; then those that left (their messages stay,
  // so a reader sees who spoke), greyed.
  list.replaceChildren(
    ...active.map(function (p) {
      return participantItem(p, active.length);
    }),
    ...room.participants
      .filter(function (p) {
        return !!p.removed_at;
      })
      .map(removedItem)
  );
  modeSelect.value = room.replyMode;
  modeSelect.disabled = active.length < 2;
  renderAddOptions();
  renderReplyAs(active);
  renderGaugeBot(active);
  foldUpdate();
}

function participantItem(p, count) {
  var bot = p.bot;
  var seen = p.sees_from_join ? "sees from message " + (p.joined_seq + 1) : "sees everything";
  var item = el(
    "li",
    {
      class: "room-participant" + (p.is_default ? " is-default" : ""),
      dataset: { botId: String(bot.id), slug: bot.slug, default: p.is_default ? "true" : "false" },
    },
    avatar(bot),
    who(bot, el("span", { class: "room-sees", text: seen }))
  );
  if (p.is_default) {
    item.append(el("span", { class: "tag tag-default", text: "default", title: "Answers messages that mention no bot" }));
  } else {
    item.append(
      el("button", {
        type: "button",
        class: "button button-small button-quiet room-make-default",
        text: "Make default",
        "aria-label": "Make " + bot.name + " the default bot",
        title: "Answers messages that mention no bot",
        onclick: function (event) {
          makeDefault(bot, event.currentTarget);
        },
      })
    );
  }
  if (count > 1) {
    item.append(
      el("button", {
        type: "button",
        class: "button-icon room-remove",
        text: "×",
        "aria-label": "Remove " + bot.name + " from this chat",
        title: "Remove from this chat (its messages stay)",
        onclick: function (event) {
          removeParticipant(bot, event.currentTarget);
        },
      })
    );
  }
  return item;
}

// A bot that left: its name and when, no actions (it cannot be the default; adding it again
// is "Add a bot", where it is offered like any bot not taking part).
function removedItem(p) {
  var bot = p.bot;
  var when = new Date(p.removed_at);
  var known = !isNaN(when.getTime());
  return el(
    "li",
    {
      class: "room-participant is-removed",
      dataset: { botId: String(bot.id), slug: bot.slug, default: "false", removed: "true" },
      title: (known ? "Removed from this chat on " + when.toLocaleString() : "Removed from this chat") + "; its messages stay.",
    },
    avatar(bot),
    who(bot, el("span", { class: "room-left", text: known ? "left " + fmtTime(p.removed_at) : "left" }))
  );
}

// A participant's name, @slug and one line about its seat (what it sees, or when it left).
function who(bot, line) {
  return el(
    "span",
    { class: "room-who" },
    el("span", { class: "room-name", text: bot.name }),
    el("span", { class: "room-slug", text: "@" + bot.slug }),
    line
  );
}

function renderAddOptions() {
  var present = new Set(
    activeParticipants().map(function (p) {
      return String(p.bot.id);
    })
  );
  var choices = state.bots.filter(function (b) {
    return !present.has(String(b.id));
  });
  var keep = addBot.value;
  addBot.replaceChildren(
    ...(choices.length
      ? choices.map(function (b) {
          return el("option", { value: String(b.id), text: b.name + " — " + b.model });
        })
      : [el("option", { value: "", text: "Every bot you may use is already here" })])
  );
  if (keep && choices.some(function (b) { return String(b.id) === keep; })) addBot.value = keep;
  addBot.disabled = !choices.length;
  byId("room-add-submit").disabled = !choices.length;
}

function renderReplyAs(active) {
  if (!replyAsBox) return;
  var manual = room.replyMode === "manual" && active.length > 0;
  replyAsBox.hidden = !manual;
  var keep = replyAs.value;
  replyAs.replaceChildren(
    ...active.map(function (p) {
      return el("option", { value: String(p.bot.id), text: p.bot.name });
    })
  );
  var d = defaultParticipant();
  if (keep && active.some(function (p) { return String(p.bot.id) === keep; })) replyAs.value = keep;
  else if (d) replyAs.value = String(d.bot.id);
}

function renderGaugeBot(active) {
  if (!gaugeBotBox) return;
  gaugeBotBox.hidden = active.length < 2;
  var d = defaultParticipant();
  gaugeBot.replaceChildren(
    ...active.map(function (p) {
      return el("option", { value: String(p.bot.id), text: p.bot.name + (p.is_default ? " (default)" : "") });
    })
  );
  var shown = room.gaugeBotId !== null ? room.gaugeBotId : d ? d.bot.id : null;
  if (shown !== null) gaugeBot.value = String(shown);
}

// ---------------------------------------------------------------------------------------------
// Changes

function afterChange(data, words) {
  apply(data);
  say(words);
  refreshContext(state.epoch);
  loadMarkers(state.epoch);
}

function reread(words) {
  var epoch = state.epoch;
  return api("GET", sessionPath("participants/")).then(function (data) {
    if (epoch === state.epoch) afterChange(data, words);
  });
}

function failed(err, button) {
  if (button) button.disabled = false;
  say(describeError(err));
}

function showAddError(err) {
  var details = (err && err.details) || {};
  var first = details.bot || details.sees_from_join || details.is_default;
  addError.textContent = first ? [].concat(first).join(" ") : describeError(err);
  addError.hidden = false;
}

function addParticipant(event) {
  event.preventDefault();
  addError.hidden = true;
  if (!addBot.value) return;
  var chosen = state.bots.find(function (b) {
    return String(b.id) === addBot.value;
  });
  var sees = addForm.querySelector("input[name=room-add-sees]:checked");
  var body = {
    bot: Number(addBot.value),
    sees_from_join: !!sees && sees.value === "join",
    is_default: addDefault.checked,
  };
  var submit = byId("room-add-submit");
  submit.disabled = true;
  var epoch = state.epoch;
  api("POST", sessionPath("participants/"), body)
    .then(function () {
      if (epoch !== state.epoch) return;
      addDefault.checked = false;
      addPanel.open = false;
      return reread((chosen ? chosen.name : "The bot") + " joined the chat.");
    })
    .catch(function (err) {
      if (epoch === state.epoch) showAddError(err);
    })
    .finally(function () {
      submit.disabled = false;
    });
}

function removeParticipant(bot, button) {
  button.disabled = true;
  var epoch = state.epoch;
  api("DELETE", sessionPath("participants/" + encodeURIComponent(bot.id) + "/"))
    .then(function () {
      if (epoch === state.epoch) return reread(bot.name + " left the chat; its messages stay.");
    })
    .catch(function (err) {
      if (epoch === state.epoch) failed(err, button);
    });
}

function makeDefault(bot, button) {
  button.disabled = true;
  var epoch = state.epoch;
  api("PATCH", sessionPath("participants/" + encodeURIComponent(bot.id) + "/"), { is_default: true })
    .then(function () {
      if (epoch === state.epoch) return reread(bot.name + " now answers messages that mention no bot.");
    })
    .catch(function (err) {
      if (epoch === state.epoch) failed(err, button);
    });
}

function setReplyMode() {
  var wanted = modeSelect.value;
  var epoch = state.epoch;
  modeSelect.disabled = true;
  api("PATCH", sessionPath(""), { reply_mode: wanted })
    .then(function (session) {
      if (epoch !== state.epoch) return;
      room.replyMode = (session && session.reply_mode) || wanted;
      say(REPLY_MODE_WORDS[room.replyMode] || "");
      render();
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      modeSelect.value = room.replyMode;
      say(describeError(err));
    })
    .finally(function () {
      modeSelect.disabled = activeParticipants().length < 2;
    });
}

const REPLY_MODE_WORDS = {
  mentioned: "The bots a message @mentions answer it; a message that mentions none goes to the default bot.",
  all: "Every bot answers each message, in the order they joined, each seeing the replies before it.",
  manual: "You pick who answers each message, beside Send.",
};

export function roomBind() {
  if (!bar) return;
  addForm.addEventListener("submit", addParticipant);
  addPanel.addEventListener("toggle", function () {
    if (addPanel.open) {
      renderAddOptions();
      addError.hidden = true;
      addBot.focus();
    } else if (bar.dataset.adding) {
      // The bar folds away again on a phone: the focus goes back to the header's "+ Bot".
      delete bar.dataset.adding;
      if (addCompact && !addCompact.hidden && bar.contains(document.activeElement)) addCompact.focus();
    }
  });
  if (addCompact) {
    addCompact.addEventListener("click", function () {
      bar.dataset.adding = "true";
      addPanel.open = true;
    });
  }
  modeSelect.addEventListener("change", setReplyMode);
  gaugeBot.addEventListener("change", function () {
    var d = defaultParticipant();
    room.gaugeBotId = d && sameId(gaugeBot.value, d.bot.id) ? null : gaugeBot.value;
    refreshContext(state.epoch);
    hooks.resync(true); // which messages read as compacted is this seat's (docs/rooms.md)
  });
}
