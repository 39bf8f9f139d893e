/*
 * Search all my chats: the sidebar's box asks GET /api/v1/search/?q= (the memory search over
 * every chat of the signed-in user) and lists the hits, matched words marked; a hit is a link to
 * /chat/<id>/#m<seq>, which opens that chat scrolled to the message (session.js, revealMessage).
 */
import { byId, el } from "../lib/dom.js";
import { fmtTime } from "../lib/format.js";
import { api } from "../transport/api.js";

const DEBOUNCE_MS = 250;

const box = byId("chat-search");
const form = byId("chat-search-form");
const results = byId("chat-search-results");
const status = byId("chat-search-status");
let timer = null;
let asked = 0; // the newest query's number: an older answer arriving late is dropped

// "**word**" (the excerpt convention) becomes <mark>word</mark>; everything else stays text.
function marked(excerpt) {
  return String(excerpt || "")
    .split("**")
    .map(function (part, i) {
      return i % 2 ? el("mark", { text: part }) : part;
    })
    .filter(function (p) {
      return p !== "";
    });
}

export function hitHref(hit) {
  return "/chat/" + encodeURIComponent(hit.session.id) + "/#m" + encodeURIComponent(hit.message.seq);
}

function say(text) {
  status.textContent = text;
  status.hidden = !text;
}

function render(hits) {
  results.replaceChildren.apply(
    results,
    hits.map(function (hit) {
      var who = hit.message.role === "user" ? "You" : hit.session.bot.name;
      return el(
        "li",
        { class: "chat-search-hit" },
        el(
          "a",
          { href: hitHref(hit), class: "chat-search-link" },
          el("span", { class: "chat-search-title", text: hit.session.title || "Chat " + hit.session.id }),
          el("span", { class: "chat-search-meta", text: who + " · " + fmtTime(hit.message.created_at) }),
          el("span", { class: "chat-search-excerpt" }, marked(hit.excerpt))
        )
      );
    })
  );
  results.hidden = hits.length === 0;
}

function run() {
  var q = box.value.trim();
  var mine = ++asked;
  if (!q) {
    render([]);
    say("");
    return;
  }
  say("Searching…");
  api("GET", "search/?q=" + encodeURIComponent(q)).then(
    function (data) {
      if (mine !== asked) return;
      var hits = (data && data.results) || [];
      render(hits);
      say(hits.length ? hits.length + (hits.length === 1 ? " message found" : " messages found") : "No message matches.");
    },
    function (err) {
      if (mine !== asked) return;
      render([]);
      say((err && err.message) || "Search failed.");
    }
  );
}

export function searchBind() {
  if (!box) return;
  box.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(run, DEBOUNCE_MS);
  });
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    clearTimeout(timer);
    run();
  });
  box.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && box.value) {
      event.stopPropagation();
      box.value = "";
      run();
    }
  });
}
