/*
 * The keyboard: the composer has focus when the page opens (on a pointer device: on a phone that
 * would pop up the keyboard), the skip link goes to it, the transcript is ONE tab stop with
 * roving focus (↑ ↓ Home End move between messages, Enter opens a message's actions, ← → move
 * between them, Esc goes back, c copies), and the shortcuts listed in the dialog that ? opens.
 * Nothing inside the transcript is in the tab order, however many messages it holds.
 */
import { copyMessage } from "../render/copy.js";
import { hasActiveReply } from "../render/transcript.js";
import { ui } from "../state/page.js";
import { state } from "../state/state.js";
import { messages } from "../state/store.js";
import { requestStop } from "./composer.js";

const ITEMS = ":scope > .msg, :scope > .compaction-marker";
const FOCUSABLE = "a[href], button, summary, input, select, textarea, [tabindex]";

function isTextField(node) {
  if (!node || node.nodeType !== 1) return false;
  if (node.isContentEditable) return true;
  var tag = node.tagName;
  if (tag === "TEXTAREA" || tag === "SELECT") return true;
  if (tag !== "INPUT") return false;
  return !["button", "checkbox", "radio", "submit", "reset", "range", "color", "file"].includes(node.type);
}

// Everything focusable that lands in the transcript leaves the tab order (the roving focus
// reaches it); messages and markers become focusable by script.
function untab(root) {
  if (root.nodeType !== 1) return;
  if (root.matches(".msg, .compaction-marker") && root.parentNode === ui.transcript) root.tabIndex = -1;
  if (root.matches(FOCUSABLE)) root.tabIndex = -1;
  root.querySelectorAll(FOCUSABLE).forEach(function (node) {
    node.tabIndex = -1;
  });
}

function items() {
  return Array.from(ui.transcript.querySelectorAll(ITEMS)).filter(function (n) {
    return !n.hidden;
  });
}

function itemOf(node) {
  var item = node && node.closest ? node.closest(".msg, .compaction-marker") : null;
  return item && item.parentNode === ui.transcript ? item : null;
}

function controlsOf(item) {
  return Array.from(item.querySelectorAll("a[href], button, summary, input, select, textarea")).filter(function (n) {
    return !n.disabled && n.getClientRects().length > 0;
  });
}

export function focusItem(item) {
  if (!item) return;
  item.tabIndex = -1;
  item.focus();
  item.scrollIntoView({ block: "nearest" });
}

function focusLastMessage() {
  var all = items();
  focusItem(all[all.length - 1] || null);
}

function moveItem(from, step) {
  var all = items();
  var index = all.indexOf(from);
  if (index === -1) return;
  focusItem(all[Math.max(0, Math.min(all.length - 1, index + step))]);
}

function onTranscriptKey(event) {
  if (event.altKey || event.ctrlKey || event.metaKey) return;
  var target = event.target;
  var all = items();
  if (!all.length) return;
  var item = itemOf(target);
  var key = event.key;
  if (target === ui.transcript) {
    if (key === "ArrowUp" || key === "ArrowDown" || key === "End") focusItem(all[all.length - 1]);
    else if (key === "Home") focusItem(all[0]);
    else return;
    event.preventDefault();
    return;
  }
  if (!item) return;
  if (target === item) {
    if (key === "ArrowUp") moveItem(item, -1);
    else if (key === "ArrowDown") moveItem(item, 1);
    else if (key === "Home") focusItem(all[0]);
    else if (key === "End") focusItem(all[all.length - 1]);
    else if (key === "Enter" || key === " ") {
      if (item.tagName === "DETAILS") item.open = !item.open;
      else {
        var controls = controlsOf(item);
        if (controls.length) controls[0].focus();
      }
    } else if (key === "c" && !event.shiftKey && item.dataset.messageId) {
      var m = messages.get(item.dataset.messageId);
      if (!m || !m.content) return;
      copyMessage(m, item.querySelector(".msg-copy"));
    } else return;
    event.preventDefault();
    return;
  }
  // On one of a message's controls.
  if (isTextField(target)) return;
  var list = controlsOf(item);
  var at = list.indexOf(target);
  if (key === "ArrowRight" || key === "ArrowLeft") {
    if (at === -1 || !list.length) return;
    list[(at + (key === "ArrowRight" ? 1 : list.length - 1)) % list.length].focus();
  } else if (key === "Escape") {
    focusItem(item);
  } else if (key === "ArrowUp" || key === "ArrowDown") {
    moveItem(item, key === "ArrowUp" ? -1 : 1);
  } else return;
  event.preventDefault();
  event.stopPropagation();
}

// --- shortcuts ------------------------------------------------------------------------------

function dialog() {
  return document.getElementById("shortcuts-dialog");
}

export function openShortcuts() {
  var box = dialog();
  if (box && !box.open) box.showModal();
}

function openSearch() {
  if (window.matchMedia("(max-width: 760px)").matches && !document.body.classList.contains("drawer-open")) {
    ui.drawerToggle.click();
  }
  ui.sessionSearch.focus();
}

function onDocumentKey(event) {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
  var box = dialog();
  if (box && box.open) return; // the dialog handles its own keys (Esc closes it)
  var key = event.key;
  if (key === "Escape" && event.shiftKey) {
    event.preventDefault();
    ui.composer.focus();
    return;
  }
  if (key === "Escape" && hasActiveReply() && state.sessionId !== null && !event.target.closest("#memory-panel, #sidebar")) {
    event.preventDefault();
    requestStop();
    return;
  }
  if (isTextField(event.target)) return;
  var action = {
    "?": openShortcuts,
    i: function () {
      ui.composer.focus();
    },
    n: function () {
      if (!ui.newSession.disabled) ui.newSession.click();
    },
    "/": openSearch,
    d: function () {
      if (window.chatTheme) window.chatTheme.cycle();
    },
    m: focusLastMessage,
  }[key];
  if (!action) return;
  event.preventDefault();
  action();
}

export function keyboardBind() {
  untab(ui.transcript);
  ui.transcript.tabIndex = 0;
  new MutationObserver(function (records) {
    records.forEach(function (record) {
      record.addedNodes.forEach(untab);
    });
  }).observe(ui.transcript, { childList: true, subtree: true });
  ui.transcript.addEventListener("keydown", onTranscriptKey);
  document.addEventListener("keydown", onDocumentKey);

  var skip = document.querySelector('.skip-link[href="#composer"]');
  if (skip) {
    skip.addEventListener("click", function (event) {
      event.preventDefault();
      ui.composer.focus();
    });
  }
  var open = document.getElementById("shortcuts-open");
  if (open) open.addEventListener("click", openShortcuts);

  // The composer is where a visitor starts: focused as soon as it can take text, unless the
  // visitor already went somewhere else (or types on a touch screen).
  if (!window.matchMedia("(pointer: fine)").matches) return;
  function focusComposerOnce() {
    var idle = !document.activeElement || document.activeElement === document.body;
    if (!ui.composer.disabled && idle) ui.composer.focus();
    return !ui.composer.disabled || !idle;
  }
  if (focusComposerOnce()) return;
  var watch = new MutationObserver(function () {
    if (focusComposerOnce()) watch.disconnect();
  });
  watch.observe(ui.composer, { attributes: true, attributeFilter: ["disabled"] });
}
