/*
 * A compaction marker's actions (docs/context-records.md): "Undo" (POST summaries/{id}/revert/ — refused in
 * plain words when the restored messages would push the context past the hard threshold, with
 * the offer "Undo and compact the rest"), "Re-summarise…" with a focus (POST .../resummarise/),
 * and "Use the full text next turn" (POST sessions/{id}/expand/). After each, the transcript,
 * the markers and the gauge are read again (the server also pushes context.updated).
 */
import { el } from "../lib/dom.js";
import { fmtInt } from "../lib/format.js";
import { refreshContext } from "../render/gauge.js";
import { loadMarkers } from "../render/markers.js";
import { sessionPath, state } from "../state/state.js";
import { api, describeError } from "../transport/api.js";
import { resync } from "./session.js";

function summaryPath(summary, action) {
  return "summaries/" + encodeURIComponent(summary.id) + "/" + action + "/";
}

// Everything an undo, a re-summary or an expansion changes, read again.
function reread(epoch) {
  if (epoch !== state.epoch) return;
  resync(true); // messages' `compacted` flags changed
  loadMarkers(epoch);
  refreshContext(epoch);
}

// What the last action on each summary said: the markers are redrawn after it, and the words
// stay with the redrawn marker.
const said = new Map(); // summary id -> {text, refused}

export function markerActionsReset() {
  said.clear();
}

function say(status, text, refused) {
  status.textContent = text || "";
  status.classList.toggle("is-refused", !!refused);
  var id = status.dataset.summaryId;
  if (id) said.set(id, { text: text || "", refused: !!refused });
}

// The actions of one marker; null when its summary is not one the user can act on.
export function markerActions(summary) {
  var status = el("p", {
    class: "marker-action-status",
    role: "status",
    "aria-live": "polite",
    dataset: { summaryId: String(summary.id) },
  });
  var before = said.get(String(summary.id));
  if (before) {
    status.textContent = before.text;
    status.classList.toggle("is-refused", before.refused);
  }
  var box = el("div", { class: "marker-actions" });
  if (summary.status === "reverted") {
    if (summary.held) {
      box.append(
        button("Let automatic compaction take it again", "marker-release", function (b) {
          release(summary, b, status);
        })
      );
    }
    box.append(status);
    return box.childElementCount > 1 ? box : null;
  }
  if (summary.status !== "active") return null;
  var focusForm = resummariseForm(summary, status);
  box.append(
    button("Undo", "button-primary marker-undo", function (b) {
      undo(summary, b, status, false);
    }),
    button("Re-summarise…", "marker-resummarise-open", function (b) {
      focusForm.hidden = !focusForm.hidden;
      b.setAttribute("aria-expanded", focusForm.hidden ? "false" : "true");
      if (!focusForm.hidden) focusForm.querySelector("input").focus();
    }),
    button("Use the full text next turn", "marker-expand", function (b) {
      expand(summary, b, status);
    }),
    focusForm,
    status
  );
  box.querySelector(".marker-resummarise-open").setAttribute("aria-expanded", "false");
  return box;
}

function button(text, className, onClick) {
  var b = el("button", { type: "button", class: "button button-small " + className, text: text });
  b.addEventListener("click", function () {
    onClick(b);
  });
  return b;
}

function undo(summary, b, status, compactRest) {
  var epoch = state.epoch;
  b.disabled = true;
  say(status, compactRest ? "Undoing and compacting the rest…" : "Undoing…");
  api("POST", summaryPath(summary, "revert"), compactRest ? { compact_rest: true } : {})
    .then(function (result) {
      if (epoch !== state.epoch) return;
      var restored = (result && result.restored) || {};
      var words =
        "Undone: messages " +
        result.first_seq +
        "–" +
        result.last_seq +
        " are back in the context (" +
        fmtInt(restored.tokens) +
        " tokens; the context is now " +
        fmtInt(result.tokens_after) +
        " tokens). Automatic compaction leaves them alone until you let it.";
      if (result.compaction && result.compaction.outcome) {
        words += " The rest: " + (result.compaction.outcome === "compacted" ? "compacted" : result.compaction.outcome) + ".";
      }
      say(status, words);
      reread(epoch);
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      b.disabled = false;
      var details = (err && err.details) || {};
      if (err.code === "validation_error" && typeof details.tokens_after === "number") {
        refuseOverHard(summary, status, details);
        return;
      }
      say(status, describeError(err), true);
    });
}

// The refusal over the hard threshold, in plain words, with the offer that works instead.
function refuseOverHard(summary, status, details) {
  status.replaceChildren(
    el("span", {
      text:
        "Not undone: bringing messages " +
        summary.first_seq +
        "–" +
        summary.last_seq +
        " back would make the context " +
        fmtInt(details.tokens_after) +
        " tokens" +
        (typeof details.hard === "number" ? ", at or past the " + fmtInt(details.hard) + " where the bot must compact before it can reply" : ", past the point where the bot must compact before it can reply") +
        ". Nothing was changed. ",
    }),
    button("Undo and compact the rest", "button-primary marker-undo-rest", function (b) {
      undo(summary, b, status, true);
    })
  );
  status.classList.add("is-refused");
}

function resummariseForm(summary, status) {
  var inputId = "marker-focus-" + summary.id;
  var input = el("input", {
    type: "text",
    id: inputId,
    maxLength: 500,
    autocomplete: "off",
    placeholder: "e.g. the dates and who agreed to what",
  });
  var submit = el("button", { type: "submit", class: "button button-small button-primary", text: "Re-summarise" });
  var form = el(
    "form",
    { class: "marker-resummarise", hidden: true, novalidate: true },
    el("label", { htmlFor: inputId, text: "Keep above all (optional)" }),
    input,
    submit
  );
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var epoch = state.epoch;
    submit.disabled = true;
    say(status, "Re-summarising messages " + summary.first_seq + "–" + summary.last_seq + "…");
    api("POST", summaryPath(summary, "resummarise"), { focus: input.value })
      .then(function (result) {
        if (epoch !== state.epoch) return;
        var refused = result.outcome !== "compacted";
        say(status, result.message || (refused ? "The summary is unchanged." : "Re-summarised."), refused);
        if (!refused) reread(epoch);
      })
      .catch(function (err) {
        if (epoch === state.epoch) say(status, describeError(err), true);
      })
      .finally(function () {
        submit.disabled = false;
      });
  });
  return form;
}

function expand(summary, b, status) {
  var epoch = state.epoch;
  b.disabled = true;
  api("POST", sessionPath("expand/"), { summary: summary.id })
    .then(function (result) {
      if (epoch !== state.epoch) return;
      say(
        status,
        "The next reply sees messages " +
          result.first_seq +
          "–" +
          result.last_seq +
          " in full (" +
          fmtInt(result.tokens) +
          " tokens) instead of this summary; later replies see the summary again."
      );
      refreshContext(epoch);
    })
    .catch(function (err) {
      if (epoch === state.epoch) say(status, describeError(err), true);
    })
    .finally(function () {
      b.disabled = false;
    });
}

function release(summary, b, status) {
  var epoch = state.epoch;
  b.disabled = true;
  api("POST", summaryPath(summary, "release"))
    .then(function () {
      if (epoch !== state.epoch) return;
      say(status, "Automatic compaction may summarise these messages again.");
      reread(epoch);
    })
    .catch(function (err) {
      if (epoch !== state.epoch) return;
      b.disabled = false;
      say(status, describeError(err), true);
    });
}
