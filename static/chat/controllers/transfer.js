/*
 * Export and import: the open chat's export links (Markdown, lossless JSON), and the import form
 * (POST /api/v1/import/ with the chosen bot). The bar shows the upload (the browser's own
 * progress events), then how far the server has read the file (GET /api/v1/import/progress/,
 * polled while the POST runs); the POST's answer is the result or the error, in words.
 */
import { byId } from "../lib/dom.js";
import { hooks } from "../state/hooks.js";
import { API } from "../state/page.js";
import { state } from "../state/state.js";
import { csrfToken } from "../transport/api.js";
import { loadSessions } from "./sidebar.js";

const POLL_MS = 400;

const links = byId("export-links");
const markdown = byId("export-markdown");
const json = byId("export-json");
const form = byId("import-form");
const file = byId("import-file");
const submit = byId("import-submit");
const bar = byId("import-progress");
const status = byId("import-status");

export function exportLinksSet(sessionId) {
  if (!links) return;
  links.hidden = sessionId === null || sessionId === undefined;
  if (links.hidden) return;
  var base = API + "sessions/" + encodeURIComponent(sessionId) + "/export/?format=";
  markdown.href = base + "markdown";
  json.href = base + "json";
}

function show(percent, text) {
  bar.hidden = percent === null;
  if (percent !== null) bar.value = Math.max(0, Math.min(100, Math.round(percent)));
  status.textContent = text;
}

function resultWords(result) {
  var imported = result.imported || [];
  var skipped = result.skipped || [];
  var words = "Imported " + imported.length + (imported.length === 1 ? " chat" : " chats");
  if (skipped.length) words += "; " + skipped.length + " already imported before, skipped";
  return words + ".";
}

function errorWords(xhr) {
  try {
    var body = JSON.parse(xhr.responseText);
    if (body && body.error) return "Import failed: " + body.error.message;
  } catch (e) {
    /* not JSON */
  }
  return "Import failed (HTTP " + xhr.status + ").";
}

function upload(picked) {
  var key = "imp-" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  var data = new FormData();
  data.append("file", picked);
  data.append("bot", state.botId);
  data.append("progress", key);
  var xhr = new XMLHttpRequest();
  var polling = null;
  function poll() {
    fetch(API + "import/progress/?key=" + encodeURIComponent(key), { credentials: "same-origin" })
      .then(function (res) {
        return res.json();
      })
      .then(function (p) {
        if (polling === null || !p || !p.bytes_total) return;
        show(50 + (50 * p.bytes_read) / p.bytes_total, "Importing… " + Math.round((100 * p.bytes_read) / p.bytes_total) + " % read");
      })
      .catch(function () {});
  }
  xhr.upload.addEventListener("progress", function (event) {
    if (event.lengthComputable) show((50 * event.loaded) / event.total, "Uploading…");
  });
  xhr.upload.addEventListener("load", function () {
    show(50, "Importing…");
    polling = setInterval(poll, POLL_MS);
  });
  xhr.addEventListener("loadend", function () {
    clearInterval(polling);
    polling = null;
    submit.disabled = false;
    if (xhr.status === 201) {
      var result = JSON.parse(xhr.responseText);
      show(100, resultWords(result));
      var first = (result.imported || [])[0] || (result.skipped || [])[0];
      loadSessions(first ? first.session : undefined).then(function () {
        if (first) hooks.openSession(first.session);
      });
    } else {
      show(null, xhr.status ? errorWords(xhr) : "Import failed: the server could not be reached.");
    }
  });
  xhr.open("POST", API + "import/");
  xhr.setRequestHeader("X-CSRFToken", csrfToken());
  xhr.setRequestHeader("Accept", "application/json");
  submit.disabled = true;
  show(0, "Uploading…");
  xhr.send(data);
}

export function transferBind() {
  if (!form) return;
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var picked = file.files && file.files[0];
    if (!picked) {
      show(null, "Choose a file to import first.");
      return;
    }
    if (state.botId === null) {
      show(null, "Choose the bot these chats continue with first.");
      return;
    }
    upload(picked);
  });
}
