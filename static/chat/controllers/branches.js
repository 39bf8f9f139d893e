/*
 * Branches: edit a sent message or regenerate a reply without losing the old one. Each version
 * is a chat of its own on the server (a branch); this module offers Edit and Regenerate, flips
 * between the versions of a message (‹ 2/3 ›) and keeps one chat per family in the sidebar.
 */
import { el } from "../lib/dom.js";
import { splitAttachments } from "../render/attachlinks.js";
import { showError } from "../render/status.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { openBot, state } from "../state/state.js";
import { api } from "../transport/api.js";

var points = []; // [{seq, versions: [chat ids], current}] of the open chat
var pointsOf = null; // the chat they were read for: another chat's are never drawn

function remember(session) {
  var known = state.sessions.some(function (s) {
    return String(s.id) === String(session.id);
  });
  if (!known) state.sessions.unshift(session);
}

function opened(body) {
  remember(body.session);
  hooks.openSession(body.session.id);
}

// A refusal that still made the branch (an edit too long for the bot: 422 context_too_large,
// the branch with its failed reply in details, as a send keeps its question): open it, where
// the reply says why; any other error is shown.
function openedOrShown(button) {
  return function (err) {
    if (err && err.details && err.details.session) return opened(err.details);
    button.disabled = false;
    showError(err);
  };
}

// Edit a sent message in place: a text box with Save and Cancel; Save makes the new branch.
export function startEdit(node, m) {
  var text = node.querySelector(".msg-text");
  if (!text || node.querySelector(".msg-editor")) return;
  var box = el("textarea", { class: "msg-edit-box", rows: "3", "aria-label": "Edit your message" });
  // A message with files: the box holds the typed text; the files go with the edit unchanged.
  var content = m.content || "";
  var attached = m.role === "user" ? splitAttachments(content) : null;
  var files = attached ? content.slice(attached.text.length).replace(/^\n\n/, "") : "";
  box.value = attached ? attached.text : content;
  function edited() {
    var typed = box.value.replace(/\s+$/, "");
    if (!files) return box.value;
    return typed ? typed + "\n\n" + files : files;
  }
  var save = el("button", { type: "button", class: "button button-small button-primary msg-edit-save", text: "Save and send" });
  var cancel = el("button", { type: "button", class: "button button-small button-quiet msg-edit-cancel", text: "Cancel" });
  var form = el("div", { class: "msg-editor" }, box, el("div", { class: "msg-edit-actions" }, save, cancel));
  text.hidden = true;
  text.after(form);
  box.focus();
  function close() {
    form.remove();
    text.hidden = false;
  }
  cancel.onclick = close;
  box.onkeydown = function (event) {
    if (event.key === "Escape") {
      event.stopPropagation();
      close();
    } else if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      save.click();
    }
  };
  save.onclick = function () {
    if (!edited().trim() || edited() === m.content) return close();
    save.disabled = true;
    api("POST", "messages/" + encodeURIComponent(m.id) + "/edit/", { content: edited() }).then(opened, openedOrShown(save));
  };
}

export function regenerate(m, button) {
  button.disabled = true;
  api("POST", "messages/" + encodeURIComponent(m.id) + "/regenerate/", {}).then(opened, openedOrShown(button));
}

// The versions of the open chat's messages, read after its messages.
export function loadBranches(epoch) {
  points = [];
  if (state.sessionId === null) return Promise.resolve();
  return api("GET", "sessions/" + encodeURIComponent(state.sessionId) + "/branches/").then(function (data) {
    if (epoch !== state.epoch) return;
    points = (data && data.points) || [];
    pointsOf = state.sessionId;
    renderFlips();
  });
}

function flipTarget(seq) {
  // The message at the branch point, or the first shown after it (a reply after lookups).
  var best = null;
  ui.transcript.querySelectorAll("article.msg[data-seq]").forEach(function (node) {
    var at = Number(node.dataset.seq);
    if (at >= seq && (best === null || at < Number(best.dataset.seq)) && !node.hidden) best = node;
  });
  return best;
}

export function renderFlips() {
  ui.transcript.querySelectorAll(".msg-branches").forEach(function (f) {
    f.remove();
  });
  if (String(pointsOf) !== String(state.sessionId)) return;
  points.forEach(function (point) {
    var node = flipTarget(point.seq);
    if (!node || point.versions.length < 2) return;
    var count = point.versions.length;
    var at = point.current;
    function go(step) {
      var target = point.versions[at + step];
      if (target === undefined) return;
      var open = openBot();
      remember({ id: target, bot: open && open.id, bot_info: open, title: ui.title.textContent });
      hooks.openSession(target);
    }
    var prev = el("button", { type: "button", class: "button-icon branch-prev", text: "‹", "aria-label": "Previous version", disabled: at === 0 || undefined, onclick: function () { go(-1); } });
    var next = el("button", { type: "button", class: "button-icon branch-next", text: "›", "aria-label": "Next version", disabled: at === count - 1 || undefined, onclick: function () { go(1); } });
    var label = el("span", { class: "branch-count", text: at + 1 + "/" + count, "aria-label": "Version " + (at + 1) + " of " + count });
    var meta = node.querySelector(".msg-meta") || node;
    meta.append(el("span", { class: "msg-branches", role: "group", "aria-label": "Versions of this message" }, prev, label, next));
  });
}

// The sidebar shows one chat per family of branches: the open one if it is in it, else the
// most recent (the list comes newest first).
export function visibleSessions(sessions) {
  var byId = new Map();
  sessions.forEach(function (s) {
    byId.set(String(s.id), s);
  });
  function root(s) {
    var seen = 0;
    while (s.branch_of !== null && s.branch_of !== undefined && byId.has(String(s.branch_of)) && seen++ < 1000) {
      s = byId.get(String(s.branch_of));
    }
    return String(s.id);
  }
  var chosen = new Map();
  sessions.forEach(function (s) {
    var family = root(s);
    if (String(s.id) === String(state.sessionId) || !chosen.has(family)) {
      if (!chosen.has(family) || String(s.id) === String(state.sessionId)) chosen.set(family, s);
    }
  });
  var keep = new Set(
    Array.from(chosen.values()).map(function (s) {
      return String(s.id);
    })
  );
  return sessions.filter(function (s) {
    return keep.has(String(s.id));
  });
}
