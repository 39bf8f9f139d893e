/*
 * What a message is, in words: its kind, author, status label, what a failure means and what to
 * do, which lookups a tool request made. Reads messages; builds no DOM.
 */
import { isBuiltin } from "../lib/format.js";
import { quotaWords } from "../lib/quota.js";
import { openBot } from "./state.js";

export const ACTIVE_STATUSES = { pending: true, streaming: true };
const NOTICE_KINDS = { notice: true, command: true };

export function isNotice(m) {
  return !!NOTICE_KINDS[m.kind] || m.role === "system";
}

export function isTool(m) {
  return m.role === "tool" || (typeof m.kind === "string" && m.kind.indexOf("tool") === 0);
}

export function authorLabel(m) {
  if (m.role === "user") return m.kind === "command" ? "You (command)" : "You";
  if (m.role === "assistant") {
    // The speaker (rooms: each reply names its bot); else the chat's bot.
    if (m.bot && m.bot.name) return m.bot.name;
    var bot = openBot();
    return bot ? bot.name : "Bot";
  }
  if (m.role === "tool") return "Tool";
  return "System";
}

export const STATUS_LABELS = {
  sending: "Sending…",
  unsent: "Not sent",
  pending: "Thinking…",
  streaming: "Writing…",
  failed: "Failed",
  interrupted: "Interrupted",
};

export function isStopped(m) {
  return m.status === "complete" && m.finish_reason === "stopped";
}

// Who was called, in words a person recognises: "the model openai/gpt-4o-mini at api.example.com".
function providerWords() {
  var bot = openBot();
  if (!bot) return "the model provider";
  if (isBuiltin(bot.model)) return "the built-in model " + bot.model;
  var where = "";
  if (bot.api_base) {
    try {
      where = " at " + new URL(bot.api_base).host;
    } catch (e) {
      where = " at " + bot.api_base;
    }
  }
  return "the model " + bot.model + where;
}

// Plain words for each failure code: what happened, and what the reader can do about it.
export function failureWords(code, details) {
  switch (code) {
    case "quota_exceeded":
      return quotaWords(details);
    case "context_too_large":
      return {
        title: "This message is too long for the bot's context.",
        advice:
          "With what is always sent (system prompt, pinned messages, summaries) it does not fit. Shorten the message (or split it), unpin messages you no longer need, or compact: “Compact and retry” runs /compact and sends it again only if it then fits.",
      };
    case "model_unavailable":
      return {
        title: "Could not get a reply from " + providerWords() + ".",
        advice:
          "The provider could not be reached or refused the request. Check that it is running and that the bot's model, address and API key are right (bot settings), then Retry.",
      };
    case "service_unavailable":
      return {
        title: "A service the reply needs is down right now.",
        advice: "Your message is saved. The reply starts when the service is back; Retry to try again now.",
      };
    case "interrupted":
      return {
        title: "The reply was interrupted before it finished.",
        advice: "The worker writing it stopped or lost contact; any text it wrote is kept above. Retry to ask again.",
      };
    case "internal_error":
      return {
        title: "Something went wrong on our side while writing this reply.",
        advice: "Retry. If it keeps failing, tell whoever runs this server — the server log has the details.",
      };
    default:
      return {
        title: "The reply failed.",
        advice: "Retry; if it keeps failing, check the bot's settings.",
      };
  }
}

export function isMarkdown(m) {
  return m.role === "assistant" && !isNotice(m) && !isTool(m);
}

// --- recall (tool messages and recall frames) ----------------------------------------------

function parseArgs(raw) {
  if (raw && typeof raw === "object") return raw;
  try {
    var parsed = JSON.parse(raw || "{}");
    return parsed && typeof parsed === "object" ? parsed : {};
  } catch (e) {
    return {};
  }
}

// [{tool: "read"|"search"|"save"|name, names, query}] from a stored tool request.
export function toolRequests(m) {
  var out = [];
  (Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach(function (call) {
    var fn = (call && call.function) || {};
    var args = parseArgs(fn.arguments);
    if (fn.name === "read_records") out.push({ tool: "read", names: [].concat(args.names || []), query: "" });
    else if (fn.name === "search_records") out.push({ tool: "search", names: [], query: String(args.query || "") });
    else if (fn.name === "save_record") out.push({ tool: "save", names: [String(args.name || "")], query: "" });
    else out.push({ tool: fn.name || "tool", names: [], query: "" });
  });
  if (!out.length && m.content) {
    var body = parseArgs(m.content);
    if (body.read_files) {
      out.push({ tool: "read", names: [].concat((body.read_files && body.read_files.files) || []), query: "" });
    }
    if (body.search_records) {
      out.push({ tool: "search", names: [], query: String(body.search_records.query || "") });
    }
  }
  return out;
}

export function lookupWords(requests) {
  var names = [];
  var queries = [];
  var saved = [];
  requests.forEach(function (r) {
    if (r.tool === "read") names = names.concat(r.names || []);
    else if (r.tool === "search" && r.query) queries.push("“" + r.query + "”");
    else if (r.tool === "save") saved = saved.concat(r.names || []);
  });
  var parts = [];
  if (names.length) parts.push(names.join(", "));
  if (queries.length) parts.push("search " + queries.join(", "));
  if (saved.length) parts.push("saved " + saved.join(", "));
  return parts.join(" · ");
}
