import { el } from "../lib/dom.js";
import { fmtInt } from "../lib/format.js";
import { hooks } from "../state/hooks.js";
import { ui } from "../state/page.js";
import { participantBot, roomBotIds, roomReady } from "../state/room.js";
import { sessionPath, state } from "../state/state.js";
import { api, asList } from "../transport/api.js";
import { avatar } from "./avatars.js";
import { insertNode, withScroll } from "./transcript.js";

// Compaction markers: one per summary, after the last message it covers, built from the
// summaries and compaction events over REST, so automatic compactions show too and survive a
// reload. Expanding one shows the summary text, its retention score and the facts it missed.

const markers = { summaries: [], events: [], loaded: false };

export function markersReset() {
  hooks.markerActionsReset();
  markers.summaries = [];
  markers.events = [];
  markers.loaded = false;
}

// Whether this chat's markers were read (a new compaction notice then asks for them again).
export function markersAreLoaded() {
  return markers.loaded;
}

// Rows of several reads, each once (by id), in the order first seen.
function unique(lists) {
  var seen = new Map();
  lists.forEach(function (list) {
    asList(list).forEach(function (row) {
      if (row && !seen.has(String(row.id))) seen.set(String(row.id), row);
    });
  });
  return Array.from(seen.values());
}

export function loadMarkers(epoch) {
  if (state.sessionId === null) return Promise.resolve();
  var sessionId = state.sessionId;
  // A room: every participant's summaries and events (?bot=, docs/rooms.md), each read once.
  return roomReady()
    .then(function () {
      var bots = roomBotIds();
      var queries = bots.length > 1 ? bots.map(function (id) { return "bot=" + encodeURIComponent(id); }) : [""];
      return Promise.all(
        queries.map(function (q) {
          return Promise.all([
            api("GET", sessionPath("summaries/") + (q ? "?" + q : "")),
            api("GET", "compaction-events/?session=" + encodeURIComponent(sessionId) + (q ? "&" + q : "")),
          ]);
        })
      );
    })
    .then(
    function (results) {
      if (epoch !== state.epoch) return;
      markers.loaded = true;
      markers.summaries = unique(results.map(function (r) { return r[0]; }));
      markers.events = unique(results.map(function (r) { return r[1]; }));
      withScroll(renderMarkers);
    },
    function () {
      /* markers are context, not content: the transcript stands without them */
    }
  );
}

const TRIGGER_WORDS = {
  manual: "manual (/compact)",
  soft: "automatic (background)",
  hard: "automatic (before a reply)",
  fusion: "automatic (summaries merged)",
};

function renderMarkers() {
  // The markers drawn before, by summary. One that would be drawn the same stays where it is,
  // untouched: after a compaction the page reads the markers up to three times, and taking an
  // element out of the page while the reader presses it loses the click (the browser drops a
  // click whose pressed element left the document, even if it comes back). Changed markers
  // are drawn anew, open if the reader had them open; vanished ones go.
  var before = new Map();
  ui.transcript.querySelectorAll(".compaction-marker").forEach(function (n) {
    before.set(n.dataset.summaryId, n);
  });
  var eventBySummary = new Map();
  markers.events.forEach(function (e) {
    if (e.summary !== null && e.summary !== undefined) eventBySummary.set(String(e.summary), e);
  });
  var drawn = markers.summaries
    .slice()
    .sort(function (a, b) {
      return a.last_seq - b.last_seq || a.id - b.id;
    })
    .map(function (summary) {
      var node = buildMarker(summary, eventBySummary.get(String(summary.id)));
      // As built, before the page touches it (focus handling, the actions' state).
      node._drawn = node.className + "|" + JSON.stringify(node.dataset) + "|" + node.innerHTML;
      var old = before.get(String(summary.id));
      if (old && sameMarker(old, node)) return old;
      if (old && old.open) node.open = true;
      return node;
    });
  before.forEach(function (n) {
    if (drawn.indexOf(n) < 0) n.remove();
  });
  drawn.forEach(function (node) {
    if (!node.isConnected) insertNode(node, Number(node.dataset.seq));
  });
}

function sameMarker(a, b) {
  return a._drawn !== undefined && a._drawn === b._drawn;
}

// What the bot does with a summary, by its status (docs/compaction.md): only an active one is sent.
const SUMMARY_HEADINGS = {
  active: "Summary the bot now sees",
  superseded: "Earlier summary, merged into a later one (the bot no longer sees it)",
  reverted: "Undone summary: the bot sees these messages in full again",
};

function buildMarker(summary, event) {
  var before = event ? event.tokens_before : summary.source_tokens;
  var after = event ? event.tokens_after : summary.token_count;
  var bits = [TRIGGER_WORDS[summary.trigger] || summary.trigger || "compaction"];
  if (typeof summary.retention === "number") bits.push("retention " + Math.round(summary.retention * 100) + "%");
  if (summary.status === "superseded") bits.push("merged into a later summary");
  if (summary.status === "reverted") bits.push("undone");
  var head = el(
    "summary",
    { class: "marker-head" },
    el("span", {
      class: "marker-title",
      text:
        "Compacted messages " +
        summary.first_seq +
        "–" +
        summary.last_seq +
        " · " +
        fmtInt(before) +
        " → " +
        fmtInt(after) +
        " tokens",
    }),
    el("span", { class: "marker-meta", text: bits.join(" · ") })
  );
  // In a room each bot compacts its own view: the marker names whose summary it is.
  var bot = participantBot(summary.bot);
  if (bot && roomBotIds().length > 1) {
    head.prepend(el("span", { class: "marker-bot", dataset: { botSlug: bot.slug || "" } }, avatar(bot), bot.name));
  }

  var facts = el("dl", { class: "marker-facts" });
  function fact(name, value) {
    if (value === null || value === undefined || value === "") return;
    facts.append(el("dt", { text: name }), el("dd", { text: value }));
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
  var text = el(
    "div",
    { class: "marker-summary" },
    el("h3", { text: SUMMARY_HEADINGS[summary.status] || "Summary (" + summary.status + ")" }),
    el("p", { class: "marker-summary-text", text: summary.text || "" })
  );
  var missing = Array.isArray(summary.missing_facts) ? summary.missing_facts : [];
  var missingBox = el(
    "div",
    { class: "marker-missing" },
    el("h3", {
      text: missing.length ? "Facts the summary missed (" + missing.length + ")" : "Facts the summary missed",
    }),
    missing.length
      ? el(
          "ul",
          null,
          missing.map(function (f) {
            return el("li", { text: typeof f === "string" ? f : JSON.stringify(f) });
          })
        )
      : el("p", { class: "muted", text: "None found." })
  );
  return el(
    "details",
    {
      class:
        "compaction-marker" +
        (summary.status === "superseded" ? " is-superseded" : "") +
        (summary.status === "reverted" ? " is-reverted" : ""),
      dataset: {
        seq: String(summary.last_seq + 0.5),
        summaryId: String(summary.id),
        trigger: summary.trigger || "",
        botSlug: (bot && bot.slug) || "",
      },
    },
    head,
    el("div", { class: "marker-body" }, facts, text, missingBox, hooks.markerActions(summary))
  );
}
