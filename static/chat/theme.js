/*
 * The colour theme: system (follow prefers-color-scheme), light or dark, remembered in
 * localStorage. A classic script loaded (not deferred) from <head> of every page, so the
 * attribute is on <html> before the first paint: no flash of the wrong theme. The
 * Content-Security-Policy allows scripts from this server only, hence a file, not inline code.
 *
 *   <html data-theme="light|dark">   (no attribute: system)
 *   window.chatTheme.cycle()          system -> light -> dark -> system (the header button, "d")
 */
(function () {
  "use strict";
  var KEY = "chat-theme";
  var ORDER = ["system", "light", "dark"];
  var WORDS = { system: "System", light: "Light", dark: "Dark" };

  function stored() {
    try {
      var value = window.localStorage.getItem(KEY);
      return value === "light" || value === "dark" ? value : "system";
    } catch (e) {
      return "system"; // storage refused (private mode, policy): follow the system
    }
  }

  function apply(theme) {
    if (theme === "system") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.setAttribute("data-theme", theme);
  }

  function label(button, theme) {
    if (!button) return;
    var prefix = document.createElement("span");
    prefix.className = "theme-prefix";
    prefix.textContent = "Theme: ";
    button.replaceChildren(prefix, WORDS[theme]); // the prefix gives way on narrow screens
    button.dataset.theme = theme;
    button.setAttribute(
      "aria-label",
      "Colour theme: " + WORDS[theme].toLowerCase() + ". Change to " + WORDS[next(theme)].toLowerCase()
    );
  }

  function next(theme) {
    return ORDER[(ORDER.indexOf(theme) + 1) % ORDER.length];
  }

  function set(theme) {
    try {
      if (theme === "system") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, theme);
    } catch (e) {
      /* not remembered, still applied */
    }
    apply(theme);
    label(document.getElementById("theme-toggle"), theme);
    return theme;
  }

  function cycle() {
    return set(next(stored()));
  }

  apply(stored());
  window.chatTheme = { cycle: cycle, current: stored, set: set };

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    label(button, stored());
    button.addEventListener("click", cycle);
  });
  // Another tab changed it.
  window.addEventListener("storage", function (event) {
    if (event.key === KEY) {
      apply(stored());
      label(document.getElementById("theme-toggle"), stored());
    }
  });
})();
