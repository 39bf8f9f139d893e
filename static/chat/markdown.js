/*
 * Markdown for replies: marked (parser) -> DOMPurify (sanitiser) -> highlight.js (code), all
 * vendored under static/vendor/ (see its README). No hand-written parsing: the only work here is
 * wiring them together and decorating code blocks with a language label and a Copy button.
 *
 * window.chatMarkdown.render(container, text, {final}) replaces container's children.
 * Streaming replies are re-rendered whole on a throttle (see chat.js); highlighting, the costly
 * part, waits for the final render.
 */
(function () {
  "use strict";

  var hasLibs = typeof window.marked !== "undefined" && typeof window.DOMPurify !== "undefined";

  if (hasLibs) {
    window.marked.setOptions({ gfm: true, breaks: true });
    // Links in replies open in a new tab and tell the target nothing about us.
    window.DOMPurify.addHook("afterSanitizeAttributes", function (node) {
      if (node.tagName === "A" && node.getAttribute("href")) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    });
  }

  var PURIFY = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe"],
    FORBID_ATTR: ["style"],
    RETURN_DOM_FRAGMENT: true,
  };

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () {
        return legacyCopy(text);
      });
    }
    return legacyCopy(text);
  }

  function legacyCopy(text) {
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.append(area);
      area.select();
      var ok = false;
      try {
        ok = document.execCommand("copy");
      } catch (e) {
        ok = false;
      }
      area.remove();
      if (ok) resolve();
      else reject(new Error("copy refused"));
    });
  }

  function decorateCode(fragment, final) {
    fragment.querySelectorAll("pre > code").forEach(function (code) {
      var pre = code.parentNode;
      var match = /(?:^|\s)language-([\w+#.-]+)/.exec(code.className || "");
      var lang = match ? match[1] : "";
      if (final && window.hljs) {
        try {
          if (lang && window.hljs.getLanguage(lang)) window.hljs.highlightElement(code);
          else if (code.textContent.length < 20000) {
            var auto = window.hljs.highlightAuto(code.textContent);
            code.innerHTML = auto.value; // highlight.js escapes the text it wraps
            code.classList.add("hljs");
            if (!lang && auto.language) lang = auto.language;
          }
        } catch (e) {
          /* an unhighlighted block is still a readable block */
        }
      }
      var wrap = document.createElement("div");
      wrap.className = "code-block";
      var bar = document.createElement("div");
      bar.className = "code-bar";
      var label = document.createElement("span");
      label.className = "code-lang";
      label.textContent = lang || "code";
      var copy = document.createElement("button");
      copy.type = "button";
      copy.className = "button button-small button-quiet code-copy";
      copy.textContent = "Copy";
      copy.setAttribute("aria-label", "Copy " + (lang ? lang + " " : "") + "code");
      copy.addEventListener("click", function () {
        copyText(code.textContent).then(
          function () {
            copy.textContent = "Copied";
            setTimeout(function () {
              copy.textContent = "Copy";
            }, 2000);
          },
          function () {
            copy.textContent = "Copy failed";
          }
        );
      });
      bar.append(label, copy);
      pre.replaceWith(wrap);
      wrap.append(bar, pre);
    });
  }

  function render(container, text, opts) {
    opts = opts || {};
    text = String(text || "");
    if (!hasLibs) {
      container.textContent = text; // the libraries failed to load: plain text, still safe
      container.classList.remove("markdown");
      return;
    }
    var html = window.marked.parse(text);
    var fragment = window.DOMPurify.sanitize(html, PURIFY);
    decorateCode(fragment, opts.final !== false);
    // marked ends blocks with newlines; trailing whitespace text would only add a blank line.
    while (fragment.lastChild && fragment.lastChild.nodeType === 3 && !fragment.lastChild.textContent.trim()) {
      fragment.lastChild.remove();
    }
    container.classList.add("markdown");
    container.replaceChildren(fragment);
  }

  window.chatMarkdown = { render: render, available: hasLibs, copyText: copyText };
})();
