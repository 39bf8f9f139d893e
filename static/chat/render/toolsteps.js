/*
 * MCP tool steps in the transcript (docs/tools.md): one collapsed block per call, its summary
 * the tool's name, its arguments in short and how it went; opened, the arguments and the result.
 * Live from the `tool.started` / `tool.finished` frames while the round runs (on the reply being
 * written), then from the stored round: the call message draws the blocks, and each result
 * message's text goes into its call's block (the result's own row is hidden).
 *
 * User-supplied and tool text is only ever written with textContent, never innerHTML.
 */
import { el } from "../lib/dom.js";
import { fmtInt } from "../lib/format.js";
import { bySeq, nodes, storedToolCalls, toolSteps } from "../state/store.js";

// The platform's memory tools keep their own one-line rendering ("Looked up: …").
const MEMORY_TOOLS = { read_records: true, search_records: true, save_record: true, read_files: true };
const SHORT_ARGUMENTS = 80;

function callName(call) {
  return (call && call.function && call.function.name) || "tool";
}

export function isToolServerCall(m) {
  return (
    m.role === "assistant" &&
    Array.isArray(m.tool_calls) &&
    m.tool_calls.some(function (c) {
      return !MEMORY_TOOLS[callName(c)];
    })
  );
}

export function isToolServerResult(m) {
  return m.role === "tool" && m.ok !== undefined;
}

function parsed(args) {
  if (args && typeof args === "object") return args;
  try {
    var value = JSON.parse(args || "{}");
    return value && typeof value === "object" ? value : null;
  } catch (e) {
    return null;
  }
}

// "a: 2, b: 3" (at most SHORT_ARGUMENTS characters), or the raw text when it is not an object.
export function argumentsShort(args) {
  var value = parsed(args);
  var text = value
    ? Object.keys(value)
        .map(function (k) {
          var v = value[k];
          return k + ": " + (typeof v === "string" ? v : JSON.stringify(v));
        })
        .join(", ")
    : String(args || "");
  return text.length > SHORT_ARGUMENTS ? text.slice(0, SHORT_ARGUMENTS - 1) + "…" : text;
}

function argumentsLong(args) {
  var value = parsed(args);
  return value ? JSON.stringify(value, null, 2) : String(args || "");
}

const STATE_WORDS = { running: "running…", done: "done", failed: "failed", waiting: "waiting for its result" };

// One block. step: {call_id, name, arguments, state, tokens, result}.
function stepNode(step, wasOpen) {
  var state = STATE_WORDS[step.state] || step.state;
  var tokens = typeof step.tokens === "number" && step.tokens > 0 ? " · " + fmtInt(step.tokens) + " tokens" : "";
  var body = el(
    "div",
    { class: "tool-step-body" },
    el("div", { class: "tool-step-label", text: "Arguments" }),
    el("pre", { class: "tool-step-arguments", text: argumentsLong(step.arguments) }),
    el("div", { class: "tool-step-label", text: "Result" }),
    typeof step.result === "string"
      ? el("pre", { class: "tool-step-result", text: step.result })
      : el("p", { class: "tool-step-result muted", text: step.state === "running" ? "Running…" : "Not stored yet." })
  );
  var details = el(
    "details",
    { class: "tool-step", dataset: { callId: step.call_id || "", state: step.state, tool: step.name } },
    el(
      "summary",
      null,
      el("span", { class: "tool-step-name", text: step.name }),
      " ",
      el("span", { class: "tool-step-args", text: "(" + argumentsShort(step.arguments) + ")" }),
      " ",
      el("span", { class: "tool-step-state", text: "— " + state + tokens })
    ),
    body
  );
  details.open = !!wasOpen;
  return details;
}

function openCalls(container) {
  var open = {};
  container.querySelectorAll("details.tool-step").forEach(function (d) {
    if (d.open) open[d.dataset.callId] = true;
  });
  return open;
}

// The stored results of the call message m: call id -> result message (they follow it by seq).
function resultsOf(m) {
  var found = {};
  if (typeof m.seq !== "number") return found;
  for (var seq = m.seq + 1; ; seq++) {
    var r = bySeq.get(seq);
    if (!r || r.role !== "tool") break;
    if (r.tool_call_id) found[r.tool_call_id] = r;
  }
  return found;
}

// The call message a stored result answers (the assistant message before its results).
export function callOf(result) {
  if (typeof result.seq !== "number") return null;
  for (var seq = result.seq - 1; seq > 0; seq--) {
    var m = bySeq.get(seq);
    if (!m) return null;
    if (m.role === "assistant") return isToolServerCall(m) ? m : null;
    if (m.role !== "tool") return null;
  }
  return null;
}

// The stored call message's blocks, into `container` (its text element). Its calls leave the
// live blocks of the reply that ran them (whichever arrives first, the frames or the message).
export function renderToolCall(container, m) {
  var open = openCalls(container);
  var results = resultsOf(m);
  var ids = [];
  var blocks = m.tool_calls.map(function (c) {
    ids.push(c.id);
    var r = results[c.id];
    if (r) {
      var resultNode = nodes.get(String(r.id));
      if (resultNode) resultNode.hidden = true; // its text is in this block
    }
    return stepNode(
      {
        call_id: c.id,
        name: callName(c),
        arguments: c.function && c.function.arguments,
        state: r ? (r.ok === false ? "failed" : "done") : "waiting",
        tokens: r ? r.token_count : null,
        result: r ? r.content || "" : null,
      },
      open[c.id]
    );
  });
  container.replaceChildren.apply(container, blocks);
  dropLive(ids);
}

function dropLive(ids) {
  ids.forEach(function (id) {
    storedToolCalls.add(id);
  });
  toolSteps.forEach(function (steps, replyId) {
    var before = steps.size;
    ids.forEach(function (id) {
      steps.delete(id);
    });
    if (steps.size === before) return;
    if (!steps.size) toolSteps.delete(replyId);
    var node = nodes.get(replyId);
    if (node && node._parts && node._parts.steps) drawLive(node._parts.steps, steps);
  });
}

// A result whose call message is not on the page (an older page of the chat): a block of its own.
export function renderLoneResult(container, m) {
  var open = openCalls(container);
  container.replaceChildren(
    stepNode(
      {
        call_id: m.tool_call_id,
        name: m.name || m.tool_name || "tool",
        arguments: null,
        state: m.ok === false ? "failed" : "done",
        tokens: m.token_count,
        result: m.content || "",
      },
      open[m.tool_call_id]
    )
  );
}

// Tool frames: the reply `frame.message_id` runs a call (`tool.started`) or one ended. A frame
// of a call already stored (a late one) changes nothing. Returns the reply's id to re-render.
export function noteToolFrame(frame) {
  if (frame.message_id === undefined || frame.message_id === null || !frame.call_id) return null;
  if (storedToolCalls.has(frame.call_id)) return null;
  var id = String(frame.message_id);
  var steps = toolSteps.get(id) || new Map();
  var step = steps.get(frame.call_id) || { call_id: frame.call_id, name: frame.name || "tool", arguments: null };
  if (frame.type === "tool.started") {
    step.arguments = frame.arguments;
    step.state = "running";
  } else {
    step.state = frame.ok === false ? "failed" : "done";
    step.tokens = frame.tokens;
  }
  steps.set(frame.call_id, step);
  toolSteps.set(id, steps);
  return id;
}

function drawLive(container, steps) {
  var open = openCalls(container);
  var blocks = [];
  (steps || new Map()).forEach(function (step) {
    blocks.push(stepNode(step, open[step.call_id]));
  });
  container.replaceChildren.apply(container, blocks);
  container.hidden = !blocks.length;
}

// The live blocks of the reply being written, into `container`.
export function renderLiveSteps(container, m) {
  drawLive(container, toolSteps.get(String(m.id)));
}
