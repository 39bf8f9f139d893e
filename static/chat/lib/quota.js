/*
 * A spent daily token limit in plain words: whose limit, how much of it is used, and when it
 * resets, from the error's details {resets_at, limit, used, scope} (docs/connections.md "Daily
 * token limits"). The reply's failure box, the error banner and a bubble that was not sent all
 * say the same.
 */
import { fmtInt } from "./format.js";

// "Fri 4 Dec, 01:00" in the reader's own time zone and language.
export function fmtReset(iso) {
  var d = new Date(iso);
  if (isNaN(d.getTime())) return "";
  return d.toLocaleString([], {
    weekday: "short",
    day: "numeric",
    month: "short",
    hour: "2-digit",
    minute: "2-digit",
    timeZoneName: "short",
  });
}

export function quotaWords(details) {
  var d = details && typeof details === "object" ? details : {};
  var whose = d.scope === "key" ? "This API key's daily token limit" : "Your daily token limit";
  var title = whose + " is used up.";
  if (typeof d.limit === "number" && typeof d.used === "number") {
    title =
      d.used >= d.limit
        ? whose + " is used up: " + fmtInt(d.used) + " of " + fmtInt(d.limit) + " tokens today."
        : whose + " has too little left for this reply: " + fmtInt(d.used) + " of " + fmtInt(d.limit) + " tokens used today.";
  }
  var when = d.resets_at ? fmtReset(d.resets_at) : "";
  var advice = when
    ? "It resets on " + when + ". Retry then, or ask whoever runs this server for a higher limit."
    : "It resets at midnight UTC. Retry then, or ask whoever runs this server for a higher limit.";
  return { title: title, advice: advice };
}
