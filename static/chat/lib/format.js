/* Numbers, times and labels as the page shows them. */

const numberFormat = new Intl.NumberFormat();
export function fmtInt(n) {
  return typeof n === "number" && isFinite(n) ? numberFormat.format(n) : "?";
}

export function fmtTime(iso) {
  var d = new Date(iso);
  if (isNaN(d.getTime())) return "";
  var now = new Date();
  var sameDay = d.toDateString() === now.toDateString();
  return sameDay
    ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : d.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

export function isBuiltin(model) {
  return typeof model === "string" && model.indexOf("builtin/") === 0;
}

export function sessionLabel(session) {
  if (session.title) return session.title;
  var when = fmtTime(session.created_at);
  return when ? "Chat from " + when : "Chat " + session.id;
}

export function sameId(a, b) {
  return a !== null && a !== undefined && b !== null && b !== undefined && String(a) === String(b);
}
