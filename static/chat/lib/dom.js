/*
 * The one element builder the chat modules share.
 *
 *   el("button", { type: "button", class: "button", "aria-label": "Delete", onclick: drop }, "×")
 *
 * attrs: "class" sets className, "text" sets textContent, "dataset" and "style" are objects
 * merged into node.dataset / node.style, "on<event>" with a function adds a listener, a name with
 * a "-" (aria-*, data-* spelled out) is set with setAttribute, anything else is assigned as a
 * property (type, value, title, hidden, dateTime, open, id...). null, undefined and false values
 * are skipped, so a conditional attribute reads `"aria-current": current && "true"`.
 * children: nodes or strings (appended as text, never parsed as HTML); null, undefined and false
 * are skipped and arrays are flattened.
 */

export function byId(id) {
  return document.getElementById(id);
}

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key === "dataset" || key === "style") Object.assign(node[key], value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key.includes("-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  const kids = children.flat().filter((child) => child !== null && child !== undefined && child !== false);
  if (kids.length) node.append(...kids);
  return node;
}
