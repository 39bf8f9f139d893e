/*
 * The sidebar: every chat, each with its bot (list, new, delete, the title filter), renaming the open chat,
 * and the drawer it becomes on narrow screens.
 */
import { el } from "../lib/dom.js";
import { fmtTime, sameId, sessionLabel } from "../lib/format.js";
import { avatar } from "../render/avatars.js";
import { showError } from "../render/status.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { memory, sessionBot, state } from "../state/state.js";
import { api, asList } from "../transport/api.js";
import { visibleSessions } from "./branches.js";

// Chats this page created that a list read may not hold yet: a read sent before the POST can
// answer after it, and without these the chat just opened would be closed as "gone". A read
// sent after the POST answered is the truth (the chat may have been deleted elsewhere since).
var createdHere = [];
var listReads = 0;

// Every chat of the user, whatever its bot (docs/api.md): the Bot picker is for the next new
// chat only, so choosing there neither filters this list nor opens a chat.
export function loadSessions(preferredSessionId) {
  var read = ++listReads;
  return api("GET", "sessions/").then(
    function (data) {
      if (read !== listReads) return; // a later read answers for the list
      var listed = asList(data);
      createdHere = createdHere.filter(function (mine) {
        return read <= mine.after && !listed.some(function (s) {
          return sameId(s.id, mine.session.id);
        });
      });
      state.sessions = listed
        .concat(
          createdHere.map(function (mine) {
            return mine.session;
          })
        )
        .sort(function (a, b) {
          return String(b.created_at).localeCompare(String(a.created_at));
        });
      renderSessions();
      if (state.sessionId === null) {
        var wanted = findSession(preferredSessionId) || state.sessions[0];
        if (wanted) hooks.openSession(wanted.id, { keepDrawer: true });
        else hooks.writeUrl(false);
      } else if (!findSession(state.sessionId)) {
        hooks.closeSession();
        hooks.writeUrl(true);
      }
    },
    function (err) {
      showError(err);
    }
  );
}

export function findSession(id) {
  for (var i = 0; i < state.sessions.length; i++) {
    if (sameId(state.sessions[i].id, id)) return state.sessions[i];
  }
  return null;
}

export function renderSessions() {
  var items = visibleSessions(state.sessions).map(function (session) {
    var current = sameId(session.id, state.sessionId);
    var bot = sessionBot(session);
    var open = el(
      "button",
      {
        type: "button",
        class: "session-open",
        "aria-current": current && "true",
        // Its name without the avatar's letters and the time: the title, then whose chat it is.
        "aria-label": sessionLabel(session) + (current ? " (open)" : ", " + bot.name),
        onclick: function () {
          hooks.openSession(session.id);
          closeDrawer(false);
          ui.composer.focus();
        },
      },
      avatar(bot),
      el(
        "span",
        { class: "session-body" },
        el("span", { class: "session-title", text: sessionLabel(session) }),
        session.origin && session.origin.kind === "api"
          ? el("span", {
              class: "session-origin",
              title: "Started through the OpenAI-compatible API with the key “" + session.origin.key_name + "”",
              text: "API · " + session.origin.key_name,
            })
          : null,
        el(
          "span",
          { class: "session-meta" },
          el("span", { class: "session-bot", text: bot.name + (session.is_room ? " + room" : "") }),
          el("time", { class: "session-time", dateTime: session.created_at || "", text: fmtTime(session.created_at) })
        )
      )
    );
    var del = el("button", {
      type: "button",
      class: "session-delete button-icon",
      "aria-label": "Delete chat “" + sessionLabel(session) + "”",
      title: "Delete chat",
      text: "×",
      onclick: function () {
        deleteSession(session);
      },
    });
    return el(
      "li",
      { class: "session-item" + (current ? " is-current" : ""), dataset: { sessionId: String(session.id) } },
      open,
      del
    );
  });
  ui.sessionList.replaceChildren.apply(ui.sessionList, items);
  ui.sessionEmpty.hidden = !!state.sessions.length || state.botId === null;
  applySessionFilter();
}

export function createSession() {
  var botId = state.botId;
  if (botId === null) return Promise.resolve(null);
  ui.newSession.disabled = true;
  return api("POST", "sessions/", { bot: botId })
    .then(function (session) {
      createdHere.push({ session: session, after: listReads });
      state.botPicked = false; // the choice was for this chat: the picker follows chats again
      state.sessions.unshift(session);
      hooks.openSession(session.id);
      return session;
    })
    .catch(function (err) {
      showError(err);
      return null;
    })
    .finally(function () {
      ui.newSession.disabled = state.botId === null;
    });
}

function deleteSession(session) {
  var label = sessionLabel(session);
  if (!window.confirm("Delete the chat “" + label + "” and all its messages? This cannot be undone.")) {
    return;
  }
  api("DELETE", "sessions/" + encodeURIComponent(session.id) + "/")
    .then(function () {
      dropSession(session.id);
    })
    .catch(function (err) {
      if (err.code === "not_found") dropSession(session.id);
      else showError(err);
    });
}

export function dropSession(sessionId) {
  var wasCurrent = sameId(sessionId, state.sessionId);
  var gone = function (s) {
    return !sameId(s.id, sessionId);
  };
  state.sessions = state.sessions.filter(gone);
  createdHere = createdHere.filter(function (mine) {
    return gone(mine.session);
  });
  if (wasCurrent) {
    hooks.closeSession();
    hooks.writeUrl(true);
  }
  renderSessions();
  var focusTarget = ui.sessionList.querySelector(".session-open") || ui.newSession;
  focusTarget.focus();
}

// Session search (a filter over the titles in the list), rename

function applySessionFilter() {
  var q = ui.sessionSearch.value.trim().toLowerCase();
  var shown = 0;
  ui.sessionList.querySelectorAll(".session-item").forEach(function (li) {
    var session = findSession(li.dataset.sessionId);
    var hit = !q || (session && sessionLabel(session).toLowerCase().indexOf(q) !== -1);
    li.hidden = !hit;
    if (hit) shown++;
  });
  ui.sessionNoMatch.hidden = !q || shown > 0;
}

function startRename() {
  var session = findSession(state.sessionId);
  if (!session) return;
  ui.renameInput.value = session.title || "";
  ui.renameInput.placeholder = sessionLabel(session);
  ui.title.hidden = true;
  ui.rename.hidden = true;
  ui.renameForm.hidden = false;
  ui.renameInput.focus();
  ui.renameInput.select();
}

export function cancelRename(focus) {
  if (ui.renameForm.hidden) return;
  ui.renameForm.hidden = true;
  ui.title.hidden = false;
  ui.rename.hidden = state.sessionId === null;
  if (focus) ui.rename.focus();
}

function submitRename(event) {
  event.preventDefault();
  var session = findSession(state.sessionId);
  if (!session) return;
  var epoch = state.epoch;
  api("PATCH", "sessions/" + encodeURIComponent(session.id) + "/", { title: ui.renameInput.value }).then(
    function (fresh) {
      session.title = fresh.title;
      renderSessions();
      if (epoch !== state.epoch) return;
      ui.title.textContent = sessionLabel(session);
      document.title = ui.title.textContent + " · chat-platform";
      cancelRename(true);
    },
    function (err) {
      showError(err);
      ui.renameInput.focus();
    }
  );
}

// The drawer (narrow screens): the sidebar slides over the chat.

const narrow = window.matchMedia("(max-width: 760px)");

function openDrawer() {
  document.body.classList.add("drawer-open");
  ui.drawerToggle.setAttribute("aria-expanded", "true");
  ui.drawerBackdrop.hidden = false;
  var target = ui.sidebar.querySelector(".session-item.is-current .session-open") || ui.newSession;
  (target && !target.disabled ? target : ui.drawerClose).focus();
}

export function closeDrawer(focusToggle) {
  if (!document.body.classList.contains("drawer-open")) return;
  document.body.classList.remove("drawer-open");
  ui.drawerToggle.setAttribute("aria-expanded", "false");
  ui.drawerBackdrop.hidden = true;
  if (focusToggle) ui.drawerToggle.focus();
}

export function sidebarBind() {
  ui.newSession.addEventListener("click", function () {
    createSession().then(function () {
      ui.composer.focus();
    });
  });
  ui.sessionSearch.addEventListener("input", applySessionFilter);
  ui.sessionSearch.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && ui.sessionSearch.value) {
      event.preventDefault();
      event.stopPropagation();
      ui.sessionSearch.value = "";
      applySessionFilter();
    }
  });
  ui.rename.addEventListener("click", startRename);
  ui.renameCancel.addEventListener("click", function () {
    cancelRename(true);
  });
  ui.renameInput.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      cancelRename(true);
    }
  });
  ui.renameForm.addEventListener("submit", submitRename);
  ui.drawerToggle.addEventListener("click", function () {
    if (document.body.classList.contains("drawer-open")) closeDrawer(true);
    else openDrawer();
  });
  ui.drawerClose.addEventListener("click", function () {
    closeDrawer(true);
  });
  ui.drawerBackdrop.addEventListener("click", function () {
    closeDrawer(true);
  });
  narrow.addEventListener("change", function () {
    if (!narrow.matches) closeDrawer(false);
  });
  // Escape closes the innermost open thing: the drawer, then the memory panel.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented) return;
    if (document.body.classList.contains("drawer-open")) {
      event.preventDefault();
      closeDrawer(true);
    } else if (memory && memory.isOpen()) {
      event.preventDefault();
      memory.close();
    }
  });
}
