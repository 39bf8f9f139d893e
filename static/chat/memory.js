/*
 * The memory panel: the session's records (index, search, read), and the user's own notes
 * (add, edit, delete info records; snapshots are read-only). Everything goes through the records
 * API under /api/v1/sessions/{id}/records/; chat.js passes in its api() and calls
 * onUpdated() when a memory.updated frame arrives.
 *
 * User-supplied text is only ever written with textContent.
 */
(function () {
  "use strict";

  function byId(id) {
    return document.getElementById(id);
  }

  function create(deps) {
    var api = deps.api;
    var el = {
      panel: byId("memory-panel"),
      toggle: byId("memory-toggle"),
      close: byId("memory-close"),
      searchForm: byId("memory-search-form"),
      search: byId("memory-search"),
      status: byId("memory-status"),
      list: byId("memory-list"),
      record: byId("memory-record"),
      recordName: byId("memory-record-name"),
      recordMeta: byId("memory-record-meta"),
      recordDescription: byId("memory-record-description"),
      recordBody: byId("memory-record-body"),
      edit: byId("memory-edit"),
      del: byId("memory-delete"),
      back: byId("memory-back"),
      add: byId("memory-add"),
      form: byId("memory-form"),
      formTitle: byId("memory-form-title"),
      formError: byId("memory-form-error"),
      name: byId("memory-name"),
      description: byId("memory-description"),
      body: byId("memory-body"),
      scope: byId("memory-scope"),
      cancel: byId("memory-cancel"),
    };
    var st = { sessionId: null, query: "", current: null, editing: null, epoch: 0, stale: true };

    function base() {
      return "sessions/" + encodeURIComponent(st.sessionId) + "/records/";
    }

    function isOpen() {
      return !el.panel.hidden;
    }

    function setSession(sessionId) {
      st.epoch++;
      st.sessionId = sessionId;
      st.query = "";
      st.current = null;
      st.stale = true;
      el.search.value = "";
      el.list.replaceChildren();
      el.status.textContent = "";
      showList();
      el.toggle.disabled = sessionId === null;
      if (sessionId === null) close(false);
      else if (isOpen()) load();
    }

    function open() {
      if (st.sessionId === null) return;
      el.panel.hidden = false;
      el.toggle.setAttribute("aria-expanded", "true");
      document.body.classList.add("memory-panel-open");
      if (st.stale) load();
      el.search.focus();
    }

    function close(focusToggle) {
      el.panel.hidden = true;
      el.toggle.setAttribute("aria-expanded", "false");
      document.body.classList.remove("memory-panel-open");
      if (focusToggle !== false) el.toggle.focus();
    }

    function fmtRange(r) {
      if (typeof r.first_seq === "number" && typeof r.last_seq === "number") {
        return "messages " + r.first_seq + "–" + r.last_seq;
      }
      return "";
    }

    function load() {
      if (st.sessionId === null) return Promise.resolve();
      var epoch = st.epoch;
      var q = st.query;
      el.status.textContent = q ? "Searching…" : "Loading…";
      return api("GET", base() + (q ? "?q=" + encodeURIComponent(q) : "")).then(
        function (data) {
          if (epoch !== st.epoch || q !== st.query) return;
          st.stale = false;
          var records = Array.isArray(data) ? data : (data && data.results) || [];
          renderList(records);
          el.status.textContent = q
            ? records.length + (records.length === 1 ? " record matches " : " records match ") + "“" + q + "”."
            : records.length
              ? records.length + (records.length === 1 ? " record." : " records.")
              : "Nothing remembered yet. Notes appear here when you or the bot save one, and snapshots when the chat is compacted.";
        },
        function (err) {
          if (epoch !== st.epoch) return;
          el.status.textContent = "Could not load memory: " + (err.message || "error") + ".";
        }
      );
    }

    function renderList(records) {
      var items = records.map(function (r) {
        var li = document.createElement("li");
        li.className = "memory-item";
        li.dataset.name = r.name;
        li.dataset.kind = r.kind;
        var btn = document.createElement("button");
        btn.type = "button";
        btn.className = "memory-open";
        var name = document.createElement("span");
        name.className = "memory-name";
        name.textContent = r.name;
        var tags = document.createElement("span");
        tags.className = "memory-tags";
        var kind = document.createElement("span");
        kind.className = "tag tag-" + r.kind;
        kind.textContent = r.kind === "snapshot" ? "snapshot" : "note";
        tags.append(kind);
        if (r.scope === "bot") {
          var scope = document.createElement("span");
          scope.className = "tag";
          scope.textContent = "all chats";
          tags.append(scope);
        }
        var desc = document.createElement("span");
        desc.className = "memory-desc";
        desc.textContent = r.description || "";
        btn.append(name, tags, desc);
        var range = fmtRange(r);
        if (range || r.excerpt) {
          var extra = document.createElement("span");
          extra.className = "memory-extra";
          if (r.excerpt) {
            // Matches come wrapped in **…** (info records); show them marked, never the stars.
            r.excerpt.split("**").forEach(function (part, i) {
              if (!part) return;
              if (i % 2) {
                var mark = document.createElement("mark");
                mark.textContent = part;
                extra.append(mark);
              } else {
                extra.append(document.createTextNode(part));
              }
            });
          } else {
            extra.textContent = range;
          }
          btn.append(extra);
        }
        btn.setAttribute("aria-label", "Read " + r.name + (r.description ? ": " + r.description : ""));
        btn.addEventListener("click", function () {
          read(r.name);
        });
        li.append(btn);
        return li;
      });
      el.list.replaceChildren.apply(el.list, items);
    }

    function showList() {
      el.record.hidden = true;
      el.form.hidden = true;
      el.list.hidden = false;
      el.add.hidden = false;
      el.searchForm.hidden = false;
    }

    function read(name) {
      var epoch = st.epoch;
      return api("GET", base() + encodeURIComponent(name) + "/").then(
        function (r) {
          if (epoch !== st.epoch) return;
          st.current = r;
          el.recordName.textContent = r.name;
          var meta = [r.kind === "snapshot" ? "Snapshot (read-only)" : "Note", r.scope === "bot" ? "all chats with this bot" : "this chat"];
          var range = fmtRange(r);
          if (range) meta.push(range);
          if (typeof r.token_count === "number") meta.push(r.token_count + " tokens");
          el.recordMeta.textContent = meta.join(" · ");
          el.recordDescription.textContent = r.description || "";
          el.recordBody.textContent = r.body || "";
          var editable = r.kind === "info";
          el.edit.hidden = !editable;
          el.del.hidden = !editable;
          el.list.hidden = true;
          el.form.hidden = true;
          el.add.hidden = true;
          el.searchForm.hidden = true;
          el.record.hidden = false;
          el.record.focus();
        },
        function (err) {
          el.status.textContent = err.code === "not_found" ? "That record no longer exists." : "Could not read " + name + ": " + err.message;
          if (err.code === "not_found") load();
        }
      );
    }

    function showForm(record) {
      st.editing = record ? record.name : null;
      el.formTitle.textContent = record ? "Edit " + record.name : "New note";
      el.formError.hidden = true;
      el.formError.replaceChildren();
      el.name.value = record ? record.name : "";
      el.name.readOnly = !!record;
      el.description.value = record ? record.description || "" : "";
      el.body.value = record ? record.body || "" : "";
      el.scope.value = record ? record.scope : "session";
      el.scope.disabled = !!record;
      el.list.hidden = true;
      el.record.hidden = true;
      el.add.hidden = true;
      el.searchForm.hidden = true;
      el.form.hidden = false;
      (record ? el.description : el.name).focus();
    }

    function formErrors(err) {
      el.formError.replaceChildren();
      var p = document.createElement("p");
      p.textContent = err.message || "Could not save.";
      el.formError.append(p);
      var details = err.details;
      if (details && typeof details === "object") {
        Object.keys(details).forEach(function (field) {
          var texts = [].concat(details[field]).map(function (t) {
            return typeof t === "string" ? t : JSON.stringify(t);
          });
          var line = document.createElement("p");
          line.textContent = field + ": " + texts.join(" ");
          el.formError.append(line);
        });
      }
      el.formError.hidden = false;
      el.formError.focus();
    }

    el.form.addEventListener("submit", function (event) {
      event.preventDefault();
      var editing = st.editing;
      var payload = { description: el.description.value.trim(), body: el.body.value };
      var request;
      if (editing) {
        request = api("PATCH", base() + encodeURIComponent(editing) + "/", payload);
      } else {
        payload.name = el.name.value.trim();
        payload.scope = el.scope.value;
        request = api("POST", base(), payload);
      }
      request.then(
        function (r) {
          st.query = "";
          el.search.value = "";
          load().then(function () {
            read((r && r.name) || editing || payload.name);
          });
        },
        formErrors
      );
    });

    el.cancel.addEventListener("click", function () {
      if (st.editing && st.current) read(st.current.name);
      else {
        showList();
        el.add.focus();
      }
    });
    el.add.addEventListener("click", function () {
      showForm(null);
    });
    el.edit.addEventListener("click", function () {
      if (st.current) showForm(st.current);
    });
    el.back.addEventListener("click", function () {
      showList();
      var item = el.list.querySelector('[data-name="' + (st.current ? CSS.escape(st.current.name) : "") + '"] button');
      (item || el.search).focus();
    });
    el.del.addEventListener("click", function () {
      var r = st.current;
      if (!r || !window.confirm("Delete the note “" + r.name + "”? The bot will no longer be able to look it up.")) return;
      api("DELETE", base() + encodeURIComponent(r.name) + "/").then(
        function () {
          st.current = null;
          showList();
          load();
          el.search.focus();
        },
        function (err) {
          el.status.textContent = "Could not delete: " + err.message;
        }
      );
    });
    el.searchForm.addEventListener("submit", function (event) {
      event.preventDefault();
      st.query = el.search.value.trim();
      showList();
      load();
    });
    el.search.addEventListener("input", function () {
      // Clearing the box goes back to the whole index without pressing Enter.
      if (!el.search.value.trim() && st.query) {
        st.query = "";
        load();
      }
    });
    el.toggle.addEventListener("click", function () {
      if (isOpen()) close();
      else open();
    });
    el.close.addEventListener("click", function () {
      close();
    });
    el.panel.addEventListener("keydown", function (event) {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        if (!el.form.hidden || !el.record.hidden) {
          showList();
          el.search.focus();
        } else close();
      }
    });

    // A memory.updated frame: the index changed (a save, a compaction snapshot, an edit).
    function onUpdated() {
      st.stale = true;
      if (isOpen() && el.list.hidden === false) load();
    }

    return { setSession: setSession, open: open, close: close, isOpen: isOpen, onUpdated: onUpdated, reload: load };
  }

  window.ChatMemory = { create: create };
})();
