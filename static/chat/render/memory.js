/*
 * The memory panel: the session's records (index, search, read), and the user's own notes
 * (add, edit, delete info records; snapshots are read-only). Everything goes through the records
 * API under /api/v1/sessions/{id}/records/; chat.js passes in its api(), frames.js calls
 * onUpdated() when a memory.updated frame arrives.
 *
 * User-supplied text is only ever written with textContent.
 */
import { byId, el } from "../lib/dom.js";
import { fmtInt } from "../lib/format.js";

export function create(deps) {
  var api = deps.api;
  var ui = {
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
    nameHint: byId("memory-name-hint"),
    description: byId("memory-description"),
    body: byId("memory-body"),
    scope: byId("memory-scope"),
    cancel: byId("memory-cancel"),
  };
  var st = { sessionId: null, query: "", current: null, editing: null, epoch: 0, stale: true };
  var NAME_HINT = ui.nameHint.textContent;

  function base() {
    return "sessions/" + encodeURIComponent(st.sessionId) + "/records/";
  }

  function isOpen() {
    return !ui.panel.hidden;
  }

  function setSession(sessionId) {
    st.epoch++;
    st.sessionId = sessionId;
    st.query = "";
    st.current = null;
    st.stale = true;
    ui.search.value = "";
    ui.list.replaceChildren();
    ui.status.textContent = "";
    showList();
    ui.toggle.disabled = sessionId === null;
    if (sessionId === null) close(false);
    else if (isOpen()) load();
  }

  function open() {
    if (st.sessionId === null) return;
    ui.panel.hidden = false;
    ui.toggle.setAttribute("aria-expanded", "true");
    document.body.classList.add("memory-panel-open");
    if (st.stale) load();
    ui.search.focus();
  }

  function close(focusToggle) {
    ui.panel.hidden = true;
    ui.toggle.setAttribute("aria-expanded", "false");
    document.body.classList.remove("memory-panel-open");
    if (focusToggle !== false) ui.toggle.focus();
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
    ui.status.textContent = q ? "Searching…" : "Loading…";
    return api("GET", base() + (q ? "?q=" + encodeURIComponent(q) : "")).then(
      function (data) {
        if (epoch !== st.epoch || q !== st.query) return;
        st.stale = false;
        var records = Array.isArray(data) ? data : (data && data.results) || [];
        renderList(records);
        ui.status.textContent = q
          ? records.length + (records.length === 1 ? " record matches " : " records match ") + "“" + q + "”."
          : records.length
            ? records.length + (records.length === 1 ? " record." : " records.")
            : "Nothing remembered yet. Notes appear here when you or the bot save one, and snapshots when the chat is compacted.";
      },
      function (err) {
        if (epoch !== st.epoch) return;
        ui.status.textContent = "Could not load memory: " + (err.message || "error") + ".";
      }
    );
  }

  function renderList(records) {
    var items = records.map(function (r) {
      var range = fmtRange(r);
      var btn = el(
        "button",
        {
          type: "button",
          class: "memory-open",
          "aria-label": "Read " + r.name + (r.description ? ": " + r.description : ""),
          onclick: function () {
            read(r.name);
          },
        },
        el("span", { class: "memory-name", text: r.name }),
        el(
          "span",
          { class: "memory-tags" },
          el("span", { class: "tag tag-" + r.kind, text: r.kind === "snapshot" ? "snapshot" : "note" }),
          r.scope === "bot" && el("span", { class: "tag", text: "all chats" })
        ),
        el("span", { class: "memory-desc", text: r.description || "" }),
        r.excerpt ? el("span", { class: "memory-extra" }, excerptParts(r.excerpt)) : range ? el("span", { class: "memory-extra", text: range }) : null
      );
      return el("li", { class: "memory-item", dataset: { name: r.name, kind: r.kind } }, btn);
    });
    ui.list.replaceChildren.apply(ui.list, items);
  }

  function showList() {
    ui.record.hidden = true;
    ui.form.hidden = true;
    ui.list.hidden = false;
    ui.add.hidden = false;
    ui.searchForm.hidden = false;
  }

  function read(name) {
    var epoch = st.epoch;
    return api("GET", base() + encodeURIComponent(name) + "/").then(
      function (r) {
        if (epoch !== st.epoch) return;
        st.current = r;
        ui.recordName.textContent = r.name;
        var meta = [r.kind === "snapshot" ? "Snapshot (read-only)" : "Note", r.scope === "bot" ? "all chats with this bot" : "this chat"];
        var range = fmtRange(r);
        if (range) meta.push(range);
        if (typeof r.token_count === "number") meta.push(fmtInt(r.token_count) + " tokens");
        ui.recordMeta.textContent = meta.join(" · ");
        ui.recordDescription.textContent = r.description || "";
        ui.recordBody.textContent = r.body || "";
        var editable = r.kind === "info";
        ui.edit.hidden = !editable;
        ui.del.hidden = !editable;
        ui.list.hidden = true;
        ui.form.hidden = true;
        ui.add.hidden = true;
        ui.searchForm.hidden = true;
        ui.record.hidden = false;
        ui.record.focus();
      },
      function (err) {
        ui.status.textContent = err.code === "not_found" ? "That record no longer exists." : "Could not read " + name + ": " + err.message;
        if (err.code === "not_found") load();
      }
    );
  }

  function showForm(record) {
    st.editing = record ? record.name : null;
    ui.formTitle.textContent = record ? "Edit " + record.name : "New note";
    ui.formError.hidden = true;
    ui.formError.replaceChildren();
    ui.name.value = record ? record.name : "";
    ui.name.readOnly = !!record;
    ui.description.value = record ? record.description || "" : "";
    ui.body.value = record ? record.body || "" : "";
    ui.scope.value = record ? record.scope : "session";
    ui.scope.disabled = !!record;
    ui.nameHint.hidden = !!record;
    updateNameHint();
    ui.list.hidden = true;
    ui.record.hidden = true;
    ui.add.hidden = true;
    ui.searchForm.hidden = true;
    ui.form.hidden = false;
    (record ? ui.description : ui.name).focus();
  }

  // The saved name under the Name field, as it is typed (the API takes only the derived form).
  function updateNameHint() {
    if (st.editing) return;
    var typed = ui.name.value.trim();
    var name = recordNameFrom(typed);
    ui.nameHint.replaceChildren();
    if (!typed) {
      ui.nameHint.append(NAME_HINT);
    } else if (name) {
      ui.nameHint.append("Saved as ", el("code", { class: "memory-name-derived", text: name }));
    } else {
      ui.nameHint.append("Use at least one letter a–z or digit: “" + typed + "” has none.");
    }
  }

  // Says what was wrong, field by field, in the form's words (the API's details), never only
  // "The request is not valid".
  function formErrors(err) {
    ui.formError.replaceChildren();
    var details = err.details && typeof err.details === "object" ? err.details : null;
    var fields = details ? Object.keys(details).filter((field) => field !== "max_bytes") : [];
    ui.formError.append(el("p", { text: fields.length ? "Not saved:" : "Not saved: " + (err.message || "error") }));
    fields.forEach(function (field) {
      var texts = [].concat(details[field]).map(function (t) {
        return typeof t === "string" ? t : JSON.stringify(t);
      });
      ui.formError.append(el("p", { dataset: { field: field }, text: (FIELD_LABELS[field] || field) + ": " + texts.join(" ") }));
    });
    ui.formError.hidden = false;
    ui.formError.focus();
  }

  ui.form.addEventListener("submit", function (event) {
    event.preventDefault();
    var editing = st.editing;
    var payload = { description: ui.description.value.trim(), body: ui.body.value };
    var request;
    if (editing) {
      request = api("PATCH", base() + encodeURIComponent(editing) + "/", payload);
    } else {
      var typed = ui.name.value.trim();
      payload.name = recordNameFrom(typed);
      payload.scope = ui.scope.value;
      if (!payload.name) {
        formErrors({
          details: { name: [typed ? "Use at least one letter a–z or digit: “" + typed + "” has none." : "Give the note a name."] },
        });
        return;
      }
      request = api("POST", base(), payload);
    }
    request.then(
      function (r) {
        st.query = "";
        ui.search.value = "";
        load().then(function () {
          read((r && r.name) || editing || payload.name);
        });
      },
      formErrors
    );
  });

  ui.name.addEventListener("input", updateNameHint);
  ui.cancel.addEventListener("click", function () {
    if (st.editing && st.current) read(st.current.name);
    else {
      showList();
      ui.add.focus();
    }
  });
  ui.add.addEventListener("click", function () {
    showForm(null);
  });
  ui.edit.addEventListener("click", function () {
    if (st.current) showForm(st.current);
  });
  ui.back.addEventListener("click", function () {
    showList();
    var item = ui.list.querySelector('[data-name="' + (st.current ? CSS.escape(st.current.name) : "") + '"] button');
    (item || ui.search).focus();
  });
  ui.del.addEventListener("click", function () {
    var r = st.current;
    if (!r || !window.confirm("Delete the note “" + r.name + "”? The bot will no longer be able to look it up.")) return;
    api("DELETE", base() + encodeURIComponent(r.name) + "/").then(
      function () {
        st.current = null;
        showList();
        load();
        ui.search.focus();
      },
      function (err) {
        ui.status.textContent = "Could not delete: " + err.message;
      }
    );
  });
  ui.searchForm.addEventListener("submit", function (event) {
    event.preventDefault();
    st.query = ui.search.value.trim();
    showList();
    load();
  });
  ui.search.addEventListener("input", function () {
    // Clearing the box goes back to the whole index without pressing Enter.
    if (!ui.search.value.trim() && st.query) {
      st.query = "";
      load();
    }
  });
  ui.toggle.addEventListener("click", function () {
    if (isOpen()) close();
    else open();
  });
  ui.close.addEventListener("click", function () {
    close();
  });
  ui.panel.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      if (!ui.form.hidden || !ui.record.hidden) {
        showList();
        ui.search.focus();
      } else close();
    }
  });

  // A memory.updated frame: the index changed (a save, a compaction snapshot, an edit).
  function onUpdated() {
    st.stale = true;
    if (isOpen() && ui.list.hidden === false) load();
  }

  // openRecord: the panel opened on one record (a reply's "What the model saw" links there).
  function openRecord(name) {
    open();
    return read(name);
  }

  return { setSession: setSession, open: open, close: close, isOpen: isOpen, onUpdated: onUpdated, reload: load, openRecord: openRecord };
}

// A search hit's excerpt: its messages one per line (CSS pre-line); an info record's matches come
// wrapped in **…** and are shown marked, never as stars.
function excerptParts(excerpt) {
  return excerpt.split("**").map((part, i) => (i % 2 ? el("mark", { text: part }) : part)).filter((p) => p !== "");
}

const FIELD_LABELS = { name: "Name", description: "Description", body: "Text", scope: "Visible in", kind: "Kind" };

// A record name (docs/memory.md: [a-z0-9_-]{1,80}) from whatever the user typed, as the built-in
// "remember" names its notes: "Dentist Appointment" -> "dentist_appointment", accents dropped
// ("Café" -> "cafe"), every other run of characters one "_". "" when nothing is left. A name the
// snapshots own ("snapshot_…") becomes "note_snapshot_…".
export function recordNameFrom(text) {
  var name = String(text || "")
    .normalize("NFKD")
    .replace(/\p{M}+/gu, "")
    .toLowerCase()
    .replace(/[^a-z0-9_-]+/g, "_")
    .replace(/_{2,}/g, "_")
    .replace(/^[_-]+|[_-]+$/g, "");
  if (name.indexOf("snapshot_") === 0) name = "note_" + name;
  return name.slice(0, 80).replace(/[_-]+$/, "");
}
