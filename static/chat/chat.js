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
    meter: byId("context-meter"),
    meterBar: byId("context-meter-bar"),
    meterText: byId("context-meter-text"),
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
  // Location hash: #bot=<id>&session=<id> keeps the open chat across reloads.

  function readHash() {
    var out = {};
    location.hash
      .replace(/^#/, "")
      .split("&")
      .forEach(function (part) {
        var kv = part.split("=");
        if (kv[0]) out[decodeURIComponent(kv[0])] = decodeURIComponent(kv[1] || "");
      });
    return out;
  }

  function writeHash() {
    var parts = [];
    if (state.botId !== null) parts.push("bot=" + encodeURIComponent(state.botId));
    if (state.sessionId !== null) parts.push("session=" + encodeURIComponent(state.sessionId));
    var hash = parts.length ? "#" + parts.join("&") : "";
    if (hash !== location.hash) {
      history.replaceState(null, "", location.pathname + location.search + hash);
    }
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
    writeHash();
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
        } else if (!findSession(state.sessionId)) {
          closeSession();
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
      open.addEventListener("click", function () {
        openSession(session.id);
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
    if (wasCurrent) closeSession();
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
    el.title.textContent = "No chat selected";
    el.meter.hidden = true;
    setCompaction("");
    setConnection("");
    updateComposer();
    renderSessions();
    writeHash();
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
    renderSessions();
    writeHash();
    updateComposer();
    // The socket opens alongside the first read; its onopen resync covers anything in between.
    connect(epoch);
    refreshContext(epoch);
    loadMessages(epoch, null)
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

  function failureText(m) {
    var err = state.failures.get(String(m.id)) || m.error;
    if (!err) return m.status === "failed" ? "The reply failed." : "";
    if (typeof err === "string") return err;
    var text = err.message || "The reply failed.";
    if (err.code) text += " (" + err.code + ")";
    return text;
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
    var error = document.createElement("p");
    error.className = "msg-error";
    error.hidden = true;
    bubble.append(text, error);

    node.append(header, bubble);
    node._parts = {
      who: who,
      when: when,
      status: status,
      tokens: tokens,
      tags: tags,
      text: text,
      error: error,
      actions: actions,
    };
    return node;
  }

  function renderMessage(node, m) {
    var notice = isNotice(m);
    var tool = !notice && isTool(m);
    var p = node._parts;
    node.className =
      "msg " +
      (notice ? "msg-notice" : tool ? "msg-tool" : "msg-" + (m.role === "user" ? "user" : "assistant")) +
      (m.pinned ? " is-pinned" : "") +
      (m.compacted ? " is-compacted" : "");
    if (m.id !== undefined && m.id !== null) node.dataset.messageId = String(m.id);
    node.dataset.role = m.role || "";
    node.dataset.kind = m.kind || "";
    node.dataset.status = m.status || "";
    if (typeof m.seq === "number") node.dataset.seq = String(m.seq);
    node.setAttribute("aria-busy", ACTIVE_STATUSES[m.status] || m.status === "sending" ? "true" : "false");

    p.who.textContent = authorLabel(m);
    // A notice speaks for itself; its author line would only say "System".
    p.who.hidden = notice && m.kind !== "command";
    p.when.textContent = m.created_at ? fmtTime(m.created_at) : "";
    p.when.dateTime = m.created_at || "";
    if (m.created_at) p.when.title = new Date(m.created_at).toLocaleString();

    var statusLabel = STATUS_LABELS[m.status] || "";
    p.status.textContent = statusLabel;
    p.status.hidden = !statusLabel;
    p.tokens.textContent =
      typeof m.token_count === "number" && m.token_count > 0 && !notice
        ? fmtInt(m.token_count) + " tokens"
        : "";
    p.tokens.hidden = !p.tokens.textContent;

    p.tags.replaceChildren();
    if (m.pinned) p.tags.append(tag("pinned", "Pinned: always kept in the bot's context"));
    if (m.compacted) p.tags.append(tag("compacted", "Summarised: the bot now sees a summary of this message"));

    var content = m.content || (tool && !ACTIVE_STATUSES[m.status] ? "Used a tool." : "");
    if (p.text.textContent !== content) p.text.textContent = content;
    p.text.hidden = !content && m.status !== "pending" && m.status !== "streaming";

    var errText = m.status === "failed" ? failureText(m) : m.status === "interrupted" ? "Reply interrupted before it finished." : "";
    if (m.status === "unsent") errText = m._error ? "Not sent: " + m._error : "Not sent.";
    p.error.textContent = errText;
    p.error.hidden = !errText;
    p.text.parentNode.hidden = p.text.hidden && p.error.hidden;

    renderActions(node, m, notice);
  }

  function tag(text, title) {
    var t = document.createElement("span");
    t.className = "tag tag-" + text;
    t.textContent = text;
    t.title = title;
    return t;
  }

  function renderActions(node, m, notice) {
    var actions = node._parts.actions;
    actions.replaceChildren();
    if (m.status === "unsent" && m._clientId) {
      var retry = document.createElement("button");
      retry.type = "button";
      retry.className = "button button-small";
      retry.textContent = "Retry";
      retry.addEventListener("click", function () {
        retrySend(m._clientId);
      });
      var discard = document.createElement("button");
      discard.type = "button";
      discard.className = "button button-small button-quiet";
      discard.textContent = "Discard";
      discard.addEventListener("click", function () {
        discardSend(m._clientId);
      });
      actions.append(retry, discard);
    } else if (!notice && m.id !== undefined && m.id !== null && (m.status === "complete" || m.pinned)) {
      var pin = document.createElement("button");
      pin.type = "button";
      pin.className = "button button-small button-quiet msg-pin";
      pin.setAttribute("aria-pressed", m.pinned ? "true" : "false");
      pin.textContent = m.pinned ? "Unpin" : "Pin";
      pin.title = m.pinned
        ? "Stop always keeping this message in the bot's context"
        : "Always keep this message in the bot's context";
      pin.addEventListener("click", function () {
        togglePin(m.id, pin);
      });
      actions.append(pin);
    }
    actions.hidden = !actions.childElementCount;
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
    var first = el.transcript.querySelector(".msg");
    el.transcript.insertBefore(node, first);
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
    state.messages.set(id, m);
    var node = state.nodes.get(id);
    if (!node && (m.role === "user" || m.kind === "command")) node = adoptOptimistic(m);
    var isNew = !node;
    if (!node) node = buildMessageNode(m);
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

  function renderContext(ctx) {
    if (!ctx || typeof ctx.budget !== "number" || typeof ctx.pressure !== "number" || ctx.budget <= 0) {
      return;
    }
    el.meterBar.max = ctx.budget;
    el.meterBar.value = Math.min(ctx.pressure, ctx.budget);
    if (typeof ctx.soft === "number") el.meterBar.low = ctx.soft;
    if (typeof ctx.hard === "number") el.meterBar.high = ctx.hard;
    el.meterBar.optimum = 0;
    el.meterText.textContent = fmtInt(ctx.pressure) + " / " + fmtInt(ctx.budget) + " tokens";
    var lines = [
      "Tokens the next model call would send: " + fmtInt(ctx.pressure) + " of a budget of " + fmtInt(ctx.budget),
    ];
    if (typeof ctx.soft === "number") lines.push("Background compaction from " + fmtInt(ctx.soft));
    if (typeof ctx.hard === "number") lines.push("Blocking compaction from " + fmtInt(ctx.hard));
    if (ctx.parts && typeof ctx.parts === "object") {
      Object.keys(ctx.parts).forEach(function (k) {
        lines.push("  " + k.replace(/_/g, " ") + ": " + fmtInt(ctx.parts[k]));
      });
    }
    el.meter.title = lines.join("\n");
    el.meterBar.setAttribute("aria-valuetext", el.meterText.textContent);
    el.meter.dataset.level =
      typeof ctx.hard === "number" && ctx.pressure >= ctx.hard
        ? "hard"
        : typeof ctx.soft === "number" && ctx.pressure >= ctx.soft
          ? "soft"
          : "ok";
    el.meter.hidden = false;
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
      var node = state.nodes.get(id);
      if (node) {
        // Append a text node rather than rewriting the whole bubble on every token.
        node._parts.text.append(document.createTextNode(delta));
        node._parts.text.hidden = false;
        if (m.status !== "streaming") renderMessage(node, next);
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
    hideError();
    el.composer.value = "";
    autoResize();
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
            if (c.outcome === "compacted") resync(true);
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
  // Start

  var initial = readHash();
  updateComposer();
  loadBots(initial.bot, initial.session);
})();
