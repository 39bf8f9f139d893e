/* A bot drawn as its initials in one of six colours, wherever it appears (docs/rooms.md). */
import { el } from "../lib/dom.js";

// Initials for an avatar, from letters only: the first letters of the first two words that
// start with one ("Recall (built-in)" is "R", not "R("), or a one-word name's first two letters.
export function initials(name) {
  var words = String(name || "").trim().split(/\s+/).filter(Boolean);
  var lettered = words.filter(function (word) {
    return /^\p{L}/u.test(word);
  });
  var text;
  if (words.length === 1 || !lettered.length) {
    text = (String(name || "").match(/\p{L}/gu) || []).slice(0, 2).join("");
  } else {
    text = lettered[0].charAt(0) + (lettered.length > 1 ? lettered[1].charAt(0) : "");
  }
  return text ? text.toUpperCase() : "?";
}

// One of six colours, the same for a bot wherever it is drawn.
export function avatarClass(bot) {
  var key = String((bot && (bot.slug || bot.id)) || "");
  var sum = 0;
  for (var i = 0; i < key.length; i++) sum = (sum * 31 + key.charCodeAt(i)) % 997;
  return "avatar avatar-" + (sum % 6);
}

export function avatar(bot) {
  return el("span", { class: avatarClass(bot), "aria-hidden": "true", text: initials(bot && bot.name) });
}

// A reply's speaker on its message: data-bot-slug on the message, and its initials drawn by CSS
// before the author's name (an attribute, so the name's text stays the name).
export function speakerMark(node, m) {
  var bot = m.role === "assistant" && m.bot && typeof m.bot === "object" ? m.bot : null;
  var who = node._parts.who;
  if (!bot) {
    delete node.dataset.botSlug;
    delete who.dataset.initials;
    delete who.dataset.avatar;
    return;
  }
  node.dataset.botSlug = bot.slug || "";
  who.dataset.initials = initials(bot.name);
  who.dataset.avatar = avatarClass(bot).slice(-1);
}
