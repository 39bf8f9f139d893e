// Bot page, Advanced > Tools (docs/tools.md): one checklist per tool server. Checking a
// server's "All tools" box ("<server>/*") covers each of its tools, so their own boxes are shown
// checked and disabled while it is on (a disabled box is not posted: the bot keeps "<server>/*",
// which follows the server's list). No framework, no build step.

const checklist = document.getElementById("section-tools");

function serverOf(value) {
  return value.slice(0, value.indexOf("/"));
}

function boxes() {
  return Array.from(checklist?.querySelectorAll('input[type="checkbox"][name="tools"]') || []);
}

export function sync() {
  const all = boxes();
  const wholeServers = new Set(
    all.filter((box) => box.value.endsWith("/*") && box.checked).map((box) => serverOf(box.value)),
  );
  for (const box of all) {
    if (box.value.endsWith("/*")) continue;
    const covered = wholeServers.has(serverOf(box.value));
    if (covered && !box.disabled) box.dataset.wasChecked = box.checked ? "1" : "";
    if (!covered && box.disabled) box.checked = box.dataset.wasChecked === "1";
    box.disabled = covered;
    if (covered) box.checked = true;
  }
}

if (checklist) {
  checklist.addEventListener("change", (event) => {
    if (event.target instanceof HTMLInputElement && event.target.name === "tools") sync();
  });
  sync();
}
