/*
 * @ autocomplete in the composer: typing "@" and the start of a participant's slug or name lists
 * the matching bots of the open chat; ↑ ↓ choose, Enter or Tab insert "@slug ", Esc closes.
 * The text box stays a combobox for assistive technology (aria-activedescendant on the list).
 */
import { byId, el } from "../lib/dom.js";
import { avatar } from "../render/avatars.js";
import { ui } from "../state/page.js";
import { activeParticipants } from "../state/room.js";

const box = byId("mention-list");
let matches = [];
let active = 0;
let start = -1; // where the "@" of the word being completed is
let word = null; // the word being completed (a new word starts at the first match)

// The "@word" just before the caret, or null.
function mentionAtCaret() {
  var value = ui.composer.value;
  var caret = ui.composer.selectionStart;
  if (caret !== ui.composer.selectionEnd) return null;
  var before = value.slice(0, caret);
  var found = /(^|\s)@([a-z0-9-]*)$/i.exec(before);
  if (!found) return null;
  return { at: caret - found[2].length - 1, word: found[2].toLowerCase() };
}

function close() {
  matches = [];
  start = -1;
  word = null;
  if (!box) return;
  box.hidden = true;
  box.replaceChildren();
  ui.composer.setAttribute("aria-expanded", "false");
  ui.composer.removeAttribute("aria-activedescendant");
}

function update() {
  var found = mentionAtCaret();
  var bots = activeParticipants().map(function (p) {
    return p.bot;
  });
  if (!found || bots.length < 2) {
    close();
    return;
  }
  matches = bots.filter(function (bot) {
    var name = String(bot.name || "").toLowerCase();
    return bot.slug.indexOf(found.word) === 0 || name.indexOf(found.word) === 0;
  });
  if (!matches.length) {
    close();
    return;
  }
  if (found.word !== word || found.at !== start) active = 0;
  start = found.at;
  word = found.word;
  active = Math.min(active, matches.length - 1);
  render();
}

function render() {
  box.replaceChildren(
    ...matches.map(function (bot, i) {
      return el(
        "li",
        {
          id: "mention-" + bot.slug,
          class: "mention-option" + (i === active ? " is-active" : ""),
          role: "option",
          "aria-selected": i === active ? "true" : "false",
          dataset: { slug: bot.slug },
          onmousedown: function (event) {
            event.preventDefault(); // keep the focus in the text box
            active = i;
            choose();
          },
        },
        avatar(bot),
        el("span", { class: "mention-name", text: bot.name }),
        el("span", { class: "mention-slug", text: "@" + bot.slug })
      );
    })
  );
  box.hidden = false;
  ui.composer.setAttribute("aria-expanded", "true");
  ui.composer.setAttribute("aria-activedescendant", "mention-" + matches[active].slug);
}

function choose() {
  var bot = matches[active];
  if (!bot || start < 0) return;
  var value = ui.composer.value;
  var caret = ui.composer.selectionStart;
  var rest = value.slice(caret).replace(/^[a-z0-9-]*/i, "");
  var insert = "@" + bot.slug + (rest.charAt(0) === " " ? "" : " ");
  ui.composer.value = value.slice(0, start) + insert + rest;
  var at = start + insert.length;
  ui.composer.setSelectionRange(at, at);
  close();
  ui.composer.dispatchEvent(new Event("input"));
}

export function mentionBind() {
  if (!box) return;
  ui.composer.setAttribute("aria-autocomplete", "list");
  ui.composer.setAttribute("aria-controls", "mention-list");
  ui.composer.setAttribute("aria-expanded", "false");
  ui.composer.addEventListener("input", update);
  ui.composer.addEventListener("click", update);
  ui.composer.addEventListener("blur", close);
  // On the form, capturing: runs before the composer's own Enter-to-send and Esc-to-stop.
  ui.composerForm.addEventListener(
    "keydown",
    function (event) {
      if (event.target !== ui.composer || box.hidden || !matches.length) return;
      var key = event.key;
      if (key === "ArrowDown" || key === "ArrowUp") {
        active = (active + (key === "ArrowDown" ? 1 : matches.length - 1)) % matches.length;
        render();
      } else if ((key === "Enter" && !event.shiftKey) || key === "Tab") {
        choose();
      } else if (key === "Escape") {
        close();
      } else {
        return;
      }
      event.preventDefault();
      event.stopPropagation();
    },
    true
  );
}

export function mentionReset() {
  active = 0;
  close();
}
