/*
 * Phones (<= 600 px, css/fold.css): the room bar and the context gauge fold into one line that
 * says what they hold (how many bots, the context's pressure) and opens them on a tap; a tap
 * again folds them (docs/rooms.md "UI leftovers"). Wider screens never show the line.
 */
import { byId } from "../lib/dom.js";
import { ui } from "../state/page.js";
import { activeParticipants } from "../state/room.js";

const fold = byId("bars-fold");
const summary = byId("bars-fold-summary");
const bar = byId("room-bar");

// Writes the line again from what the bar and the gauge show now; hides it when neither shows
// anything (no chat open, or one bot and no gauge yet).
export function foldUpdate() {
  if (!fold) return;
  var bots = activeParticipants().length;
  var room = bar && !bar.hidden && bots > 1;
  var gauge = !ui.gauge.hidden;
  fold.hidden = !room && !gauge;
  var parts = [];
  if (room) parts.push(bots + " bots");
  if (gauge) parts.push("Context " + ui.gaugeTotal.textContent);
  var text = parts.join(" · ");
  summary.textContent = text;
  fold.title = text;
  fold.setAttribute("aria-label", text + (isOpen() ? " (tap to fold)" : " (tap to show)"));
  if (gauge && ui.gauge.dataset.level) fold.dataset.level = ui.gauge.dataset.level;
  else delete fold.dataset.level;
}

function isOpen() {
  return fold.getAttribute("aria-expanded") === "true";
}

export function foldBind() {
  if (!fold) return;
  fold.addEventListener("click", function () {
    fold.setAttribute("aria-expanded", isOpen() ? "false" : "true");
    foldUpdate();
  });
  foldUpdate();
}
