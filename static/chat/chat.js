/*
 * chat-platform browser client.
 *
 * Talks only to the public surface: the REST API under /api/v1/ (the source of truth) and the
 * session websocket /ws/sessions/{id}/ (a lossy, fast path for live updates). Anything the
 * socket may have dropped is recovered by re-reading messages over REST.
 *
 * User-supplied text is only ever written with textContent, never innerHTML.
 */
(function () {
  "use strict";

  var root = document.getElementById("chat-app");
  if (!root) return;

  var API = root.dataset.apiRoot || "/api/v1/";
  var WS_PATH = root.dataset.wsPath || "/ws/sessions/";
  var LOGIN_URL = root.dataset.loginUrl || "/accounts/login/";

  var ACTIVE_STATUSES = { pending: true, streaming: true };
  var NOTICE_KINDS = { notice: true, command: true };
  var CONFIRM_AFTER_MS = 6000; // an unconfirmed websocket send is checked over REST after this
  var STALE_STREAM_MS = 10000; // no frames for this long while a reply is active -> resync
  var RECONNECT_MAX_MS = 15000;

  // ---------------------------------------------------------------------------------------------
  // Elements

  var el = {
    botSelect: byId("bot-select"),
    botInfo: byId("bot-info"),
    newSession: byId("new-session"),
    sessionList: byId("session-list"),
    sessionEmpty: byId("session-empty"),
    newBotPanel: byId("new-bot-panel"),
    newBotForm: byId("new-bot-form"),
    newBotError: byId("new-bot-error"),
    newBotSubmit: byId("new-bot-submit"),
    title: byId("conversation-title"),
    connection: byId("connection-status"),
    compaction: byId("compaction-status"),
    gauge: byId("context-gauge"),
    gaugeBar: byId("gauge-bar"),
    gaugeLegend: byId("gauge-legend"),
    gaugeTotal: byId("gauge-total"),
    sidebar: byId("sidebar"),
    drawerToggle: byId("drawer-toggle"),
    drawerClose: byId("drawer-close"),
    drawerBackdrop: byId("drawer-backdrop"),
    sessionSearch: byId("session-search"),
    sessionNoMatch: byId("session-nomatch"),
    rename: byId("rename-session"),
    renameForm: byId("rename-form"),
    renameInput: byId("rename-input"),
    renameCancel: byId("rename-cancel"),
    commandHint: byId("command-hint"),
    banner: byId("error-banner"),
    bannerText: byId("error-banner-text"),
    bannerDismiss: byId("error-banner-dismiss"),
    transcript: byId("transcript"),
    transcriptEmpty: byId("transcript-empty"),
    composerForm: byId("composer-form"),
    composer: byId("composer"),
    send: byId("send"),
    stop: byId("stop"),
  };

  function byId(id) {
    return document.getElementById(id);
  }

  // ---------------------------------------------------------------------------------------------
  // State

  var state = {
    bots: [],
    botId: null,
    sessions: [],
    sessionId: null,
    // Bumped on every session switch; async results for an older epoch are dropped.
    epoch: 0,
    messages: new Map(), // id -> message
    nodes: new Map(), // id -> element
    failures: new Map(), // id -> {code, message} from message.failed frames
    recalls: new Map(), // reply id -> [{tool, names, query, found}] from recall frames
    bySeq: new Map(), // seq -> message (to find the tool messages stored before a reply)
    renderTimers: new Map(), // id -> timer of a throttled markdown re-render while streaming
    summaries: [],
    events: [],
    pendingSends: new Map(), // client_id -> {content, node, timer, transport}
    socket: null,
    socketOpen: false,
    reconnectTimer: null,
    reconnectAttempts: 0,
    lastFrameAt: 0,
    stopRequested: false,
    contextTimer: null,
    staleTimer: null,
    resyncing: null,
    creatingSession: false,
  };

  // ---------------------------------------------------------------------------------------------
  // REST

  function ApiError(status, body) {
    var err = (body && body.error) || {};
    this.status = status;
    this.code = err.code || (status === 0 ? "network_error" : "http_" + status);
    this.message =
      err.message ||
      (body && typeof body.detail === "string" ? body.detail : "") ||
      (status === 0 ? "Could not reach the server." : "Request failed (" + status + ").");
    this.details = err.details === undefined ? null : err.details;
  }

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  function api(method, path, body) {
    var opts = {
      method: method,
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    if (method !== "GET" && method !== "HEAD") opts.headers["X-CSRFToken"] = csrfToken();
    return fetch(API + path, opts).then(
      function (res) {
        return res.text().then(function (text) {
          var data = null;
          if (text) {
            try {
              data = JSON.parse(text);
            } catch (e) {
              data = null;
            }
          }
          if (res.status === 401) {
            // Signed out elsewhere (or the session expired): back to the login page.
            window.location.assign(LOGIN_URL + "?next=" + encodeURIComponent(location.pathname));
          }
          if (!res.ok) throw new ApiError(res.status, data);
          return data;
        });
      },
      function () {
        throw new ApiError(0, null);
      }
    );
  }

  function asList(data) {
    if (Array.isArray(data)) return data;
    if (data && Array.isArray(data.results)) return data.results;
    return [];
  }

  function describeError(err) {
    if (!err) return "Something went wrong.";
    var text = err.message || String(err);
    if (err.code && err.code.indexOf("http_") !== 0 && err.code !== "network_error") {
      text += " (" + err.code + ")";
    }
    return text;
  }

  // ---------------------------------------------------------------------------------------------
  // Error banner and status chips

  function showError(errOrText) {
    el.bannerText.textContent = typeof errOrText === "string" ? errOrText : describeError(errOrText);
    el.banner.hidden = false;
  }

  function hideError() {
    el.banner.hidden = true;
    el.bannerText.textContent = "";
  }

  el.bannerDismiss.addEventListener("click", function () {
    hideError();
    el.composer.focus();
  });

  function setConnection(text, kind) {
    el.connection.textContent = text || "";
    el.connection.dataset.state = kind || "";
    el.connection.hidden = !text;
  }

  var compactionHideTimer = null;
  function setCompaction(text, kind, autoHideMs) {
    clearTimeout(compactionHideTimer);
    el.compaction.textContent = text || "";
    el.compaction.dataset.state = kind || "";
    el.compaction.hidden = !text;
    if (text && autoHideMs) {
      compactionHideTimer = setTimeout(function () {
        el.compaction.hidden = true;
      }, autoHideMs);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Formatting helpers

  var numberFormat = new Intl.NumberFormat();
  function fmtInt(n) {
    return typeof n === "number" && isFinite(n) ? numberFormat.format(n) : "?";
  }

  function fmtTime(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) return "";
    var now = new Date();
    var sameDay = d.toDateString() === now.toDateString();
    return sameDay
      ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      : d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }

  function isBuiltin(model) {
    return typeof model === "string" && model.indexOf("builtin/") === 0;
  }

  function sessionLabel(session) {
    if (session.title) return session.title;
    var when = fmtTime(session.created_at);
    return when ? "Chat from " + when : "Chat " + session.id;
  }

  function sameId(a, b) {
    return a !== null && a !== undefined && b !== null && b !== undefined && String(a) === String(b);
  }

  // ---------------------------------------------------------------------------------------------
  // URLs (CONTRACT §14): /chat/<id>/ names the open chat, /chat/new/ (or /) an unsaved new one.
  // Switching chats pushes a history entry, so Back/Forward move between chats and any chat can
  // be bookmarked; popstate opens whatever the address now names.

  var CHAT_PATH = /^\/chat\/(\d+)\/?$/;

  function sessionIdFromPath() {
    var match = CHAT_PATH.exec(location.pathname);
    return match ? match[1] : null;
  }

  function chatUrl(sessionId) {
    return sessionId === null || sessionId === undefined ? "/chat/new/" : "/chat/" + encodeURIComponent(sessionId) + "/";
  }

  // replace: true for corrections (a deleted chat, the first load); otherwise a new entry.
  function writeUrl(replace) {
    if (state.navigating) return; // popstate already moved the address
    var want = chatUrl(state.sessionId);
    if (state.sessionId === null && (location.pathname === "/" || location.pathname === want)) return;
    if (location.pathname === want) return;
    if (replace) history.replaceState({ session: state.sessionId }, "", want);
    else history.pushState({ session: state.sessionId }, "", want);
  }

  window.addEventListener("popstate", function () {
    var wanted = sessionIdFromPath();
    if (sameId(wanted, state.sessionId) || (wanted === null && state.sessionId === null)) return;
    state.navigating = true;
    try {
      if (wanted === null) {
        closeSession();
      } else if (findSession(wanted)) {
        openSession(wanted);
      } else {
        openSessionOfAnyBot(wanted);
      }
    } finally {
      state.navigating = false;
    }
  });

  // A chat of another bot (or one not listed yet): ask which bot it belongs to, then open it.
  function openSessionOfAnyBot(sessionId) {
    return api("GET", "sessions/" + encodeURIComponent(sessionId) + "/").then(
      function (session) {
        if (!sameId(sessionId, sessionIdFromPath())) return;
        state.navigating = true;
        try {
          if (!sameId(session.bot, state.botId)) {
            state.pendingOpen = session.id;
            selectBot(session.bot, { preferredSession: session.id });
          } else {
            if (!findSession(session.id)) state.sessions.unshift(session);
            openSession(session.id);
          }
        } finally {
          state.navigating = false;
        }
      },
      function (err) {
        showError(err.code === "not_found" ? "That chat does not exist (or is not yours)." : err);
      }
    );
  }

  // ---------------------------------------------------------------------------------------------
  // Bots

  function loadBots(preferredId, preferredSessionId) {
    return api("GET", "bots/").then(
      function (data) {
        state.bots = asList(data);
        renderBotOptions();
        var chosen =
          findBot(preferredId) || findBot(state.botId) || (state.bots.length ? state.bots[0] : null);
        return selectBot(chosen ? chosen.id : null, { preferredSession: preferredSessionId });
      },
      function (err) {
        el.botSelect.replaceChildren(option("", "Could not load bots"));
        showError(err);
      }
    );
  }

  function findBot(id) {
    for (var i = 0; i < state.bots.length; i++) {
      if (sameId(state.bots[i].id, id)) return state.bots[i];
    }
    return null;
  }

  function option(value, text) {
    var o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    return o;
  }

  function renderBotOptions() {
    var opts = state.bots.map(function (bot) {
      return option(String(bot.id), bot.name + " — " + bot.model);
    });
    if (!opts.length) opts = [option("", "No bots yet — create one below")];
    el.botSelect.replaceChildren.apply(el.botSelect, opts);
    el.botSelect.disabled = !state.bots.length;
  }

  function renderBotInfo() {
    var bot = findBot(state.botId);
    el.botInfo.replaceChildren();
    if (!bot) {
      el.newSession.disabled = true;
      if (!state.bots.length) {
        el.botInfo.textContent = "Create a bot to start chatting.";
        el.newBotPanel.open = true;
      }
      return;
    }
    el.newSession.disabled = false;
    var model = document.createElement("span");
    model.className = "bot-model";
    model.textContent = bot.model;
    el.botInfo.append("Model: ", model);
    if (isBuiltin(bot.model)) {
      var note = document.createElement("span");
      note.className = "builtin-note";
      note.textContent = "built-in, not a language model — it answers by quoting what its context holds";
      el.botInfo.append(" ", note);
    }
    if (bot.is_shared) {
      var shared = document.createElement("span");
      shared.className = "tag";
      shared.textContent = "shared";
      el.botInfo.append(" ", shared);
    }
  }

  function selectBot(botId, opts) {
    opts = opts || {};
    var changed = !sameId(botId, state.botId);
    state.botId = botId === null || botId === undefined ? null : botId;
    if (state.botId !== null) el.botSelect.value = String(state.botId);
    renderBotInfo();
    if (changed) closeSession();
    updateComposer();
    return loadSessions(opts.preferredSession);
  }

  el.botSelect.addEventListener("change", function () {
    var bot = findBot(el.botSelect.value);
    if (bot) selectBot(bot.id);
  });

  // New bot form ---------------------------------------------------------------------------------

  var BOT_FIELDS = {
    name: "new-bot-name",
    system_prompt: "new-bot-system-prompt",
    model: "new-bot-model",
    api_base: "new-bot-api-base",
    api_key_env: "new-bot-api-key-env",
  };

  function clearBotErrors() {
    el.newBotError.hidden = true;
    el.newBotError.replaceChildren();
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
        var list = document.createElement("ul");
        list.className = "field-errors";
        list.id = input.id + "-errors";
        texts.forEach(function (t) {
          var li = document.createElement("li");
          li.textContent = t;
          list.append(li);
        });
        input.insertAdjacentElement("afterend", list);
        input.setAttribute("aria-invalid", "true");
        var described = input.getAttribute("aria-describedby");
        input.setAttribute("aria-describedby", (described ? described + " " : "") + list.id);
        if (!firstInvalid) firstInvalid = input;
      });
    } else {
      general = general.concat(messagesOf(details));
    }
    var summary = document.createElement("p");
    summary.textContent = describeError(err);
    el.newBotError.append(summary);
    general.forEach(function (t) {
      var p = document.createElement("p");
      p.textContent = t;
      el.newBotError.append(p);
    });
    el.newBotError.hidden = false;
    (firstInvalid || el.newBotError).focus();
  }

  el.newBotForm.addEventListener("submit", function (event) {
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
    el.newBotSubmit.disabled = true;
    api("POST", "bots/", payload)
      .then(function (bot) {
        el.newBotForm.reset();
        el.newBotPanel.open = false;
        state.bots = state.bots.filter(function (b) {
          return !sameId(b.id, bot.id);
        });
        state.bots.push(bot);
        renderBotOptions();
        return selectBot(bot.id).then(function () {
          el.newSession.focus();
        });
      })
      .catch(showBotErrors)
      .finally(function () {
        el.newBotSubmit.disabled = false;
      });
  });

  // ---------------------------------------------------------------------------------------------
  // Sessions

  function loadSessions(preferredSessionId) {
    var botId = state.botId;
    if (botId === null) {
      state.sessions = [];
      renderSessions();
      return Promise.resolve();
    }
    return api("GET", "sessions/?bot=" + encodeURIComponent(botId)).then(
      function (data) {
        if (!sameId(botId, state.botId)) return;
        state.sessions = asList(data)
          .filter(function (s) {
            return s.bot === undefined || sameId(s.bot, botId);
          })
          .sort(function (a, b) {
            return String(b.created_at).localeCompare(String(a.created_at));
          });
        renderSessions();
        if (state.sessionId === null) {
          var wanted = findSession(preferredSessionId) || state.sessions[0];
          if (wanted) openSession(wanted.id);
          else writeUrl(false);
        } else if (!findSession(state.sessionId)) {
          closeSession();
          writeUrl(true);
        }
      },
      function (err) {
        showError(err);
      }
    );
  }

  function findSession(id) {
    for (var i = 0; i < state.sessions.length; i++) {
      if (sameId(state.sessions[i].id, id)) return state.sessions[i];
    }
    return null;
  }

  function renderSessions() {
    var items = state.sessions.map(function (session) {
      var li = document.createElement("li");
      li.className = "session-item";
      li.dataset.sessionId = String(session.id);
      var current = sameId(session.id, state.sessionId);
      if (current) li.classList.add("is-current");

      var open = document.createElement("button");
      open.type = "button";
      open.className = "session-open";
      if (current) open.setAttribute("aria-current", "true");
      var title = document.createElement("span");
      title.className = "session-title";
      title.textContent = sessionLabel(session);
      var when = document.createElement("time");
      when.className = "session-time";
      when.dateTime = session.created_at || "";
      when.textContent = fmtTime(session.created_at);
      open.append(title, when);
      if (current) open.setAttribute("aria-label", sessionLabel(session) + " (open)");
      open.addEventListener("click", function () {
        openSession(session.id);
        closeDrawer(false);
        el.composer.focus();
      });

      var del = document.createElement("button");
      del.type = "button";
      del.className = "session-delete button-icon";
      del.setAttribute("aria-label", "Delete chat “" + sessionLabel(session) + "”");
      del.title = "Delete chat";
      del.textContent = "×";
      del.addEventListener("click", function () {
        deleteSession(session);
      });

      li.append(open, del);
      return li;
    });
    el.sessionList.replaceChildren.apply(el.sessionList, items);
    el.sessionEmpty.hidden = !!state.sessions.length || state.botId === null;
    applySessionFilter();
  }

  function createSession() {
    var botId = state.botId;
    if (botId === null) return Promise.resolve(null);
    el.newSession.disabled = true;
    return api("POST", "sessions/", { bot: botId })
      .then(function (session) {
        if (!sameId(botId, state.botId)) return null;
        state.sessions.unshift(session);
        openSession(session.id);
        return session;
      })
      .catch(function (err) {
        showError(err);
        return null;
      })
      .finally(function () {
        el.newSession.disabled = state.botId === null;
      });
  }

  el.newSession.addEventListener("click", function () {
    createSession().then(function () {
      el.composer.focus();
    });
  });

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

  function dropSession(sessionId) {
    var wasCurrent = sameId(sessionId, state.sessionId);
    state.sessions = state.sessions.filter(function (s) {
      return !sameId(s.id, sessionId);
    });
    if (wasCurrent) {
      closeSession();
      writeUrl(true);
    }
    renderSessions();
    var focusTarget = el.sessionList.querySelector(".session-open") || el.newSession;
    focusTarget.focus();
  }

  // ---------------------------------------------------------------------------------------------
  // Opening and closing a session

  function closeSession() {
    state.epoch++;
    disconnect();
    state.sessionId = null;
    state.messages.clear();
    state.nodes.clear();
    state.failures.clear();
    state.recalls.clear();
    state.bySeq.clear();
    state.renderTimers.forEach(function (t) {
      clearTimeout(t);
    });
    state.renderTimers.clear();
    state.summaries = [];
    state.events = [];
    state.markersLoaded = false;
    cancelRename();
    state.pendingSends.forEach(function (p) {
      clearTimeout(p.timer);
    });
    state.pendingSends.clear();
    state.stopRequested = false;
    state.resyncing = null; // an in-flight read for the old chat must not be shared with the new one
    clearTimeout(state.contextTimer);
    clearTimeout(state.staleTimer);
    el.transcriptEmpty.textContent =
      state.botId === null ? "Choose a bot to start." : "Choose a chat on the left, or just type to start a new one.";
    el.transcript.replaceChildren(el.transcriptEmpty);
    el.transcriptEmpty.hidden = false;
    el.title.textContent = state.botId === null ? "No chat selected" : "New chat";
    el.rename.hidden = true;
    el.gauge.hidden = true;
    setCompaction("");
    setConnection("");
    if (memory) memory.setSession(null);
    updateComposer();
    renderSessions();
  }

  function openSession(sessionId) {
    if (sameId(sessionId, state.sessionId)) return;
    closeSession();
    var session = findSession(sessionId);
    state.sessionId = session ? session.id : sessionId;
    var epoch = state.epoch;
    el.title.textContent = session ? sessionLabel(session) : "Chat";
    el.transcriptEmpty.hidden = true;
    el.transcript.setAttribute("aria-busy", "true");
    el.rename.hidden = false;
    document.title = el.title.textContent + " · chat-platform";
    renderSessions();
    writeUrl(false);
    closeDrawer(false);
    if (memory) memory.setSession(state.sessionId);
    updateComposer();
    // The socket opens alongside the first read; its onopen resync covers anything in between.
    connect(epoch);
    refreshContext(epoch);
    Promise.all([loadMessages(epoch, null), loadMarkers(epoch)])
      .then(function () {
        if (epoch !== state.epoch) return;
        el.transcript.setAttribute("aria-busy", "false");
        scrollToBottom(true);
      })
      .catch(function (err) {
        if (epoch !== state.epoch) return;
        el.transcript.setAttribute("aria-busy", "false");
        if (err.code === "not_found") {
          dropSession(sessionId);
          showError("That chat no longer exists.");
        } else {
          showError(err);
        }
      });
  }

  function sessionPath(suffix) {
    return "sessions/" + encodeURIComponent(state.sessionId) + "/" + (suffix || "");
  }

  // ---------------------------------------------------------------------------------------------
  // Messages: loading and resync

  function lastSeq() {
    var max = 0;
    state.messages.forEach(function (m) {
      if (typeof m.seq === "number" && m.seq > max) max = m.seq;
    });
    return max;
  }

  // Messages still pending/streaming may have changed without us hearing about it, so a resync
  // starts just before the oldest of them rather than after the newest message we hold.
  function resyncFrom() {
    var from = lastSeq();
    state.messages.forEach(function (m) {
      if (ACTIVE_STATUSES[m.status] && typeof m.seq === "number" && m.seq - 1 < from) from = m.seq - 1;
    });
    return Math.max(0, from);
  }

  function loadMessages(epoch, afterSeq) {
    var query = afterSeq === null || afterSeq === undefined ? "" : "?after_seq=" + afterSeq;
    return api("GET", sessionPath("messages/") + query).then(function (data) {
      if (epoch !== state.epoch) return;
      var list = asList(data);
      if (afterSeq === null || afterSeq === undefined) {
        // Full load: anything we hold within the listed range that the server no longer lists is
        // gone. Newer messages may have arrived over the socket after this list was read.
        var maxSeq = 0;
        var ids = new Set(
          list.map(function (m) {
            if (typeof m.seq === "number" && m.seq > maxSeq) maxSeq = m.seq;
            return String(m.id);
          })
        );
        state.messages.forEach(function (m, id) {
          if (!ids.has(id) && typeof m.seq === "number" && m.seq <= maxSeq) removeMessage(id);
        });
      }
      list.forEach(function (m) {
        upsertMessage(m);
      });
      afterMessagesChanged();
    });
  }

  // One resync at a time; callers that arrive while one runs share it.
  function resync(full) {
    if (state.sessionId === null) return Promise.resolve();
    if (state.resyncing) {
      if (!full || state.resyncingFull) return state.resyncing;
      return state.resyncing.then(function () {
        return resync(true);
      });
    }
    state.resyncingFull = !!full;
    var epoch = state.epoch;
    var run = loadMessages(epoch, full ? null : resyncFrom())
      .catch(function (err) {
        if (epoch === state.epoch && err.code !== "network_error") showError(err);
      })
      .finally(function () {
        if (state.resyncing === run) state.resyncing = null;
      });
    state.resyncing = run;
    return run;
  }

  // ---------------------------------------------------------------------------------------------
  // Messages: rendering

  function isNotice(m) {
    return !!NOTICE_KINDS[m.kind] || m.role === "system";
  }

  function isTool(m) {
    return m.role === "tool" || (typeof m.kind === "string" && m.kind.indexOf("tool") === 0);
  }

  function authorLabel(m) {
    if (m.role === "user") return m.kind === "command" ? "You (command)" : "You";
    if (m.role === "assistant") {
      var bot = findBot(state.botId);
      return bot ? bot.name : "Bot";
    }
    if (m.role === "tool") return "Tool";
    return "System";
  }

  var STATUS_LABELS = {
    sending: "Sending…",
    unsent: "Not sent",
    pending: "Thinking…",
    streaming: "Writing…",
    failed: "Failed",
    interrupted: "Interrupted",
  };

  function isStopped(m) {
    return m.status === "complete" && m.finish_reason === "stopped";
  }

  // Who was called, in words a person recognises: "the model openai/gpt-4o-mini at api.example.com".
  function providerWords() {
    var bot = findBot(state.botId);
    if (!bot) return "the model provider";
    if (isBuiltin(bot.model)) return "the built-in model " + bot.model;
    var where = "";
    if (bot.api_base) {
      try {
        where = " at " + new URL(bot.api_base).host;
      } catch (e) {
        where = " at " + bot.api_base;
      }
    }
    return "the model " + bot.model + where;
  }

  // Plain words for each failure code: what happened, and what the reader can do about it.
  function failureWords(code) {
    switch (code) {
      case "context_too_large":
        return {
          title: "This message is too long for the bot's context.",
          advice:
            "Even after compaction it would not fit in the model's window. Shorten the message (or split it), unpin messages you no longer need, or send /compact — then Retry.",
        };
      case "model_unavailable":
        return {
          title: "Could not get a reply from " + providerWords() + ".",
          advice:
            "The provider could not be reached or refused the request. Check that it is running and that the bot's model, address and API key are right (bot settings), then Retry.",
        };
      case "service_unavailable":
        return {
          title: "A service the reply needs is down right now.",
          advice: "Your message is saved. The reply starts when the service is back; Retry to try again now.",
        };
      case "interrupted":
        return {
          title: "The reply was interrupted before it finished.",
          advice: "The worker writing it stopped or lost contact; any text it wrote is kept above. Retry to ask again.",
        };
      case "internal_error":
        return {
          title: "Something went wrong on our side while writing this reply.",
          advice: "Retry. If it keeps failing, tell whoever runs this server — the server log has the details.",
        };
      default:
        return {
          title: "The reply failed.",
          advice: "Retry; if it keeps failing, check the bot's settings.",
        };
    }
  }

  function failureOf(m) {
    var err = state.failures.get(String(m.id)) || m.error || null;
    if (typeof err === "string") err = { code: "", message: err };
    if (m.status === "interrupted") {
      return { code: (err && err.code) || "interrupted", message: (err && err.message) || "" };
    }
    return err || { code: "", message: "" };
  }

  function buildMessageNode(m) {
    var node = document.createElement("article");
    var header = document.createElement("header");
    header.className = "msg-meta";
    var who = document.createElement("span");
    who.className = "msg-author";
    var when = document.createElement("time");
    when.className = "msg-time";
    var status = document.createElement("span");
    status.className = "msg-status";
    var tokens = document.createElement("span");
    tokens.className = "msg-tokens";
    var tags = document.createElement("span");
    tags.className = "msg-tags";
    var actions = document.createElement("span");
    actions.className = "msg-actions";
    header.append(who, when, status, tokens, tags, actions);

    var bubble = document.createElement("div");
    bubble.className = "msg-bubble";
    var text = document.createElement("div");
    text.className = "msg-text";
    var note = document.createElement("p");
    note.className = "msg-note";
    note.hidden = true;
    var error = document.createElement("div");
    error.className = "msg-error";
    error.hidden = true;
    bubble.append(text, note, error);

    node.append(header, bubble);
    node._parts = {
      who: who,
      when: when,
      status: status,
      tokens: tokens,
      tags: tags,
      text: text,
      note: note,
      error: error,
      actions: actions,
    };
    return node;
  }

  function isMarkdown(m) {
    return m.role === "assistant" && !isNotice(m) && !isTool(m);
  }

  // Renders the body text. Assistant replies are markdown; the rest is plain text. A streaming
  // reply is re-rendered whole on a throttle (scheduleBody), highlighted once it is final.
  function renderBody(node, m) {
    var p = node._parts;
    var content = m.content || "";
    var final = !ACTIVE_STATUSES[m.status];
    var key = content + "\u0000" + final;
    if (node._bodyKey === key) return;
    node._bodyKey = key;
    if (isMarkdown(m) && content && window.chatMarkdown) {
      window.chatMarkdown.render(p.text, content, { final: final });
    } else {
      p.text.classList.remove("markdown");
      p.text.textContent = content;
    }
  }

  var RENDER_EVERY_MS = 80;

  function scheduleBody(id) {
    if (state.renderTimers.has(id)) return;
    state.renderTimers.set(
      id,
      setTimeout(function () {
        state.renderTimers.delete(id);
        var m = state.messages.get(id);
        var node = state.nodes.get(id);
        if (m && node) {
          withScroll(function () {
            renderBody(node, m);
          });
        }
      }, RENDER_EVERY_MS)
    );
  }

  // --- recall (tool messages and recall frames) ----------------------------------------------

  function parseArgs(raw) {
    if (raw && typeof raw === "object") return raw;
    try {
      var parsed = JSON.parse(raw || "{}");
      return parsed && typeof parsed === "object" ? parsed : {};
    } catch (e) {
      return {};
    }
  }

  // [{tool: "read"|"search"|"save"|name, names, query}] from a stored tool request.
  function toolRequests(m) {
    var out = [];
    (Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach(function (call) {
      var fn = (call && call.function) || {};
      var args = parseArgs(fn.arguments);
      if (fn.name === "read_records") out.push({ tool: "read", names: [].concat(args.names || []), query: "" });
      else if (fn.name === "search_records") out.push({ tool: "search", names: [], query: String(args.query || "") });
      else if (fn.name === "save_record") out.push({ tool: "save", names: [String(args.name || "")], query: "" });
      else out.push({ tool: fn.name || "tool", names: [], query: "" });
    });
    if (!out.length && m.content) {
      var body = parseArgs(m.content);
      if (body.read_files) {
        out.push({ tool: "read", names: [].concat((body.read_files && body.read_files.files) || []), query: "" });
      }
      if (body.search_records) {
        out.push({ tool: "search", names: [], query: String(body.search_records.query || "") });
      }
    }
    return out;
  }

  function lookupWords(requests) {
    var names = [];
    var queries = [];
    var saved = [];
    requests.forEach(function (r) {
      if (r.tool === "read") names = names.concat(r.names || []);
      else if (r.tool === "search" && r.query) queries.push("“" + r.query + "”");
      else if (r.tool === "save") saved = saved.concat(r.names || []);
    });
    var parts = [];
    if (names.length) parts.push(names.join(", "));
    if (queries.length) parts.push("search " + queries.join(", "));
    if (saved.length) parts.push("saved " + saved.join(", "));
    return parts.join(" · ");
  }

  // The lookups behind a reply: live recall frames, or (after a reload) the tool messages
  // stored just before it.
  function recallsFor(m) {
    var live = state.recalls.get(String(m.id));
    if (live && live.length) return live;
    var found = [];
    if (typeof m.seq !== "number") return found;
    for (var seq = m.seq - 1; seq > 0; seq--) {
      var prev = state.bySeq.get(seq);
      if (!prev || !isTool(prev)) break;
      if (prev.role === "assistant") found = toolRequests(prev).concat(found);
    }
    return found;
  }

  function renderTool(node, m) {
    var p = node._parts;
    p.text.classList.remove("markdown");
    if (m.role === "assistant") {
      var words = lookupWords(toolRequests(m));
      p.text.textContent = words ? "Looked up: " + words : "Used a tool.";
      return;
    }
    // A tool result: one line, with the recalled text behind a toggle.
    var details = document.createElement("details");
    details.className = "tool-result";
    var summary = document.createElement("summary");
    var label =
      m.tool_name === "search_records" ? "Search results" : m.tool_name === "save_record" ? "Saved" : "Recalled text";
    summary.textContent = label + (m.token_count ? " (" + fmtInt(m.token_count) + " tokens)" : "");
    var pre = document.createElement("pre");
    pre.textContent = m.content || "";
    details.append(summary, pre);
    p.text.replaceChildren(details);
  }

  // -------------------------------------------------------------------------------------------

  function renderMessage(node, m) {
    var notice = isNotice(m);
    var tool = !notice && isTool(m);
    var stopped = isStopped(m);
    var p = node._parts;
    node.className =
      "msg " +
      (notice ? "msg-notice" : tool ? "msg-tool" : "msg-" + (m.role === "user" ? "user" : "assistant")) +
      (m.pinned ? " is-pinned" : "") +
      (m.compacted ? " is-compacted" : "") +
      (stopped ? " is-stopped" : "");
    if (m.id !== undefined && m.id !== null) node.dataset.messageId = String(m.id);
    node.dataset.role = m.role || "";
    node.dataset.kind = m.kind || "";
    node.dataset.status = m.status || "";
    node.dataset.finishReason = m.finish_reason || "";
    if (typeof m.seq === "number") node.dataset.seq = String(m.seq);
    node.setAttribute("aria-busy", ACTIVE_STATUSES[m.status] || m.status === "sending" ? "true" : "false");

    p.who.textContent = authorLabel(m);
    // A notice speaks for itself; its author line would only say "System". Tool rows too.
    p.who.hidden = (notice && m.kind !== "command") || tool;
    p.when.textContent = m.created_at ? fmtTime(m.created_at) : "";
    p.when.dateTime = m.created_at || "";
    if (m.created_at) p.when.title = new Date(m.created_at).toLocaleString();

    var statusLabel = stopped ? "Stopped" : STATUS_LABELS[m.status] || "";
    p.status.textContent = statusLabel;
    p.status.hidden = !statusLabel;
    p.status.className = "msg-status" + (stopped ? " msg-status-stopped" : "");
    p.tokens.textContent =
      typeof m.token_count === "number" && m.token_count > 0 && !notice && !tool
        ? fmtInt(m.token_count) + " tokens"
        : "";
    p.tokens.hidden = !p.tokens.textContent;

    p.tags.replaceChildren();
    if (m.pinned) p.tags.append(tag("pinned", "Pinned: always kept in the bot's context"));
    if (m.compacted) p.tags.append(tag("compacted", "Summarised: the bot now sees a summary of this message"));
    if (isMarkdown(m)) {
      var lookups = recallsFor(m);
      if (lookups.length) {
        var words = lookupWords(lookups);
        var chip = tag("recall", "The bot looked in its memory for this reply" + (words ? ": " + words : ""));
        chip.textContent = words ? "Looked up: " + words : "Looked up memory";
        p.tags.append(chip);
      }
    }

    if (tool) {
      node._bodyKey = null;
      renderTool(node, m);
    } else {
      renderBody(node, m);
    }
    var content = m.content || "";
    p.text.hidden = !tool && !content && m.status !== "pending" && m.status !== "streaming";

    p.note.textContent = stopped && !content ? "Stopped before any text." : "";
    p.note.hidden = !p.note.textContent;

    renderFailure(node, m);
    p.text.parentNode.hidden = p.text.hidden && p.error.hidden && p.note.hidden;

    renderActions(node, m, notice || tool);
  }

  function renderFailure(node, m) {
    var box = node._parts.error;
    box.replaceChildren();
    if (m.status === "unsent") {
      var unsent = document.createElement("p");
      unsent.textContent = m._error ? "Not sent: " + m._error : "Not sent.";
      box.append(unsent);
      box.hidden = false;
      return;
    }
    if (m.status !== "failed" && m.status !== "interrupted") {
      box.hidden = true;
      return;
    }
    var err = failureOf(m);
    var words = failureWords(err.code);
    var title = document.createElement("p");
    title.className = "msg-error-title";
    title.textContent = words.title;
    var advice = document.createElement("p");
    advice.className = "msg-error-advice";
    advice.textContent = words.advice;
    box.append(title, advice);
    if (err.code || err.message) {
      var details = document.createElement("details");
      details.className = "msg-error-details";
      var summary = document.createElement("summary");
      summary.textContent = "Details";
      var raw = document.createElement("p");
      var code = document.createElement("code");
      code.className = "msg-error-code";
      code.textContent = err.code || "error";
      raw.append(code);
      if (err.message) raw.append(" — " + err.message);
      details.append(summary, raw);
      box.append(details);
    }
    box.dataset.code = err.code || "";
    box.hidden = false;
  }

  function tag(text, title) {
    var t = document.createElement("span");
    t.className = "tag tag-" + text;
    t.textContent = text;
    t.title = title;
    return t;
  }

  function actionButton(text, className, onClick) {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "button button-small " + className;
    b.textContent = text;
    b.addEventListener("click", onClick);
    return b;
  }

  function renderActions(node, m, quiet) {
    var actions = node._parts.actions;
    actions.replaceChildren();
    if (m.status === "unsent" && m._clientId) {
      actions.append(
        actionButton("Retry", "", function () {
          retrySend(m._clientId);
        }),
        actionButton("Discard", "button-quiet", function () {
          discardSend(m._clientId);
        })
      );
    } else if (!quiet && m.role === "assistant" && (m.status === "failed" || m.status === "interrupted")) {
      var retry = actionButton("Retry", "button-primary msg-retry", function () {
        retryReply(m, retry);
      });
      retry.setAttribute("aria-label", "Retry: send your message again");
      actions.append(retry);
    }
    if (!quiet && m.id !== undefined && m.id !== null && (m.status === "complete" || m.pinned)) {
      var pin = actionButton(m.pinned ? "Unpin" : "Pin", "button-quiet msg-pin", function () {
        togglePin(m.id, pin);
      });
      pin.setAttribute("aria-pressed", m.pinned ? "true" : "false");
      pin.title = m.pinned
        ? "Stop always keeping this message in the bot's context"
        : "Always keep this message in the bot's context";
      actions.append(pin);
    }
    actions.hidden = !actions.childElementCount;
  }

  // The user message a reply answers: the nearest user chat message before it.
  function questionOf(reply) {
    var best = null;
    state.messages.forEach(function (m) {
      if (m.role !== "user" || m.kind !== "chat" || typeof m.seq !== "number") return;
      if (typeof reply.seq === "number" && m.seq >= reply.seq) return;
      if (!best || m.seq > best.seq) best = m;
    });
    return best;
  }

  // Retry sends the question again as a new message (a new client_id: a new exchange).
  function retryReply(reply, button) {
    var question = questionOf(reply);
    if (!question) {
      showError("Could not find the message this reply answered; type it again.");
      return;
    }
    if (button) button.disabled = true;
    sendContent(question.content);
  }

  // Keeps DOM order by seq. Nodes without a seq (optimistic sends, placeholders built from a
  // delta whose message.created was lost) stay where they are; optimistic sends stay last.
  function insertNode(node, seq) {
    var children = el.transcript.children;
    if (typeof seq !== "number") {
      el.transcript.append(node);
      return;
    }
    for (var i = children.length - 1; i >= 0; i--) {
      var child = children[i];
      if (child === node || child.dataset.clientId || !child.dataset.seq) continue;
      if (Number(child.dataset.seq) < seq) {
        var after = child.nextElementSibling;
        // Skip seq-less placeholders that belong before us, never past an optimistic send.
        while (after && !after.dataset.clientId && !after.dataset.seq && after.classList.contains("msg")) {
          after = after.nextElementSibling;
        }
        el.transcript.insertBefore(node, after);
        return;
      }
    }
    // Nothing earlier: go before the first node with a seq (a message, or a compaction marker
    // of messages that were loaded later — a marker must never end up before what it covers).
    var first = null;
    for (var j = 0; j < children.length; j++) {
      if (children[j] !== node && children[j].dataset.seq && !children[j].dataset.clientId) {
        first = children[j];
        break;
      }
    }
    el.transcript.insertBefore(node, first || el.transcript.querySelector(".msg"));
  }

  function normalise(text) {
    return String(text || "").trim();
  }

  // Adds or replaces a message by id. A user message the server confirms replaces the optimistic
  // bubble that was shown while it was being sent.
  function upsertMessage(m) {
    if (!m || m.id === undefined || m.id === null) return;
    var id = String(m.id);
    if (typeof m.seq === "string" && /^\d+$/.test(m.seq)) m = Object.assign({}, m, { seq: Number(m.seq) });
    var existing = state.messages.get(id);
    if (existing && !ACTIVE_STATUSES[existing.status] && existing.status && ACTIVE_STATUSES[m.status]) {
      // A late frame or a lagging read must not move a finished message back to streaming.
      return;
    }
    if (
      existing &&
      ACTIVE_STATUSES[existing.status] &&
      ACTIVE_STATUSES[m.status] &&
      typeof existing.content === "string" &&
      typeof m.content === "string" &&
      existing.content.length > m.content.length &&
      existing.content.indexOf(m.content) === 0
    ) {
      // The stored partial text lags the deltas we already showed; keep the longer text.
      m = Object.assign({}, m, { content: existing.content });
    }
    if (m.status === "failed" && m.error) state.failures.set(id, m.error);
    if (existing && typeof existing.seq === "number" && state.bySeq.get(existing.seq) === existing) {
      state.bySeq.delete(existing.seq);
    }
    state.messages.set(id, m);
    if (typeof m.seq === "number") state.bySeq.set(m.seq, m);
    var node = state.nodes.get(id);
    if (!node && (m.role === "user" || m.kind === "command")) node = adoptOptimistic(m);
    var isNew = !node;
    if (!node) node = buildMessageNode(m);
    // A compaction notice (from /compact, whichever way it was sent): its marker is new too.
    if (isNew && m.kind === "notice" && !existing && state.markersLoaded) loadMarkers(state.epoch);
    state.nodes.set(id, node);
    var seqChanged = node.dataset.seq !== (typeof m.seq === "number" ? String(m.seq) : undefined);
    renderMessage(node, m);
    if (isNew || seqChanged || !node.isConnected) {
      if (node.isConnected) node.remove();
      insertNode(node, m.seq);
    }
  }

  function adoptOptimistic(m) {
    var match = null;
    state.pendingSends.forEach(function (pending, clientId) {
      if (match) return;
      if ((m.client_id && m.client_id === clientId) || normalise(pending.content) === normalise(m.content)) {
        match = clientId;
      }
    });
    if (!match) return null;
    var pending = state.pendingSends.get(match);
    clearTimeout(pending.timer);
    if (pending.waitingNode) pending.waitingNode.remove();
    state.pendingSends.delete(match);
    var node = pending.node;
    delete node.dataset.clientId;
    node.remove(); // re-inserted at its seq position
    return node;
  }

  function removeMessage(id) {
    var node = state.nodes.get(id);
    if (node) node.remove();
    var m = state.messages.get(id);
    if (m && typeof m.seq === "number" && state.bySeq.get(m.seq) === m) state.bySeq.delete(m.seq);
    state.nodes.delete(id);
    state.messages.delete(id);
  }

  function afterMessagesChanged() {
    el.transcriptEmpty.hidden = true;
    if (state.sessionId !== null && !el.transcript.querySelector(".msg")) {
      el.transcriptEmpty.textContent = "No messages yet. Say hello!";
      el.transcriptEmpty.hidden = false;
      if (!el.transcriptEmpty.isConnected) el.transcript.prepend(el.transcriptEmpty);
    }
    updateComposer();
    scheduleStaleCheck();
  }

  function isNearBottom() {
    var t = el.transcript;
    return t.scrollHeight - t.scrollTop - t.clientHeight < 80;
  }

  function scrollToBottom(force) {
    if (force || isNearBottom()) el.transcript.scrollTop = el.transcript.scrollHeight;
  }

  // Wraps DOM changes so the view follows new content only if the reader was already at the end.
  function withScroll(fn) {
    var stick = isNearBottom();
    fn();
    if (stick) scrollToBottom(true);
  }

  // ---------------------------------------------------------------------------------------------
  // Pinning

  function togglePin(messageId, button) {
    var m = state.messages.get(String(messageId));
    if (!m) return;
    button.disabled = true;
    var action = m.pinned ? "unpin/" : "pin/";
    var epoch = state.epoch;
    api("POST", "messages/" + encodeURIComponent(messageId) + "/" + action)
      .then(function (updated) {
        if (epoch !== state.epoch) return;
        var merged = Object.assign({}, m, updated && updated.id !== undefined ? updated : { pinned: !m.pinned });
        upsertMessage(merged);
        var node = state.nodes.get(String(messageId));
        var pin = node && node.querySelector(".msg-pin");
        if (pin) pin.focus();
        scheduleContextRefresh(300);
      })
      .catch(function (err) {
        button.disabled = false;
        showError(err);
      });
  }

  // ---------------------------------------------------------------------------------------------
  // Context meter

  // The gauge is a stacked bar over the budget B: one segment per part of what the next model
  // call would send, with the soft/hard/target marks drawn on it and a legend with the numbers,
  // so nothing needs a hover to be read.
  var GAUGE_PARTS = [
    ["system", "System prompt"],
    ["pinned", "Pinned"],
    ["summaries", "Summaries"],
    ["memory_index", "Memory index"],
    ["history", "History"],
  ];
  var GAUGE_MARKS = [
    ["target", "target", "compaction aims to get down to this"],
    ["soft", "soft", "background compaction starts here"],
    ["hard", "hard", "the next call waits for compaction here"],
  ];

  function pct(n, of) {
    return Math.max(0, Math.min(100, (100 * n) / of)).toFixed(2) + "%";
  }

  function renderContext(ctx) {
    if (!ctx || typeof ctx.budget !== "number" || typeof ctx.pressure !== "number" || ctx.budget <= 0) {
      return;
    }
    var parts = ctx.parts && typeof ctx.parts === "object" ? ctx.parts : {};
    var segments = [];
    var legend = [];
    GAUGE_PARTS.forEach(function (entry) {
      var key = entry[0];
      var value = typeof parts[key] === "number" ? parts[key] : 0;
      var seg = document.createElement("span");
      seg.className = "gauge-seg gauge-" + key;
      seg.dataset.part = key;
      seg.style.width = pct(value, ctx.budget);
      segments.push(seg);
      var li = document.createElement("li");
      li.className = "gauge-item";
      li.dataset.part = key;
      var swatch = document.createElement("span");
      swatch.className = "gauge-swatch gauge-" + key;
      swatch.setAttribute("aria-hidden", "true");
      var name = document.createElement("span");
      name.className = "gauge-name";
      name.textContent = entry[1];
      var num = document.createElement("span");
      num.className = "gauge-num";
      num.textContent = fmtInt(value);
      li.append(swatch, name, " ", num);
      legend.push(li);
    });
    GAUGE_MARKS.forEach(function (entry) {
      var key = entry[0];
      if (typeof ctx[key] !== "number") return;
      var mark = document.createElement("span");
      mark.className = "gauge-mark gauge-mark-" + key;
      mark.dataset.mark = key;
      mark.style.left = pct(ctx[key], ctx.budget);
      mark.title = entry[1] + " " + fmtInt(ctx[key]) + ": " + entry[2];
      segments.push(mark);
      var li = document.createElement("li");
      li.className = "gauge-item gauge-item-mark";
      li.dataset.mark = key;
      var tick = document.createElement("span");
      tick.className = "gauge-tick gauge-mark-" + key;
      tick.setAttribute("aria-hidden", "true");
      var name = document.createElement("span");
      name.className = "gauge-name";
      name.textContent = entry[1];
      var num = document.createElement("span");
      num.className = "gauge-num";
      num.textContent = fmtInt(ctx[key]);
      li.append(tick, name, " ", num);
      li.title = entry[2];
      legend.push(li);
    });
    el.gaugeBar.replaceChildren.apply(el.gaugeBar, segments);
    el.gaugeLegend.replaceChildren.apply(el.gaugeLegend, legend);
    var level =
      typeof ctx.hard === "number" && ctx.pressure >= ctx.hard
        ? "hard"
        : typeof ctx.soft === "number" && ctx.pressure >= ctx.soft
          ? "soft"
          : "ok";
    el.gauge.dataset.level = level;
    el.gauge.dataset.pressure = String(ctx.pressure);
    el.gaugeTotal.textContent =
      fmtInt(ctx.pressure) +
      " of " +
      fmtInt(ctx.budget) +
      " tokens (" +
      Math.round((100 * ctx.pressure) / ctx.budget) +
      "%)" +
      (level === "hard" ? " — compaction needed" : level === "soft" ? " — compaction due" : "");
    el.gauge.hidden = false;
  }

  function refreshContext(epoch) {
    if (state.sessionId === null) return;
    api("GET", sessionPath("context/")).then(
      function (ctx) {
        if (epoch === state.epoch) renderContext(ctx);
      },
      function () {
        /* the meter is informational; leave it as it was */
      }
    );
  }

  // After a turn or a compaction the server normally pushes context.updated; if it does not
  // arrive shortly, ask for the numbers over REST.
  function scheduleContextRefresh(delay) {
    clearTimeout(state.contextTimer);
    var epoch = state.epoch;
    state.contextTimer = setTimeout(function () {
      refreshContext(epoch);
    }, delay === undefined ? 1500 : delay);
  }

  // ---------------------------------------------------------------------------------------------
  // Websocket

  function socketUrl(sessionId) {
    return (
      (location.protocol === "https:" ? "wss" : "ws") +
      "://" +
      location.host +
      WS_PATH +
      encodeURIComponent(sessionId) +
      "/"
    );
  }

  function connect(epoch) {
    if (epoch !== state.epoch || state.sessionId === null) return;
    if (typeof window.WebSocket !== "function") {
      setConnection("Live updates unavailable", "offline");
      return;
    }
    clearTimeout(state.reconnectTimer);
    var reconnecting = state.reconnectAttempts > 0;
    if (reconnecting) setConnection("Reconnecting…", "reconnecting");
    else setConnection("Connecting…", "connecting");
    var socket;
    try {
      socket = new WebSocket(socketUrl(state.sessionId));
    } catch (e) {
      scheduleReconnect(epoch);
      return;
    }
    state.socket = socket;

    socket.onopen = function () {
      if (epoch !== state.epoch || state.socket !== socket) return;
      state.socketOpen = true;
      state.reconnectAttempts = 0;
      state.lastFrameAt = Date.now();
      setConnection("Live", "live");
      updateComposer();
      // Frames sent while we were connecting or away are not replayed: catch up over REST.
      resync(false).then(function () {
        if (epoch !== state.epoch) return;
        state.pendingSends.forEach(function (pending, clientId) {
          if (pending.transport === "ws" && pending.node.dataset.status === "sending") confirmSend(clientId);
        });
      });
    };

    socket.onmessage = function (event) {
      if (epoch !== state.epoch || state.socket !== socket) return;
      state.lastFrameAt = Date.now();
      state.unavailableCloses = 0;
      var frame;
      try {
        frame = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      handleFrame(frame);
    };

    socket.onclose = function (event) {
      if (state.socket !== socket) return;
      state.socket = null;
      state.socketOpen = false;
      updateComposer();
      if (epoch !== state.epoch) return;
      if (event.code === 4404) {
        setConnection("", "");
        showError("This chat is not available (it may have been deleted).");
        dropSession(state.sessionId);
        return;
      }
      if (event.code === 4401 || event.code === 4403) {
        setConnection("Signed out", "offline");
        window.location.assign(LOGIN_URL + "?next=" + encodeURIComponent(location.pathname));
        return;
      }
      if (event.code === 4503) {
        // The server is up but a service it needs is down (event.reason says so): the socket
        // opened before it closed, so keep the back-off growing across these closes.
        state.unavailableCloses = (state.unavailableCloses || 0) + 1;
        state.reconnectAttempts = state.unavailableCloses;
        scheduleReconnect(epoch);
        setConnection("Live updates unavailable (" + (event.reason || "service unavailable") + ") — retrying…", "reconnecting");
        return;
      }
      state.unavailableCloses = 0;
      scheduleReconnect(epoch);
    };
  }

  function scheduleReconnect(epoch) {
    state.reconnectAttempts++;
    var base = Math.min(RECONNECT_MAX_MS, 500 * Math.pow(2, state.reconnectAttempts - 1));
    var delay = Math.round(base / 2 + Math.random() * (base / 2));
    setConnection(
      state.reconnectAttempts > 3 ? "Offline — reconnecting… (messages are sent over HTTP meanwhile)" : "Reconnecting…",
      "reconnecting"
    );
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = setTimeout(function () {
      connect(epoch);
    }, delay);
  }

  function disconnect() {
    clearTimeout(state.reconnectTimer);
    state.reconnectAttempts = 0;
    var socket = state.socket;
    state.socket = null;
    state.socketOpen = false;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
      try {
        socket.close(1000);
      } catch (e) {
        /* already closed */
      }
    }
  }

  function sendFrame(frame) {
    if (!state.socket || !state.socketOpen || state.socket.readyState !== WebSocket.OPEN) return false;
    try {
      state.socket.send(JSON.stringify(frame));
      return true;
    } catch (e) {
      return false;
    }
  }

  // Re-open immediately when the browser says the network is back or the tab becomes visible.
  function nudgeReconnect() {
    if (state.sessionId !== null && !state.socket && state.reconnectTimer) {
      clearTimeout(state.reconnectTimer);
      connect(state.epoch);
    }
  }
  window.addEventListener("online", nudgeReconnect);
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") nudgeReconnect();
  });

  // ---------------------------------------------------------------------------------------------
  // Server frames

  function handleFrame(frame) {
    switch (frame && frame.type) {
      case "message.created":
      case "message.completed":
        if (frame.message) {
          withScroll(function () {
            upsertMessage(frame.message);
            afterMessagesChanged();
          });
          if (frame.type === "message.completed") {
            state.stopRequested = false;
            scheduleContextRefresh();
            maybeRefreshTitle();
          }
        }
        break;
      case "message.delta":
        applyDelta(frame.message_id, frame.delta);
        break;
      case "message.failed":
        markFailed(frame.message_id, frame.error, frame.message);
        break;
      case "compaction.started":
        setCompaction("Compacting context…", "running");
        break;
      case "compaction.finished":
        compactionFinished(frame.event || {});
        break;
      case "memory.updated":
        if (memory) memory.onUpdated(frame.records);
        break;
      case "recall":
        noteRecall(frame);
        break;
      case "context.updated":
        clearTimeout(state.contextTimer);
        renderContext(frame.context);
        break;
      case "error":
        socketError(frame.error || {});
        break;
      default:
        break;
    }
  }

  function applyDelta(messageId, delta) {
    if (messageId === undefined || messageId === null || typeof delta !== "string") return;
    var id = String(messageId);
    var m = state.messages.get(id);
    if (m && !ACTIVE_STATUSES[m.status]) return; // already final: the completed frame wins
    withScroll(function () {
      if (!m) {
        // message.created was lost; show the text now and let a resync fill in the rest.
        upsertMessage({ id: messageId, role: "assistant", kind: "chat", content: delta, status: "streaming" });
        afterMessagesChanged();
        resync(false);
        return;
      }
      var next = Object.assign({}, m, { content: (m.content || "") + delta, status: "streaming" });
      state.messages.set(id, next);
      if (typeof next.seq === "number") state.bySeq.set(next.seq, next);
      var node = state.nodes.get(id);
      if (node) {
        // Markdown is re-rendered whole, at most every RENDER_EVERY_MS, not on every token.
        node._parts.text.hidden = false;
        node._parts.text.parentNode.hidden = false;
        if (m.status !== "streaming") renderMessage(node, next);
        else scheduleBody(id);
      }
    });
    if (!m || m.status !== "streaming") updateComposer();
  }

  function markFailed(messageId, error, stored) {
    if (messageId === undefined || messageId === null) return;
    var id = String(messageId);
    if (error) state.failures.set(id, error);
    var m = state.messages.get(id);
    state.stopRequested = false;
    withScroll(function () {
      // The frame carries the stored message (status failed or interrupted, partial text kept).
      if (stored) upsertMessage(stored);
      else if (m) upsertMessage(Object.assign({}, m, { status: "failed" }));
      afterMessagesChanged();
    });
    if (!m) resync(false);
  }

  function compactionFinished(event) {
    var outcome = event.outcome || "";
    if (outcome === "compacted") {
      setCompaction(
        "Context compacted: " + fmtInt(event.tokens_before) + " → " + fmtInt(event.tokens_after) + " tokens",
        "done",
        8000
      );
      // Compaction flips `compacted` on older messages, which after_seq would not return.
      resync(true);
      loadMarkers(state.epoch);
    } else if (outcome === "failed" || outcome === "rejected") {
      setCompaction("Compaction " + outcome + (event.reason ? ": " + event.reason : ""), "failed", 12000);
    } else {
      setCompaction("", "");
    }
    scheduleContextRefresh();
  }

  function socketError(error) {
    showError(error);
    // A refused message.send leaves its bubble unconfirmed; check now instead of waiting.
    state.pendingSends.forEach(function (pending, clientId) {
      if (pending.transport === "ws" && pending.node.dataset.status === "sending") {
        clearTimeout(pending.timer);
        pending.timer = setTimeout(function () {
          confirmSend(clientId);
        }, 500);
      }
    });
    if (state.stopRequested) {
      state.stopRequested = false;
      updateComposer();
    }
  }

  function maybeRefreshTitle() {
    var session = findSession(state.sessionId);
    if (!session || session.title) return;
    var epoch = state.epoch;
    api("GET", sessionPath()).then(
      function (fresh) {
        if (epoch !== state.epoch || !fresh || !fresh.title) return;
        session.title = fresh.title;
        el.title.textContent = sessionLabel(session);
        document.title = el.title.textContent + " · chat-platform";
        renderSessions();
      },
      function () {}
    );
  }

  // A reply that stays pending/streaming with no frames for a while has probably lost its
  // frames: ask REST how it ended.
  function scheduleStaleCheck() {
    clearTimeout(state.staleTimer);
    if (!hasActiveReply()) return;
    var epoch = state.epoch;
    state.staleTimer = setTimeout(function () {
      if (epoch !== state.epoch || !hasActiveReply()) return;
      if (Date.now() - state.lastFrameAt >= STALE_STREAM_MS || !state.socketOpen) {
        resync(false).then(scheduleStaleCheck);
      } else {
        scheduleStaleCheck();
      }
    }, STALE_STREAM_MS);
  }

  // ---------------------------------------------------------------------------------------------
  // Sending

  function hasActiveReply() {
    var active = false;
    state.messages.forEach(function (m) {
      if (m.role === "assistant" && ACTIVE_STATUSES[m.status]) active = true;
    });
    return active;
  }

  function updateComposer() {
    var hasSession = state.sessionId !== null;
    var canWrite = hasSession || (state.botId !== null && !state.creatingSession);
    el.composer.disabled = !canWrite;
    el.send.disabled = !canWrite || !el.composer.value.trim();
    var streaming = hasSession && hasActiveReply();
    el.stop.hidden = !streaming;
    el.stop.disabled = !state.socketOpen || state.stopRequested;
    el.stop.textContent = state.stopRequested ? "Stopping…" : "Stop";
    el.stop.title = state.socketOpen ? "Stop the reply (Esc)" : "Reconnecting — stop is available once live again";
  }

  function newClientId() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
    // randomUUID needs a secure context; plain-http LAN installs still deserve a usable id.
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    var hex = Array.prototype.map
      .call(bytes, function (b) {
        return (b + 0x100).toString(16).slice(1);
      })
      .join("");
    return hex.slice(0, 8) + "-" + hex.slice(8, 12) + "-" + hex.slice(12, 16) + "-" + hex.slice(16, 20) + "-" + hex.slice(20);
  }

  function submitComposer() {
    if (state.sessionId === null) {
      startSessionThenSend();
      return;
    }
    var content = el.composer.value.replace(/\s+$/, "");
    if (!content.trim()) return;
    el.composer.value = "";
    autoResize();
    updateCommandHint();
    sendContent(content);
  }

  function sendContent(content) {
    hideError();
    updateComposer();
    var clientId = newClientId();
    var m = { role: "user", kind: content.indexOf("/compact") === 0 ? "command" : "chat", content: content, status: "sending", created_at: new Date().toISOString() };
    var node = buildMessageNode(m);
    node.dataset.clientId = clientId;
    var pending = { content: content, node: node, message: m, timer: null, transport: null };
    state.pendingSends.set(clientId, pending);
    withScroll(function () {
      renderMessage(node, m);
      el.transcript.append(node);
      afterMessagesChanged();
    });
    scrollToBottom(true);
    dispatchSend(clientId);
  }

  // Typing with no chat open starts one with the selected bot, as the "New chat" button would.
  function startSessionThenSend() {
    if (state.botId === null || state.creatingSession || !el.composer.value.trim()) return;
    state.creatingSession = true;
    updateComposer();
    createSession()
      .then(function (session) {
        if (session) submitComposer();
      })
      .finally(function () {
        state.creatingSession = false;
        updateComposer();
        el.composer.focus();
      });
  }

  function dispatchSend(clientId) {
    var pending = state.pendingSends.get(clientId);
    if (!pending) return;
    setPendingStatus(pending, "sending");
    if (state.socket && state.socket.readyState === WebSocket.CONNECTING && !pending.waitedForSocket) {
      // Just opened this chat: give the socket a moment so the reply can stream.
      pending.waitedForSocket = true;
      var epoch = state.epoch;
      waitForSocket(3000).then(function () {
        if (epoch === state.epoch) dispatchSend(clientId);
      });
      return;
    }
    if (sendFrame({ type: "message.send", content: pending.content, client_id: clientId })) {
      pending.transport = "ws";
      clearTimeout(pending.timer);
      pending.timer = setTimeout(function () {
        confirmSend(clientId);
      }, CONFIRM_AFTER_MS);
    } else {
      sendOverHttp(clientId, true);
    }
  }

  function waitForSocket(timeoutMs) {
    return new Promise(function (resolve) {
      var started = Date.now();
      (function poll() {
        var s = state.socket;
        if (!s || s.readyState !== WebSocket.CONNECTING || state.socketOpen || Date.now() - started >= timeoutMs) {
          resolve();
          return;
        }
        setTimeout(poll, 50);
      })();
    });
  }

  function setPendingStatus(pending, status, error) {
    pending.message = Object.assign({}, pending.message, { status: status, _clientId: status === "unsent" ? findClientId(pending) : undefined, _error: error });
    renderMessage(pending.node, pending.message);
  }

  function findClientId(pending) {
    var found = null;
    state.pendingSends.forEach(function (p, id) {
      if (p === pending) found = id;
    });
    return found;
  }

  // The websocket echo may have been dropped by the channel layer. Look over REST first; if the
  // server still has no such message, post it over HTTP with the same client_id, which the server
  // treats as the same request (idempotent), so it can never be stored twice.
  function confirmSend(clientId) {
    var pending = state.pendingSends.get(clientId);
    if (!pending) return;
    var epoch = state.epoch;
    resync(false).then(function () {
      if (epoch !== state.epoch || !state.pendingSends.has(clientId)) return;
      sendOverHttp(clientId, false);
    });
  }

  function sendOverHttp(clientId, wait) {
    var pending = state.pendingSends.get(clientId);
    if (!pending) return;
    pending.transport = "http";
    clearTimeout(pending.timer);
    var epoch = state.epoch;
    var body = { content: pending.content, client_id: clientId };
    if (wait) body.wait = true;
    if (wait) showWaitingReply(clientId);
    api("POST", sessionPath("messages/"), body)
      .then(function (result) {
        if (epoch !== state.epoch) return;
        withScroll(function () {
          ["user_message", "notice", "assistant_message"].forEach(function (key) {
            if (result && result[key] && typeof result[key] === "object") upsertMessage(result[key]);
          });
          if (result && result.compaction && typeof result.compaction === "object") {
            var c = result.compaction;
            if (c.outcome === "compacted") {
              resync(true);
              loadMarkers(epoch);
            }
          }
          dropPending(clientId);
          afterMessagesChanged();
        });
        scheduleContextRefresh(300);
        maybeRefreshTitle();
        return resync(false);
      })
      .catch(function (err) {
        if (epoch !== state.epoch) return;
        removeWaitingReply(clientId);
        var stored = err.details && typeof err.details === "object" ? err.details : null;
        if (stored && stored.user_message && stored.assistant_message) {
          // The exchange is stored and the reply carries the error: show it there, in words.
          withScroll(function () {
            upsertMessage(stored.user_message);
            upsertMessage(stored.assistant_message);
            dropPending(clientId);
            afterMessagesChanged();
          });
          scheduleContextRefresh(300);
          maybeRefreshTitle();
          return;
        }
        // Some errors (context_too_large, model_unavailable) come after the user message was
        // stored; a resync shows it, and whatever is still unconfirmed is marked not sent.
        resync(false).then(function () {
          if (epoch !== state.epoch) return;
          var p = state.pendingSends.get(clientId);
          if (p) setPendingStatus(p, "unsent", describeError(err));
        });
        showError(err);
      });
  }

  // While a wait=true request is open nothing streams, so show that a reply is on its way.
  function showWaitingReply(clientId) {
    var pending = state.pendingSends.get(clientId);
    if (!pending || pending.waitingNode) return;
    var m = { role: "assistant", kind: "chat", content: "", status: "pending" };
    var node = buildMessageNode(m);
    node.dataset.clientId = clientId + "-reply";
    renderMessage(node, m);
    delete node.dataset.messageId;
    pending.node.insertAdjacentElement("afterend", node);
    pending.waitingNode = node;
  }

  function removeWaitingReply(clientId) {
    var pending = state.pendingSends.get(clientId);
    if (pending && pending.waitingNode) {
      pending.waitingNode.remove();
      pending.waitingNode = null;
    }
  }

  function dropPending(clientId) {
    var pending = state.pendingSends.get(clientId);
    if (!pending) return;
    clearTimeout(pending.timer);
    removeWaitingReply(clientId);
    // The server's copy normally adopted the node already; if not (no user message in the
    // response, e.g. a command), the resync that follows brings it in.
    if (pending.node.dataset.clientId) pending.node.remove();
    state.pendingSends.delete(clientId);
  }

  function retrySend(clientId) {
    hideError();
    dispatchSend(clientId);
  }

  function discardSend(clientId) {
    var pending = state.pendingSends.get(clientId);
    if (!pending) return;
    if (!el.composer.value.trim()) {
      el.composer.value = pending.content;
      autoResize();
    }
    dropPending(clientId);
    afterMessagesChanged();
    el.composer.focus();
  }

  function requestStop() {
    if (!hasActiveReply() || state.stopRequested) return;
    if (sendFrame({ type: "generation.stop" })) {
      state.stopRequested = true;
      updateComposer();
      // If the final frame for the stopped reply is lost, REST will tell us how it ended.
      var epoch = state.epoch;
      setTimeout(function () {
        if (epoch === state.epoch && state.stopRequested) {
          resync(false).then(function () {
            state.stopRequested = false;
            updateComposer();
          });
        }
      }, 3000);
    } else {
      showError("Can't stop the reply while reconnecting. Try again in a moment.");
    }
  }

  el.composerForm.addEventListener("submit", function (event) {
    event.preventDefault();
    submitComposer();
  });

  el.composer.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.ctrlKey && !event.metaKey && !event.isComposing && event.keyCode !== 229) {
      event.preventDefault();
      submitComposer();
    } else if (event.key === "Escape" && hasActiveReply()) {
      event.preventDefault();
      requestStop();
    }
  });

  el.composer.addEventListener("input", function () {
    autoResize();
    updateComposer();
  });

  el.stop.addEventListener("click", function () {
    requestStop();
    el.composer.focus();
  });

  function autoResize() {
    el.composer.style.height = "auto";
    el.composer.style.height = Math.min(el.composer.scrollHeight + 2, 240) + "px";
  }

  // ---------------------------------------------------------------------------------------------
  // Recall frames: the reply being written looked something up.

  function noteRecall(frame) {
    if (frame.message_id === undefined || frame.message_id === null) return;
    var id = String(frame.message_id);
    var list = state.recalls.get(id) || [];
    list.push({
      tool: frame.tool,
      names: Array.isArray(frame.names) ? frame.names : [],
      query: frame.query || "",
      found: frame.found,
    });
    state.recalls.set(id, list);
    var m = state.messages.get(id);
    var node = state.nodes.get(id);
    if (m && node) renderMessage(node, m);
  }

  // ---------------------------------------------------------------------------------------------
  // Compaction markers: one per summary, after the last message it covers, built from the
  // summaries and compaction events over REST, so automatic compactions show too and survive a
  // reload. Expanding one shows the summary text, its retention score and the facts it missed.

  function loadMarkers(epoch) {
    if (state.sessionId === null) return Promise.resolve();
    var sessionId = state.sessionId;
    return Promise.all([
      api("GET", sessionPath("summaries/")),
      api("GET", "compaction-events/?session=" + encodeURIComponent(sessionId)),
    ]).then(
      function (results) {
        if (epoch !== state.epoch) return;
        state.markersLoaded = true;
        state.summaries = asList(results[0]);
        state.events = asList(results[1]);
        withScroll(renderMarkers);
      },
      function () {
        /* markers are context, not content: the transcript stands without them */
      }
    );
  }

  var TRIGGER_WORDS = {
    manual: "manual (/compact)",
    soft: "automatic (background)",
    hard: "automatic (before a reply)",
    fusion: "automatic (summaries merged)",
  };

  function renderMarkers() {
    el.transcript.querySelectorAll(".compaction-marker").forEach(function (n) {
      n.remove();
    });
    var eventBySummary = new Map();
    state.events.forEach(function (e) {
      if (e.summary !== null && e.summary !== undefined) eventBySummary.set(String(e.summary), e);
    });
    state.summaries
      .slice()
      .sort(function (a, b) {
        return a.last_seq - b.last_seq || a.id - b.id;
      })
      .forEach(function (summary) {
        var node = buildMarker(summary, eventBySummary.get(String(summary.id)));
        insertNode(node, summary.last_seq + 0.5);
      });
  }

  function buildMarker(summary, event) {
    var node = document.createElement("details");
    node.className = "compaction-marker" + (summary.status === "superseded" ? " is-superseded" : "");
    node.dataset.seq = String(summary.last_seq + 0.5);
    node.dataset.summaryId = String(summary.id);
    node.dataset.trigger = summary.trigger || "";
    var head = document.createElement("summary");
    head.className = "marker-head";
    var title = document.createElement("span");
    title.className = "marker-title";
    var before = event ? event.tokens_before : summary.source_tokens;
    var after = event ? event.tokens_after : summary.token_count;
    title.textContent =
      "Compacted messages " +
      summary.first_seq +
      "–" +
      summary.last_seq +
      " · " +
      fmtInt(before) +
      " → " +
      fmtInt(after) +
      " tokens";
    var meta = document.createElement("span");
    meta.className = "marker-meta";
    var bits = [TRIGGER_WORDS[summary.trigger] || summary.trigger || "compaction"];
    if (typeof summary.retention === "number") bits.push("retention " + Math.round(summary.retention * 100) + "%");
    if (summary.status === "superseded") bits.push("merged into a later summary");
    meta.textContent = bits.join(" · ");
    head.append(title, meta);

    var body = document.createElement("div");
    body.className = "marker-body";
    var facts = document.createElement("dl");
    facts.className = "marker-facts";
    function fact(name, value) {
      if (value === null || value === undefined || value === "") return;
      var dt = document.createElement("dt");
      dt.textContent = name;
      var dd = document.createElement("dd");
      dd.textContent = value;
      facts.append(dt, dd);
    }
    fact("Trigger", TRIGGER_WORDS[summary.trigger] || summary.trigger);
    fact("Level", summary.level > 1 ? summary.level + " (a summary of summaries)" : String(summary.level));
    fact("Model", summary.model);
    fact("Focus", summary.focus);
    fact("Source", fmtInt(summary.source_tokens) + " tokens → summary " + fmtInt(summary.token_count) + " tokens");
    fact(
      "Retention",
      typeof summary.retention === "number"
        ? Math.round(summary.retention * 100) + "% of the checked facts survived"
        : "not scored"
    );
    if (event) {
      fact("When", new Date(event.created_at).toLocaleString());
      if (typeof event.duration_ms === "number") fact("Took", fmtInt(event.duration_ms) + " ms");
      fact("Snapshot", event.snapshot ? event.snapshot + " (in Memory)" : "");
    }
    var text = document.createElement("div");
    text.className = "marker-summary";
    var label = document.createElement("h3");
    label.textContent = "Summary the bot now sees";
    var pre = document.createElement("p");
    pre.className = "marker-summary-text";
    pre.textContent = summary.text || "";
    text.append(label, pre);
    body.append(facts, text);
    var missing = Array.isArray(summary.missing_facts) ? summary.missing_facts : [];
    var missingBox = document.createElement("div");
    missingBox.className = "marker-missing";
    var mh = document.createElement("h3");
    mh.textContent = missing.length ? "Facts the summary missed (" + missing.length + ")" : "Facts the summary missed";
    missingBox.append(mh);
    if (missing.length) {
      var ul = document.createElement("ul");
      missing.forEach(function (f) {
        var li = document.createElement("li");
        li.textContent = typeof f === "string" ? f : JSON.stringify(f);
        ul.append(li);
      });
      missingBox.append(ul);
    } else {
      var none = document.createElement("p");
      none.className = "muted";
      none.textContent = "None found.";
      missingBox.append(none);
    }
    body.append(missingBox);
    node.append(head, body);
    return node;
  }

  // ---------------------------------------------------------------------------------------------
  // Session search (a filter over the titles in the list), rename

  function applySessionFilter() {
    var q = el.sessionSearch.value.trim().toLowerCase();
    var shown = 0;
    el.sessionList.querySelectorAll(".session-item").forEach(function (li) {
      var session = findSession(li.dataset.sessionId);
      var hit = !q || (session && sessionLabel(session).toLowerCase().indexOf(q) !== -1);
      li.hidden = !hit;
      if (hit) shown++;
    });
    el.sessionNoMatch.hidden = !q || shown > 0;
  }

  el.sessionSearch.addEventListener("input", applySessionFilter);
  el.sessionSearch.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && el.sessionSearch.value) {
      event.preventDefault();
      event.stopPropagation();
      el.sessionSearch.value = "";
      applySessionFilter();
    }
  });

  function startRename() {
    var session = findSession(state.sessionId);
    if (!session) return;
    el.renameInput.value = session.title || "";
    el.renameInput.placeholder = sessionLabel(session);
    el.title.hidden = true;
    el.rename.hidden = true;
    el.renameForm.hidden = false;
    el.renameInput.focus();
    el.renameInput.select();
  }

  function cancelRename(focus) {
    if (el.renameForm.hidden) return;
    el.renameForm.hidden = true;
    el.title.hidden = false;
    el.rename.hidden = state.sessionId === null;
    if (focus) el.rename.focus();
  }

  el.rename.addEventListener("click", startRename);
  el.renameCancel.addEventListener("click", function () {
    cancelRename(true);
  });
  el.renameInput.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      cancelRename(true);
    }
  });
  el.renameForm.addEventListener("submit", function (event) {
    event.preventDefault();
    var session = findSession(state.sessionId);
    if (!session) return;
    var epoch = state.epoch;
    api("PATCH", "sessions/" + encodeURIComponent(session.id) + "/", { title: el.renameInput.value }).then(
      function (fresh) {
        session.title = fresh.title;
        renderSessions();
        if (epoch !== state.epoch) return;
        el.title.textContent = sessionLabel(session);
        document.title = el.title.textContent + " · chat-platform";
        cancelRename(true);
      },
      function (err) {
        showError(err);
        el.renameInput.focus();
      }
    );
  });

  // ---------------------------------------------------------------------------------------------
  // Slash-command hint

  var COMMANDS = [
    {
      name: "/compact",
      usage: "/compact [focus]",
      help: "Summarise the older messages now, to free context. Add a focus to say what the summary must keep.",
    },
  ];

  function updateCommandHint() {
    var value = el.composer.value;
    if (value.charAt(0) !== "/") {
      el.commandHint.hidden = true;
      el.commandHint.replaceChildren();
      return;
    }
    var word = value.split(/\s/)[0];
    var matches = COMMANDS.filter(function (c) {
      return c.name.indexOf(word) === 0 || word.indexOf(c.name) === 0;
    });
    el.commandHint.replaceChildren();
    if (!matches.length) {
      el.commandHint.textContent = "Unknown command. Available: /compact [focus]. Start with a space to send text that begins with /.";
    } else {
      matches.forEach(function (c) {
        var row = document.createElement("p");
        var code = document.createElement("code");
        code.textContent = c.usage;
        row.append(code, " — " + c.help);
        el.commandHint.append(row);
      });
    }
    el.commandHint.hidden = false;
  }

  el.composer.addEventListener("input", updateCommandHint);

  // ---------------------------------------------------------------------------------------------
  // The drawer (narrow screens): the sidebar slides over the chat.

  var narrow = window.matchMedia("(max-width: 760px)");

  function openDrawer() {
    document.body.classList.add("drawer-open");
    el.drawerToggle.setAttribute("aria-expanded", "true");
    el.drawerBackdrop.hidden = false;
    var target = el.sidebar.querySelector(".session-item.is-current .session-open") || el.newSession;
    (target && !target.disabled ? target : el.drawerClose).focus();
  }

  function closeDrawer(focusToggle) {
    if (!document.body.classList.contains("drawer-open")) return;
    document.body.classList.remove("drawer-open");
    el.drawerToggle.setAttribute("aria-expanded", "false");
    el.drawerBackdrop.hidden = true;
    if (focusToggle) el.drawerToggle.focus();
  }

  el.drawerToggle.addEventListener("click", function () {
    if (document.body.classList.contains("drawer-open")) closeDrawer(true);
    else openDrawer();
  });
  el.drawerClose.addEventListener("click", function () {
    closeDrawer(true);
  });
  el.drawerBackdrop.addEventListener("click", function () {
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

  // ---------------------------------------------------------------------------------------------
  // Start

  var memory = window.ChatMemory ? window.ChatMemory.create({ api: api }) : null;
  updateComposer();
  loadBots(root.dataset.botId || null, root.dataset.sessionId || sessionIdFromPath());
})();
