/*
 * A user message's attached files, as the transcript shows them: the text the user typed, then
 * a download link per file (the model reads the files' text; the page does not repeat it).
 */
import { el } from "../lib/dom.js";
import { API } from "../state/page.js";

// "[Attached file #12: notes.md]\n…\n[End of notes.md]" and "[Attached image #13: a.png]" in a
// user message: the text before them, and the files.
const MARKER = /(?:^|\n\n)\[Attached (file|image) #(\d+): ([^\]\n]*)\]/;

export function splitAttachments(content) {
  var first = MARKER.exec(content || "");
  if (!first) return null;
  var files = [];
  var re = new RegExp(MARKER.source, "g");
  var match;
  while ((match = re.exec(content))) files.push({ kind: match[1], id: match[2], name: match[3] });
  return { text: content.slice(0, first.index), files: files };
}

export function attachmentLinks(files) {
  return el(
    "ul",
    { class: "attach-links", "aria-label": "Attached files" },
    files.map(function (f) {
      return el(
        "li",
        null,
        el("a", {
          href: API + "attachments/" + f.id + "/",
          download: f.name,
          text: (f.kind === "image" ? "🖼 " : "📎 ") + f.name,
        })
      );
    })
  );
}

