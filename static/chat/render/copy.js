/*
 * Copy a message as markdown: its stored text as written (a reply's markdown, not the rendered
 * page), through the Clipboard API, else the classic select-and-copy fallback (both in
 * markdown.js's copyText, which the code blocks' Copy uses too). The button says how it went.
 */
const COPIED_FOR_MS = 1500;

export function copyMessage(m, button) {
  var copy = window.chatMarkdown && window.chatMarkdown.copyText;
  var done = copy ? copy(m.content || "") : Promise.reject(new Error("no copy"));
  return done.then(
    function () {
      if (!button) return;
      button.textContent = "Copied";
      setTimeout(function () {
        button.textContent = "Copy";
      }, COPIED_FOR_MS);
    },
    function () {
      if (button) button.textContent = "Copy failed";
    }
  );
}
