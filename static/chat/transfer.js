/*
 * Export and import: the open chat's export links (Markdown, lossless JSON), and the import form
 * (POST /api/v1/import/ with the chosen bot). The POST stores the file and answers 202 with an
 * import job; a worker imports it. The bar shows the upload (the browser's own progress events),
 * then how far the worker has read the file (the job's status URL, polled until the job is done
 * or failed); the end is the result or the error, in words.
 */
import { API } from "./page.js";
import { csrfToken } from "./api.js";
import { byId } from "./dom.js";
import { loadSessions } from "./sidebar.js";
import { openSession } from "./session.js";
import { state } from "./state.js";

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

function finished(job) {
  submit.disabled = false;
  if (job.status === "failed") {
    show(null, "Import failed: " + ((job.error && job.error.message) || "unknown error."));
    return;
  }
  var result = job.result || {};
  show(100, resultWords(result));
  var first = (result.imported || [])[0] || (result.skipped || [])[0];
  loadSessions(first ? first.session : undefined).then(function () {
    if (first) openSession(first.session);
  });
}

function reading(job) {
  var percent = job.bytes_total ? (100 * job.bytes_read) / job.bytes_total : 0;
  var words = job.status === "queued" ? "Waiting for a worker…" : "Importing… " + Math.round(percent) + " % read";
  show(50 + percent / 2, words);
}

/* Poll the job until it ends; a poll that fails (network) is tried again. */
function follow(job) {
  if (job.status === "done" || job.status === "failed") {
    finished(job);
    return;
  }
  reading(job);
  setTimeout(function () {
    fetch(job.status_url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (res) {
        if (res.status === 404) throw new Error("gone");
        return res.ok ? res.json() : job;
      })
      .then(follow, function (error) {
        if (error && error.message === "gone") {
          submit.disabled = false;
          show(null, "Import failed: the import is no longer known to the server.");
        } else {
          follow(job);
        }
      });
  }, POLL_MS);
}

function upload(picked) {
  var data = new FormData();
  data.append("file", picked);
  data.append("bot", state.botId);
  var xhr = new XMLHttpRequest();
  xhr.upload.addEventListener("progress", function (event) {
    if (event.lengthComputable) show((50 * event.loaded) / event.total, "Uploading…");
  });
  xhr.upload.addEventListener("load", function () {
    show(50, "Importing…");
  });
  xhr.addEventListener("loadend", function () {
    if (xhr.status === 202) {
      follow(JSON.parse(xhr.responseText));
      return;
    }
    submit.disabled = false;
    show(null, xhr.status ? errorWords(xhr) : "Import failed: the server could not be reached.");
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
