/*
 * "What the model saw" on a reply (docs/context-records.md): the reply's context record, read from
 * GET messages/{id}/context/?payload=1 — per model call a stacked bar of its parts over the budget
 * (coloured as in the gauge), each part expandable to its text as sent (a summary links to its
 * marker, recalled records open in the memory panel, trimmed history says it was left out), and
 * what changed since the previous reply's record ("+2 messages, summary 14 replaced 9–12,
 * recalled snapshot_40_77").
 *
 * A record never changes once written, so each is read once per page.
 */
import { el } from "../lib/dom.js";
import { fmtInt, sameId } from "../lib/format.js";
import { memory } from "../state/state.js";
import { messages } from "../state/store.js";
import { api, describeError } from "../transport/api.js";
import { argumentsShort } from "./toolsteps.js";

// A part's colour: the gauge's for the parts the gauge shows, three more for the rest.
const PART_CLASS = {
  system: "gauge-system",
  room: "gauge-system",
  client_system: "gauge-system",
  pinned: "gauge-pinned",
  summary: "gauge-summaries",
  memory_index: "gauge-memory_index",
  history: "gauge-history",
  user: "ctx-user",
  recalled: "ctx-recalled",
  tool: "ctx-recalled",
  tools: "ctx-tools",
};

const records = new Map(); // reply id -> Promise of its record

export function contextViewReset() {
  records.clear();
}

// The record is written just after the reply finishes (off the reply's path), so a read that
// comes at once may find none yet: ask again a few times before saying there is none.
function readRecord(key, triesLeft) {
  return api("GET", "messages/" + encodeURIComponent(key) + "/context/?payload=1").catch(function (err) {
    if (err.code !== "not_found" || triesLeft <= 0) throw err;
    return new Promise(function (resolve) {
      setTimeout(resolve, 700);
    }).then(function () {
      return readRecord(key, triesLeft - 1);
    });
  });
}

function recordOf(id) {
  var key = String(id);
  if (!records.has(key)) {
    var read = readRecord(key, 3);
    read.catch(function () {
      records.delete(key); // a failed read is tried again next time
    });
    records.set(key, read);
  }
  return records.get(key);
}

// Which replies have a record: finished chat replies of a bot (a notice or a tool row has none).
function hasRecord(m) {
  return m.role === "assistant" && m.kind === "chat" && m.status === "complete" && m.id !== undefined && m.id !== null;
}

// The button in a reply's actions (transcript.js renderActions); null for messages without one.
export function contextButton(node, m) {
  if (!hasRecord(m)) return null;
  var panelId = "ctx-" + m.id;
  var open = !!(node._contextView && node._contextView.isConnected && !node._contextView.hidden);
  var button = el("button", {
    type: "button",
    class: "button button-small button-quiet msg-context",
    text: "What the model saw",
    title: "The parts this reply was made from, as they were sent",
    "aria-expanded": open ? "true" : "false",
    "aria-controls": panelId,
    onclick: function () {
      toggle(node, m, button);
    },
  });
  return button;
}

function toggle(node, m, button) {
  var panel = node._contextView;
  if (panel && panel.isConnected && !panel.hidden) {
    panel.hidden = true;
    button.setAttribute("aria-expanded", "false");
    return;
  }
  if (!panel || !panel.isConnected) {
    panel = el("section", {
      id: "ctx-" + m.id,
      class: "ctx-view",
      "aria-label": "What the model saw for this reply",
      "aria-busy": "true",
    }, el("p", { class: "muted", text: "Reading the record…" }));
    node._contextView = panel;
    node.append(panel);
    fill(panel, m);
  }
  panel.hidden = false;
  button.setAttribute("aria-expanded", "true");
}

function fill(panel, m) {
  var previous = previousReply(m);
  Promise.all([recordOf(m.id), previous ? recordOf(previous.id).catch(function () { return null; }) : null])
    .then(function (results) {
      var record = results[0];
      var before = results[1];
      var calls = Array.isArray(record && record.calls) ? record.calls : [];
      var views = calls.length
        ? calls.map(function (call, i) {
            return callView(call, i, calls.length);
          })
        : [el("p", { class: "muted", text: "No model call was made for this reply." })];
      panel.replaceChildren(el("p", { class: "ctx-diff", text: diffWords(before, record, previous) }), ...views);
    })
    .catch(function (err) {
      panel.replaceChildren(
        el("p", {
          class: "ctx-error",
          text:
            err.code === "not_found"
              ? "No record of what the model saw is kept for this reply (it was written before records were kept, or the record was deleted)."
              : "Could not read what the model saw: " + describeError(err),
        })
      );
    })
    .finally(function () {
      panel.setAttribute("aria-busy", "false");
    });
}

// The reply before this one from the same bot (in a room each bot has its own view).
function previousReply(m) {
  var best = null;
  messages.forEach(function (other) {
    if (!hasRecord(other) || typeof other.seq !== "number" || other.seq >= m.seq) return;
    if (m.bot && other.bot && !sameId(m.bot.id, other.bot.id)) return;
    if (!best || other.seq > best.seq) best = other;
  });
  return best;
}

// ---------------------------------------------------------------------------------------------
// One call: its line, its bar, its parts

function callView(call, index, count) {
  var parts = Array.isArray(call.parts) ? call.parts : [];
  var texts = partTexts(parts, Array.isArray(call.messages) ? call.messages : null);
  var sent = parts.reduce(function (sum, p) {
    return p.trimmed ? sum : sum + (p.tokens || 0);
  }, 0);
  var budget = typeof call.budget === "number" && call.budget > 0 ? call.budget : sent || 1;
  var facts = [
    call.model,
    fmtInt(sent) + " of " + fmtInt(budget) + " tokens (" + Math.round((100 * sent) / budget) + "%)",
  ];
  if (typeof call.latency_ms === "number") facts.push(fmtInt(call.latency_ms) + " ms");
  if (call.usage && typeof call.usage.prompt_tokens === "number") {
    facts.push("the provider counted " + fmtInt(call.usage.prompt_tokens) + " in, " + fmtInt(call.usage.completion_tokens) + " out");
  }
  var title = count > 1 ? "Call " + (index + 1) + " of " + count + (index > 0 ? " (after a lookup)" : "") : "The call";
  var notes = [];
  if (call.waited_for_compaction) notes.push("It waited for a compaction before it was sent.");
  if (call.admission && call.admission.reason) notes.push("Admission: " + call.admission.reason + ".");
  return el(
    "div",
    { class: "ctx-call", dataset: { round: String(call.round === undefined ? index : call.round) } },
    el("h4", { class: "ctx-call-title" }, el("span", { text: title }), " ", el("span", { class: "muted", text: facts.filter(Boolean).join(" · ") })),
    el(
      "div",
      { class: "ctx-bar", role: "img", "aria-label": barWords(parts, sent) },
      parts
        .filter(function (p) {
          return !p.trimmed && p.tokens > 0;
        })
        .map(function (p) {
          return el("span", {
            class: "ctx-seg " + (PART_CLASS[p.kind] || "ctx-other"),
            dataset: { kind: p.kind },
            // The bar is what was sent, part by part (the budget is said in words above: against
            // a 200k budget a small call would be a sliver).
            style: { width: Math.max(0, Math.min(100, (100 * p.tokens) / (sent || 1))).toFixed(2) + "%" },
            title: partLabel(p) + ": " + fmtInt(p.tokens) + " tokens",
          });
        })
    ),
    notes.map(function (n) {
      return el("p", { class: "ctx-note", text: n });
    }),
    el(
      "ul",
      { class: "ctx-parts" },
      parts.map(function (p, i) {
        return el("li", null, partView(p, texts[i]));
      })
    )
  );
}

function barWords(parts, sent) {
  return (
    "The " +
    fmtInt(sent) +
    " tokens sent, by part: " +
    parts
      .filter(function (p) {
        return !p.trimmed;
      })
      .map(function (p) {
        return partLabel(p) + " " + fmtInt(p.tokens);
      })
      .join(", ")
  );
}

function ranges(list) {
  return (list || [])
    .map(function (r) {
      return r[0] === r[1] ? String(r[0]) : r[0] + "–" + r[1];
    })
    .join(", ");
}

function requestWords(r) {
  if (r.names && r.names.length) return r.names.join(", ");
  if (r.query) return "“" + r.query + "”";
  return r.tool || "a lookup";
}

export function partLabel(p) {
  var ref = p.ref || {};
  switch (p.kind) {
    case "system":
      return ref.chat_instruction !== undefined ? "This chat's instruction" : "System prompt";
    case "room":
      return "Room header";
    case "client_system":
      return "The API client's system message";
    case "summary":
      return "Summary " + ref.id + " of messages " + ranges([ref.seqs || []]);
    case "memory_index":
      return "Memory index (" + (ref.names || []).length + " records)";
    case "pinned":
      return "Pinned: message" + ((ref.seqs || []).length > 1 ? "s " : " ") + (ref.seqs || []).join(", ");
    case "history":
      if (p.trimmed) {
        return "Left out (trimmed): " + fmtInt(ref.messages) + " older message" + (ref.messages === 1 ? "" : "s") + (ref.before_seq ? " before message " + ref.before_seq : "");
      }
      return "History: messages " + ranges(ref.seqs);
    case "user":
      return "The new message" + ((ref.seqs || []).length ? " (" + ref.seqs.join(", ") + ")" : "");
    case "recalled":
      return "Recalled, round " + (ref.round || "?") + ": " + (ref.requests || []).map(requestWords).join("; ");
    case "tool":
      return "Tool round " + (ref.round || "?") + ": " + ((ref.calls || []).join(", ") || "results");
    case "tools":
      return "Tools offered: " + (ref.names || []).join(", ");
    default:
      return p.kind;
  }
}

// Each part's messages as sent, matched to the rebuilt payload in order: every sent part but
// the rows is one system message; the rows (pinned, history, the new message, recalled, tool) follow,
// one message per row, in the order their parts list them.
function partTexts(parts, sent) {
  var texts = parts.map(function () {
    return null;
  });
  if (!sent) return texts;
  var at = 0;
  parts.forEach(function (p, i) {
    if (p.trimmed || p.kind === "tools") return;
    var count = 1;
    if (p.kind === "pinned" || p.kind === "user" || p.kind === "recalled" || p.kind === "tool") count = (p.ref.ids || []).length;
    if (p.kind === "history") {
      count = (p.ref.seqs || []).reduce(function (n, r) {
        return n + (r[1] - r[0] + 1);
      }, 0);
    }
    texts[i] = sent.slice(at, at + count);
    at += count;
  });
  return texts;
}

function messageText(m) {
  var content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
  var who = m.role + (m.name ? " (" + m.name + ")" : "");
  var calls = Array.isArray(m.tool_calls) && m.tool_calls.length ? " [asks: " + m.tool_calls.map(function (c) {
    return (c.function && c.function.name) || "tool";
  }).join(", ") + "]" : "";
  return who + calls + ": " + (content || "");
}

// A tool round as sent: one collapsed block per call, its name and arguments, opened its result.
function toolCallsSent(sent) {
  var results = {};
  sent.forEach(function (m) {
    if (m.role === "tool" && m.tool_call_id) results[m.tool_call_id] = m;
  });
  var blocks = [];
  sent.forEach(function (m) {
    (m.role === "assistant" && Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach(function (c) {
      var fn = c.function || {};
      var r = results[c.id];
      blocks.push(
        el(
          "details",
          { class: "ctx-tool-call", dataset: { callId: c.id || "" } },
          el(
            "summary",
            null,
            el("span", { class: "ctx-tool-name", text: fn.name || "tool" }),
            " ",
            el("span", { class: "ctx-tool-args muted", text: "(" + argumentsShort(fn.arguments) + ")" })
          ),
          el("div", { class: "tool-step-label", text: "Arguments" }),
          el("pre", { class: "ctx-text ctx-tool-arguments", text: String(fn.arguments || "") }),
          el("div", { class: "tool-step-label", text: "Result" }),
          el("pre", { class: "ctx-text ctx-tool-result", text: r ? String(r.content || "") : "(no result sent)" })
        )
      );
    });
  });
  return blocks;
}

function partView(p, sent) {
  var ref = p.ref || {};
  var body = el("div", { class: "ctx-part-body" });
  if (p.trimmed) {
    body.append(el("p", { class: "muted", text: "Not sent: admission left these out to stay within the budget." }));
  } else if (p.kind === "tools") {
    body.append(el("p", { text: "Offered to the model as tools (a schema, not a message)." }));
  } else if (p.kind === "tool" && sent && sent.length) {
    body.append.apply(body, toolCallsSent(sent));
  } else if (sent && sent.length) {
    body.append(
      el("pre", {
        class: "ctx-text",
        text: sent.length === 1 && p.kind !== "history" && p.kind !== "recalled" && p.kind !== "tool" ? sent[0].content || "" : sent.map(messageText).join("\n\n"),
      })
    );
  } else {
    body.append(el("p", { class: "muted", text: "The text is not available." }));
  }
  if (p.kind === "summary" && ref.id !== undefined) {
    body.append(
      el("button", {
        type: "button",
        class: "button button-small ctx-marker-link",
        text: "Show its marker",
        onclick: function (event) {
          showMarker(ref.id, event.currentTarget);
        },
      })
    );
  }
  if (p.kind === "recalled") {
    names(ref).forEach(function (name) {
      body.append(
        el("button", {
          type: "button",
          class: "button button-small ctx-memory-link",
          text: "Open " + name + " in Memory",
          dataset: { record: name },
          onclick: function () {
            if (memory) memory.openRecord(name);
          },
        })
      );
    });
  }
  return el(
    "details",
    { class: "ctx-part" + (p.trimmed ? " is-trimmed" : ""), dataset: { kind: p.kind, trimmed: p.trimmed ? "true" : "false" } },
    el(
      "summary",
      null,
      el("span", { class: "gauge-swatch " + (p.trimmed ? "ctx-trimmed" : PART_CLASS[p.kind] || "ctx-other"), "aria-hidden": "true" }),
      el("span", { class: "ctx-part-name", text: partLabel(p) }),
      " ",
      el("span", { class: "gauge-num", text: fmtInt(p.tokens) + " tokens" })
    ),
    body
  );
}

function names(ref) {
  var found = [];
  (ref.requests || []).forEach(function (r) {
    (r.names || []).forEach(function (n) {
      if (found.indexOf(n) < 0) found.push(n);
    });
  });
  return found;
}

function showMarker(summaryId, button) {
  var marker = document.querySelector('#transcript .compaction-marker[data-summary-id="' + String(summaryId).replace(/\D/g, "") + '"]');
  if (!marker) {
    button.textContent = "Its marker is not in this chat's view";
    return;
  }
  marker.open = true;
  marker.tabIndex = -1;
  marker.scrollIntoView({ block: "center" });
  marker.focus();
}

// ---------------------------------------------------------------------------------------------
// What changed since the previous reply's record

function seen(call) {
  var out = { seqs: new Set(), summaries: new Map(), index: new Set() };
  (call && Array.isArray(call.parts) ? call.parts : []).forEach(function (p) {
    var ref = p.ref || {};
    if (p.trimmed) return;
    if (p.kind === "history") {
      (ref.seqs || []).forEach(function (r) {
        for (var s = r[0]; s <= r[1]; s++) out.seqs.add(s);
      });
    } else if (p.kind === "pinned" || p.kind === "user") {
      (ref.seqs || []).forEach(function (s) {
        out.seqs.add(s);
      });
    } else if (p.kind === "summary") {
      out.summaries.set(String(ref.id), ref.seqs || []);
    } else if (p.kind === "memory_index") {
      (ref.names || []).forEach(function (n) {
        out.index.add(n);
      });
    }
  });
  return out;
}

export function diffWords(before, record, previous) {
  var calls = record && Array.isArray(record.calls) ? record.calls : [];
  if (!calls.length) return "";
  var now = seen(calls[0]);
  var bits = [];
  if (before && Array.isArray(before.calls) && before.calls.length) {
    var then = seen(before.calls[0]);
    var added = 0;
    now.seqs.forEach(function (s) {
      if (!then.seqs.has(s)) added++;
    });
    if (added) bits.push("+" + added + " message" + (added === 1 ? "" : "s"));
    now.summaries.forEach(function (span, id) {
      if (!then.summaries.has(id)) bits.push("summary " + id + " replaced " + ranges([span]));
    });
    then.summaries.forEach(function (span, id) {
      if (!now.summaries.has(id)) bits.push("summary " + id + " (" + ranges([span]) + ") no longer sent");
    });
    var gone = 0;
    then.seqs.forEach(function (s) {
      if (!now.seqs.has(s) && !covered(now.summaries, s)) gone++;
    });
    if (gone) bits.push("−" + gone + " message" + (gone === 1 ? "" : "s") + " left out");
    now.index.forEach(function (n) {
      if (!then.index.has(n)) bits.push("index lists " + n);
    });
  }
  calls.forEach(function (call) {
    (call.parts || []).forEach(function (p) {
      if (p.kind !== "recalled") return;
      (p.ref.requests || []).forEach(function (r) {
        if (r.names && r.names.length) bits.push("recalled " + r.names.join(", "));
        else if (r.query) bits.push("searched “" + r.query + "”");
      });
    });
  });
  calls[0].parts.forEach(function (p) {
    if (p.trimmed) bits.push(fmtInt(p.ref.messages) + " older messages trimmed");
  });
  if (!before) {
    return (previous ? "The previous reply has no record to compare with" : "The first reply in this chat") + (bits.length ? ": " + bits.join(", ") : ".");
  }
  return "Since the previous reply: " + (bits.length ? bits.join(", ") : "nothing changed but the new message") + ".";
}

function covered(summaries, seq) {
  var hit = false;
  summaries.forEach(function (span) {
    if (span.length === 2 && seq >= span[0] && seq <= span[1]) hit = true;
  });
  return hit;
}
