// Bot settings page: live budget thresholds (docs/compaction.md, integer arithmetic exactly as
// compaction/budget.py), the unknown-model warning, and the Check model button.
// No framework, no build step.

const form = document.getElementById("bot-form");

function csrfToken() {
  const input = form?.querySelector("input[name=csrfmiddlewaretoken]");
  if (input) return input.value;
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

// A whole number >= minimum from a field's text, else null (what budget_compute would refuse).
function wholeNumber(name, minimum) {
  const field = form.elements.namedItem(name);
  if (!field) return null;
  const text = String(field.value).trim();
  if (!/^\d+$/.test(text)) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) && value >= minimum ? value : null;
}

// docs/compaction.md. All operands are non-negative safe integers, so Math.floor of the quotient is
// Python's floor division; products stay far below 2**53 because B <= CAP.
export function budgetCompute({ contextWindow, modelMax, maxOutput, threshold, kept, cap }) {
  const window = contextWindow > 0 ? contextWindow : modelMax > 0 ? modelMax : cap;
  const budget = Math.max(0, Math.min(window - maxOutput, cap));
  const hard = Math.floor((budget * 75) / 100);
  const soft = threshold > 0 ? Math.min(threshold, hard) : Math.floor((budget * 50) / 100);
  const target = Math.floor((budget * kept) / 100);
  const targetBlocking = Math.min(target, Math.floor((budget * 50) / 100));
  return { window, budget, soft, hard, target, target_blocking: targetBlocking };
}

// The same sentences as bots/bot_pages.py: budget_note.
function budgetNote(result, contextWindow, modelMax, threshold) {
  if (!result) return "Enter whole numbers (max output tokens at least 1, kept 1–99) to see them.";
  if (result.budget === 0) return "No budget: max output tokens must be smaller than the window.";
  let source;
  if (contextWindow > 0) source = "The window is the one set above.";
  else if (modelMax) source = "The window is the model's, according to litellm.";
  else source = "The window is the cap (CONTEXT_ABSOLUTE_CAP_TOKENS): the model's window is not known.";
  let note = `${source} A call sends at most the window minus the max output tokens (never more than the cap).`;
  // A hand-set threshold lies 5 % of B above the landing point (turns/bot_validation.py).
  const minimum = result.target + Math.floor((result.budget * THRESHOLD_MARGIN_PERCENT) / 100);
  if (threshold > 0 && threshold < minimum && minimum <= result.hard) {
    const f = NUMBER_FORMAT.format;
    note +=
      ` Compacting in the background at ${f(threshold)} is too low: set it to at least ${f(minimum)} tokens ` +
      `(where background compaction lands, ${f(result.target)}, plus ${THRESHOLD_MARGIN_PERCENT} % of what a call may send, ` +
      `${f(minimum - result.target)}), or to 0 (automatic).`;
  } else if (threshold > 0 && minimum > result.hard) {
    const f = NUMBER_FORMAT.format;
    note +=
      ` Background compaction lands at ${f(result.target)}, too close to where it compacts before replying ` +
      `(${f(result.hard)}): lower what is kept after compaction, or set the threshold to 0 (automatic).`;
  }
  if (threshold > result.hard) {
    const t = NUMBER_FORMAT.format(threshold);
    const h = NUMBER_FORMAT.format(result.hard);
    note +=
      ` Compacting in the background is set to start at ${t}, above where it compacts before replying (${h}): ` +
      `it will compact before replying at ${h} tokens, never in the background. Lower it to compact in the background first.`;
  }
  return note;
}

const NUMBER_FORMAT = new Intl.NumberFormat("en-US");
const THRESHOLD_MARGIN_PERCENT = 5; // compaction/budget.py
const OUTPUTS = ["window", "budget", "soft", "hard", "target", "target_blocking"];

function render() {
  const cap = Number(form.dataset.cap);
  const modelMax = form.dataset.modelMax ? Number(form.dataset.modelMax) : null;
  const contextWindow = wholeNumber("context_window", 0);
  const maxOutput = wholeNumber("max_output_tokens", 1);
  const threshold = wholeNumber("compaction_threshold", 0);
  const kept = wholeNumber("compaction_kept_percent", 1);
  const valid = [contextWindow, maxOutput, threshold, kept].every((v) => v !== null) && kept <= 99;
  const result = valid
    ? budgetCompute({ contextWindow, modelMax, maxOutput, threshold, kept, cap })
    : null;
  for (const name of OUTPUTS) {
    const output = document.getElementById(`budget-${name.replace("_", "-")}`);
    if (!output) continue;
    output.dataset.value = result ? String(result[name]) : "";
    output.textContent = result ? NUMBER_FORMAT.format(result[name]) : "—";
  }
  const note = document.getElementById("budget-note");
  if (note) note.textContent = budgetNote(result, contextWindow, modelMax, threshold);
  // The unknown-model warning is about the cap, which a set context window replaces.
  const warning = document.getElementById("model-warning");
  if (warning) {
    const text = warning.dataset.text || "";
    const show = Boolean(text) && !(contextWindow > 0);
    warning.textContent = show ? text : "";
    warning.hidden = !show;
  }
}

// The model's window comes from litellm's local map on the server (no network): ask again when
// the model text changes, and only keep the answer for the text still in the field.
let modelTimer = null;
let modelAsked = "";
function modelChanged() {
  clearTimeout(modelTimer);
  modelTimer = setTimeout(async () => {
    const field = form.elements.namedItem("model");
    const model = field.value.trim();
    modelAsked = model;
    const url = `${form.dataset.modelInfoUrl}?model=${encodeURIComponent(model)}`;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const info = await response.json();
      if (modelAsked !== model) return;
      form.dataset.modelMax = info.max_input_tokens ? String(info.max_input_tokens) : "";
      const warning = document.getElementById("model-warning");
      if (warning) warning.dataset.text = info.warning || "";
      render();
    } catch {
      // Offline or server gone: keep the last answer; saving still validates on the server.
    }
  }, 350);
}

async function checkModel(button) {
  const result = document.getElementById("check-result");
  button.disabled = true;
  result.hidden = false;
  result.className = "model-check-result";
  result.textContent = "Calling the model…";
  try {
    const response = await fetch(button.dataset.url, {
      method: "POST",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
      credentials: "same-origin",
    });
    const data = await response.json();
    if (!response.ok) {
      result.classList.add("is-error");
      result.textContent = data.error ? data.error.message : `HTTP ${response.status}`;
    } else if (data.ok) {
      result.classList.add("is-ok");
      const reply = data.reply ? ` It replied: “${data.reply}”` : "";
      result.textContent = `${data.model} answered in ${NUMBER_FORMAT.format(data.latency_ms)} ms.${reply}`;
    } else {
      result.classList.add("is-error");
      result.textContent = `${data.model} did not answer (${NUMBER_FORMAT.format(data.latency_ms)} ms): ${data.error}`;
    }
  } catch (error) {
    result.classList.add("is-error");
    result.textContent = `The check could not reach the server: ${error.message}`;
  } finally {
    button.disabled = false;
  }
}

if (form) {
  form.addEventListener("input", (event) => {
    if (event.target.name === "model") modelChanged();
    render();
  });
  render();
}

const checkButton = document.getElementById("check-model");
if (checkButton) checkButton.addEventListener("click", () => checkModel(checkButton));
