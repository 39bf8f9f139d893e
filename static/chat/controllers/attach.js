/*
 * Attachments in the composer: the Attach button, drag-and-drop and pasting files upload each
 * file at once (POST sessions/{id}/attachments/), show it as a chip that can be removed (with
 * the size limits beside the chips; a file over the per-file limit is refused before it is
 * sent, the server's refusals are shown in its plain words), and the next send
 * carries their ids (POST messages with attachments: [ids]). A PDF's text is read by the server
 * after the upload (202, status "processing"): its chip says so and the Send button waits until
 * it is "ready" (GET attachments/{id}/status/); a "failed" one is removed and its error (the
 * limit it hit) shown. In the transcript a message's
 * attached files show as download links instead of their text (the model reads the text).
 */
import { byId, el } from "../lib/dom.js";
import { scheduleContextRefresh } from "../render/gauge.js";
import { hideError, showError } from "../render/status.js";
import { hooks } from "../state/hooks.js";
import { API, ui } from "../state/page.js";
import { sessionPath, state } from "../state/state.js";
import { api, csrfToken, describeError } from "../transport/api.js";

// Uploaded, not yet sent: {id, name, size, kind, status, error}.
const waiting = [];
let uploads = 0;

const input = byId("attach-input");
const list = byId("attach-list");
const button = byId("attach-button");
const limits = byId("attach-limits");
const maxBytes = limits ? Number(limits.dataset.maxBytes) || 0 : 0;

// The files waiting for the open chat (a file uploaded to another chat stays with it).
function current() {
  return waiting.filter(function (a) {
    return a.session === state.sessionId;
  });
}

export function attachmentsWaiting() {
  return current().length > 0;
}

// A waiting file whose text the server is still reading: the send waits for it.
export function attachmentsProcessing() {
  return current().some(function (a) {
    return a.status === "processing";
  });
}

const POLL_MS = 1000;

function watch(attachment) {
  setTimeout(function () {
    if (waiting.indexOf(attachment) === -1) return; // removed meanwhile
    api("GET", "attachments/" + attachment.id + "/status/")
      .then(function (now) {
        attachment.status = now.status;
        attachment.error = now.error;
        if (now.status === "failed") {
          waiting.splice(waiting.indexOf(attachment), 1);
          showError(now.error);
        } else if (now.status === "processing") {
          watch(attachment);
        }
      })
      .catch(function () {
        watch(attachment);
      })
      .finally(function () {
        renderList();
        ui.composer.dispatchEvent(new Event("input"));
      });
  }, POLL_MS);
}

export function renderAttachments() {
  renderList();
}

function renderList() {
  if (!list) return;
  var files = current();
  list.replaceChildren(
    ...files.map(function (a) {
      return el(
        "li",
        { class: "attach-chip" },
        el("span", {
          text: a.name + " (" + sizeText(a.size) + (a.status === "processing" ? ", reading…" : "") + ")",
        }),
        el("button", {
          type: "button",
          class: "button-icon",
          "aria-label": "Remove " + a.name,
          text: "×",
          onclick: function () {
            waiting.splice(waiting.indexOf(a), 1);
            ui.composer.dispatchEvent(new Event("input"));
            ui.composer.focus();
          },
        })
      );
    })
  );
  list.hidden = files.length === 0 && uploads === 0;
  if (limits) limits.hidden = list.hidden;
  list.setAttribute("aria-busy", uploads > 0 || attachmentsProcessing() ? "true" : "false");
}

function sizeText(bytes) {
  if (bytes < 1024) return bytes + " B";
  if (bytes < 1024 * 1024) return Math.round(bytes / 1024) + " KB";
  return (bytes / (1024 * 1024)).toFixed(1) + " MB";
}

// 10485760 -> "10,485,760", as the server words its limits.
function grouped(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function upload(file) {
  if (state.sessionId === null) {
    showError("Open or start a chat before attaching a file.");
    return Promise.resolve();
  }
  if (maxBytes && file.size > maxBytes) {
    showError(file.name + ": the file is larger than the " + grouped(maxBytes) + " bytes a file may have.");
    return Promise.resolve();
  }
  var form = new FormData();
  form.append("file", file, file.name);
  var sessionId = state.sessionId;
  uploads += 1;
  renderList();
  return fetch(API + "sessions/" + state.sessionId + "/attachments/", {
    method: "POST",
    credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: form,
  })
    .then(function (res) {
      return res.json().then(function (body) {
        if (!res.ok) {
          var error = (body && body.error) || {};
          throw new Error(file.name + ": " + (error.message || "the upload failed (" + res.status + ")."));
        }
        return body;
      });
    })
    .then(function (attachment) {
      attachment.session = sessionId;
      waiting.push(attachment);
      if (attachment.status === "processing") watch(attachment);
    })
    .catch(function (err) {
      showError(err.message || String(err));
    })
    .finally(function () {
      uploads -= 1;
      renderList();
      ui.composer.dispatchEvent(new Event("input"));
    });
}

function uploadAll(files) {
  hideError();
  return Promise.all(Array.from(files || []).map(upload));
}

// Send the composer's text with the waiting files (over REST: the reply streams over the socket).
export function sendWithAttachments(content) {
  var sent = current();
  var ids = sent.map(function (a) {
    return a.id;
  });
  sent.forEach(function (a) {
    waiting.splice(waiting.indexOf(a), 1);
  });
  renderList();
  return api("POST", sessionPath("messages/"), { content: content, attachments: ids })
    .catch(function (err) {
      if (!(err.details && err.details.user_message)) {
        // Not stored: the files are still waiting to be sent.
        waiting.push(...sent);
        renderList();
        if (!ui.composer.value.trim()) ui.composer.value = content;
      }
      showError(describeError(err));
    })
    .finally(function () {
      hooks.resync(false);
      scheduleContextRefresh(300);
    });
}

export function attachBind() {
  if (!input || !button) return;
  button.addEventListener("click", function () {
    input.click();
  });
  input.addEventListener("change", function () {
    uploadAll(input.files).then(function () {
      input.value = "";
      ui.composer.focus();
    });
  });
  ui.composerForm.addEventListener("dragover", function (event) {
    if (event.dataTransfer && Array.from(event.dataTransfer.types || []).indexOf("Files") !== -1) {
      event.preventDefault();
      ui.composerForm.classList.add("drop-target");
    }
  });
  ui.composerForm.addEventListener("dragleave", function () {
    ui.composerForm.classList.remove("drop-target");
  });
  ui.composerForm.addEventListener("drop", function (event) {
    ui.composerForm.classList.remove("drop-target");
    if (!event.dataTransfer || !event.dataTransfer.files.length) return;
    event.preventDefault();
    uploadAll(event.dataTransfer.files);
  });
  // Pasted files (a screenshot, a file copied in the file manager); pasted text stays text.
  ui.composer.addEventListener("paste", function (event) {
    var files = event.clipboardData ? Array.from(event.clipboardData.files || []) : [];
    if (!files.length) return;
    event.preventDefault();
    uploadAll(files);
  });
}
