/* The error banner and the two status chips (connection, compaction). */
import { ui } from "../state/page.js";
import { describeError } from "../transport/api.js";

export function showError(errOrText) {
  ui.bannerText.textContent = typeof errOrText === "string" ? errOrText : describeError(errOrText);
  ui.banner.hidden = false;
}

export function hideError() {
  ui.banner.hidden = true;
  ui.bannerText.textContent = "";
}

export function statusBind() {
  ui.bannerDismiss.addEventListener("click", function () {
    hideError();
    ui.composer.focus();
  });
}

export function setConnection(text, kind) {
  ui.connection.textContent = text || "";
  ui.connection.dataset.state = kind || "";
  ui.connection.hidden = !text;
}

let compactionHideTimer = null;
export function setCompaction(text, kind, autoHideMs) {
  clearTimeout(compactionHideTimer);
  ui.compaction.textContent = text || "";
  ui.compaction.dataset.state = kind || "";
  ui.compaction.hidden = !text;
  if (text && autoHideMs) {
    compactionHideTimer = setTimeout(function () {
      ui.compaction.hidden = true;
    }, autoHideMs);
  }
}
