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
      var href = API + "attachments/" + f.id + "/";
      return el(
        "li",
        { class: f.kind === "image" ? "attach-image" : null },
        f.kind === "image" ? thumbnail(f, href) : null,
        el("a", { href: href, download: f.name, text: (f.kind === "image" ? "🖼 " : "📎 ") + f.name })
      );
    })
  );
}

// An image's thumbnail: the picture itself, sized by css/attachments.css, served by the same
// owner-only check as the download (docs/attachments.md "Thumbnails"). One over the size a
// thumbnail may have (or another user's) answers 404: the link stays, the picture goes.
function thumbnail(f, href) {
  var img = el("img", {
    class: "attach-thumb",
    src: href + "thumbnail/",
    alt: f.name,
    loading: "lazy",
    decoding: "async",
  });
  var link = el("a", { class: "attach-thumb-link", href: href, download: f.name, tabIndex: -1, "aria-hidden": "true" }, img);
  img.addEventListener("error", function () {
    link.remove();
  });
  return link;
}

