/*
 * A reply that failed because its message is too long for the bot's context (context_too_large)
 * offers the fix, not a Retry that would fail the same way: how many tokens over (from
 * GET messages/{id}/fit/), "Compact and retry" (runs /compact, then sends the message again only
 * if it now fits) and "Edit to shorten" (the text back in the composer, with the numbers).
 */
import { fmtInt } from "../lib/format.js";
import { splitAttachments } from "../render/attachlinks.js";
import { scheduleContextRefresh } from "../render/gauge.js";
import { loadMarkers } from "../render/markers.js";
import { showError } from "../render/status.js";
import { upsertMessage, withScroll } from "../render/transcript.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { sessionPath, state } from "../state/state.js";
import { api, describeError } from "../transport/api.js";
import { autoResize, updateComposer } from "./composer.js";
import { questionOf, sendContent } from "./sending.js";

const fits = new Map(); // user message id -> promise of its fit

export function tooLongReset() {
  fits.clear();
}

function fitOf(question, fresh) {
  var id = String(question.id);
  if (fresh || !fits.has(id)) {
    var request = api("GET", "messages/" + encodeURIComponent(question.id) + "/fit/");
    request.catch(function () {
      fits.delete(id);
    });
    fits.set(id, request);
  }
  return fits.get(id);
}

export function fitWords(fit) {
  if (fit.fits) return "It fits now: " + fmtInt(fit.required_tokens) + " of the " + fmtInt(fit.budget_tokens) + " tokens a call may send.";
  return (
    fmtInt(fit.over_tokens) +
    " tokens over: with the system prompt, pinned messages and summaries it needs " +
    fmtInt(fit.required_tokens) +
    " tokens, and a call may send " +
    fmtInt(fit.budget_tokens) +
    "."
  );
}

// Fills the reply's numbers line (a <p> in its error box) once the numbers are known.
export function showFit(reply, line) {
  var question = questionOf(reply);
  if (!question || question.id === undefined) return;
  var epoch = state.epoch;
  fitOf(question, false).then(
    function (fit) {
      if (epoch !== state.epoch) return;
      line.textContent = fitWords(fit);
      line.dataset.over = String(fit.over_tokens);
      line.hidden = false;
    },
    function () {
      /* the numbers are a help: the advice stands without them */
    }
  );
}

export function compactAndRetry(reply, button) {
  var question = questionOf(reply);
  if (!question) {
    showError("Could not find the message this reply answered; type it again.");
    return;
  }
  var epoch = state.epoch;
  button.disabled = true;
  button.textContent = "Compacting…";
  api("POST", sessionPath("messages/"), { content: "/compact" })
    .then(function (result) {
      if (epoch !== state.epoch) return null;
      withScroll(function () {
        if (result && result.user_message) upsertMessage(result.user_message);
        if (result && result.notice) upsertMessage(result.notice);
      });
      if (result && result.compaction && result.compaction.outcome === "compacted") {
        hooks.resync(true);
        loadMarkers(epoch);
      }
      scheduleContextRefresh(300);
      return fitOf(question, true);
    })
    .then(function (fit) {
      if (!fit || epoch !== state.epoch) return;
      if (fit.fits) {
        sendContent(question.content);
        return;
      }
      button.textContent = "Compact and retry";
      button.disabled = false;
      showError("Still too long after compacting: " + fitWords(fit) + " Edit it to shorten it.");
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      button.textContent = "Compact and retry";
      button.disabled = false;
      showError(describeError(err));
    });
}

export function editToShorten(reply) {
  var question = questionOf(reply);
  if (!question) {
    showError("Could not find the message this reply answered; type it again.");
    return;
  }
  // A message with files: the typed text comes back; the files' text is what made it too long.
  var attached = splitAttachments(question.content || "");
  ui.composer.value = attached ? attached.text : question.content || "";
  autoResize();
  updateComposer();
  ui.composerNote.textContent = attached
    ? "The attached files make it too long: attach a shorter part of them."
    : "Shorten it before sending.";
  ui.composerNote.hidden = false;
  if (attached) {
    ui.composer.focus();
    return;
  }
  var epoch = state.epoch;
  fitOf(question, false).then(function (fit) {
    if (epoch === state.epoch && !ui.composerNote.hidden && !fit.fits) {
      ui.composerNote.textContent = "Shorten it by at least " + fmtInt(fit.over_tokens) + " tokens: " + fitWords(fit);
    }
  }, function () {});
  ui.composer.focus();
  ui.composer.setSelectionRange(ui.composer.value.length, ui.composer.value.length);
}
