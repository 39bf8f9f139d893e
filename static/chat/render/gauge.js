/*
 * The context gauge: what the next model call would send, as a stacked bar over the budget with
 * the compaction marks on it; fed by context.updated frames, or over REST when none comes.
 */
import { el } from "../lib/dom.js";
import { fmtInt } from "../lib/format.js";
import { ui } from "../state/page.js";
import { gaugeBotQuery } from "../state/room.js";
import { sessionPath, state } from "../state/state.js";
import { api } from "../transport/api.js";
import { foldUpdate } from "./fold.js";

let contextTimer = null; // the REST fallback for a context.updated that may not come
let contextReads = 0; // the number of the newest context read

// The gauge is a stacked bar over the budget B: one segment per part of what the next model
// call would send, with the compaction marks drawn on it (docs/compaction.md's target, soft and hard, said
// as a person would) and a legend with the numbers, so nothing needs a hover to be read.
const GAUGE_PARTS = [
  ["system", "System prompt"],
  ["pinned", "Pinned"],
  ["summaries", "Summaries"],
  ["memory_index", "Memory index"],
  ["history", "History"],
];
const GAUGE_MARKS = [
  ["target", "Compaction lands at", "compaction aims to get down to this"],
  ["soft", "Compacts in the background at", "past this the bot compacts older messages after replying"],
  ["hard", "Compacts before replying at", "past this the next reply waits until older messages are compacted"],
];

function pct(n, of) {
  return Math.max(0, Math.min(100, (100 * n) / of)).toFixed(2) + "%";
}

export function renderContext(ctx) {
  if (!ctx || typeof ctx.budget !== "number" || typeof ctx.pressure !== "number" || ctx.budget <= 0) {
    return;
  }
  var parts = ctx.parts && typeof ctx.parts === "object" ? ctx.parts : {};
  var segments = [];
  var legend = [];
  GAUGE_PARTS.forEach(function (entry) {
    var key = entry[0];
    var value = typeof parts[key] === "number" ? parts[key] : 0;
    segments.push(
      el("span", { class: "gauge-seg gauge-" + key, dataset: { part: key }, style: { width: pct(value, ctx.budget) } })
    );
    legend.push(
      el(
        "li",
        { class: "gauge-item", dataset: { part: key } },
        el("span", { class: "gauge-swatch gauge-" + key, "aria-hidden": "true" }),
        el("span", { class: "gauge-name", text: entry[1] }),
        " ",
        el("span", { class: "gauge-num", text: fmtInt(value) })
      )
    );
  });
  GAUGE_MARKS.forEach(function (entry) {
    var key = entry[0];
    if (typeof ctx[key] !== "number") return;
    segments.push(
      el("span", {
        class: "gauge-mark gauge-mark-" + key,
        dataset: { mark: key },
        style: { left: pct(ctx[key], ctx.budget) },
        title: entry[1] + " " + fmtInt(ctx[key]) + ": " + entry[2],
      })
    );
    legend.push(
      el(
        "li",
        { class: "gauge-item gauge-item-mark", dataset: { mark: key }, title: entry[2] },
        el("span", { class: "gauge-tick gauge-mark-" + key, "aria-hidden": "true" }),
        el("span", { class: "gauge-name", text: entry[1] }),
        " ",
        el("span", { class: "gauge-num", text: fmtInt(ctx[key]) })
      )
    );
  });
  ui.gaugeBar.replaceChildren.apply(ui.gaugeBar, segments);
  ui.gaugeLegend.replaceChildren.apply(ui.gaugeLegend, legend);
  var level =
    typeof ctx.hard === "number" && ctx.pressure >= ctx.hard
      ? "hard"
      : typeof ctx.soft === "number" && ctx.pressure >= ctx.soft
        ? "soft"
        : "ok";
  ui.gauge.dataset.level = level;
  ui.gauge.dataset.pressure = String(ctx.pressure);
  ui.gaugeTotal.textContent =
    fmtInt(ctx.pressure) +
    " of " +
    fmtInt(ctx.budget) +
    " tokens (" +
    Math.round((100 * ctx.pressure) / ctx.budget) +
    "%)" +
    (level === "hard" ? " — compaction needed" : level === "soft" ? " — compaction due" : "");
  ui.gauge.hidden = false;
  foldUpdate();
}

// No chat open: no gauge (and, on a phone, no folded line for it).
export function gaugeHide() {
  ui.gauge.hidden = true;
  foldUpdate();
}

export function refreshContext(epoch) {
  if (state.sessionId === null) return;
  // Rooms: the seat of the bot picked above the gauge (its budget, its view). Only the newest
  // read is drawn, and only for the seat still picked: a late answer for a seat the user just
  // left (a refresh asked for before they picked another bot) never draws over the right one.
  var query = gaugeBotQuery();
  var read = ++contextReads;
  api("GET", sessionPath("context/") + query).then(
    function (ctx) {
      if (epoch === state.epoch && read === contextReads && query === gaugeBotQuery()) renderContext(ctx);
    },
    function () {
      /* the meter is informational; leave it as it was */
    }
  );
}

// After a turn or a compaction the server normally pushes context.updated; if it does not
// arrive shortly, ask for the numbers over REST.
export function scheduleContextRefresh(delay) {
  clearTimeout(contextTimer);
  var epoch = state.epoch;
  contextTimer = setTimeout(function () {
    refreshContext(epoch);
  }, delay === undefined ? 1500 : delay);
}

// A context.updated frame was drawn (or the chat closed): the fallback is not needed, and a read
// asked for before it would answer with older numbers, so it is not drawn either.
export function contextRefreshCancel() {
  clearTimeout(contextTimer);
  contextReads++;
}
