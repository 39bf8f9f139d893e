/*
 * Markdown for replies: marked (parser) -> DOMPurify (sanitiser) -> highlight.js (code) and
 * KaTeX (LaTeX math), all vendored under static/vendor/ (see its README). No hand-written parsing: the only work here is
 * wiring them together and decorating code blocks with a language label and a Copy button.
 *
 * window.chatMarkdown.render(container, text, {final}) replaces container's children.
 * Streaming replies are re-rendered whole on a throttle (see chat.js); highlighting, the costly
 * part, waits for the final render.
 *
 * Images: a reply is model output, and an image the browser fetches on render could carry in its
 * URL anything the model saw. Only images from this server, data:image/<raster> and the origins
 * the operator allowed (CSP_IMG_SRC_EXTRA, given to the page as data-image-origins) render; any
 * other http(s) image becomes a link (its alt text, or the URL, as the text), anything else just
 * its alt text. The Content-Security-Policy refuses such fetches too (docs/security.md).
 */
(function () {
  "use strict";

  var hasLibs = typeof window.marked !== "undefined" && typeof window.DOMPurify !== "undefined";

  var LINK_REL = "noopener noreferrer nofollow";
  var DATA_IMAGE = /^data:image\/(?:png|gif|jpeg|webp|avif|bmp);base64,[a-z0-9+/]*={0,2}$/i;
  var imageOrigins = null;
  // Images of the render in progress whose src is not allowed: [img, link href or ""].
  var held = null;

  function allowedOrigins() {
    if (imageOrigins === null) {
      var app = document.getElementById("chat-app");
      var listed = ((app && app.dataset.imageOrigins) || "").split(/\s+/);
      imageOrigins = [window.location.origin];
      listed.forEach(function (origin) {
        try {
          if (origin) imageOrigins.push(new URL(origin).origin);
        } catch (e) {
          /* not an origin: nothing allowed by it */
        }
      });
    }
    return imageOrigins;
  }

  // "image" (render it), "link" (an http(s) URL elsewhere) or "text" (anything else).
  function imageVerdict(src) {
    if (/^data:/i.test(src)) return DATA_IMAGE.test(src) ? "image" : "text";
    var url;
    try {
      url = new URL(src, document.baseURI);
    } catch (e) {
      return "text";
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") return "text";
    return allowedOrigins().indexOf(url.origin) >= 0 ? "image" : "link";
  }

  // --- LaTeX math (KaTeX, vendored: static/vendor/README.md) ---------------------------------
  // marked finds the math (so `$x$` inside code stays code) and leaves an empty element holding
  // the TeX in data-tex; once DOMPurify is done, KaTeX draws into it. KaTeX builds its nodes
  // itself, setting sizes through element.style (which the Content-Security-Policy allows, unlike
  // style attributes), and with `trust` off it makes no link, image or script.
  // Display: $$…$$ and \[…\]; inline: $…$ (not "$5 and $10": no space inside the dollars, no
  // digit after the closing one) and \(…\).
  var MATH_BLOCK = /^ {0,3}(?:\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\])[ \t]*(?:\n+|$)/;
  var MATH_INLINE = /^(?:\$\$([^$]+?)\$\$|\\\[([\s\S]+?)\\\]|\\\(([\s\S]+?)\\\)|\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d))/;

  function escapeAttr(text) {
    return text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // A block's math is a <div>; math inside a paragraph a <span> (displayed or not).
  function mathHolder(tex, display, block) {
    var tag = block ? "div" : "span";
    var cls = display ? "math math-display" : "math math-inline";
    return "<" + tag + ' class="' + cls + '" data-tex="' + escapeAttr(tex.trim()) + '"></' + tag + ">";
  }

  var mathExtensions = [
    {
      name: "mathBlock",
      level: "block",
      start: function (src) {
        var m = /(?:^|\n) {0,3}(?:\$\$|\\\[)/.exec(src);
        return m ? m.index + (m[0].charAt(0) === "\n" ? 1 : 0) : undefined;
      },
      tokenizer: function (src) {
        var m = MATH_BLOCK.exec(src);
        if (m) return { type: "mathBlock", raw: m[0], tex: m[1] !== undefined ? m[1] : m[2] };
      },
      renderer: function (token) {
        return mathHolder(token.tex, true, true) + "\n";
      },
    },
    {
      name: "mathInline",
      level: "inline",
      start: function (src) {
        var m = /\$|\\[([]/.exec(src);
        return m ? m.index : undefined;
      },
      tokenizer: function (src) {
        var m = MATH_INLINE.exec(src);
        if (!m) return;
        var display = m[1] !== undefined || m[2] !== undefined;
        var tex = m[1] !== undefined ? m[1] : m[2] !== undefined ? m[2] : m[3] !== undefined ? m[3] : m[4];
        return { type: "mathInline", raw: m[0], tex: tex, display: display };
      },
      renderer: function (token) {
        return mathHolder(token.tex, token.display, false);
      },
    },
  ];

  function drawMath(fragment) {
    fragment.querySelectorAll(".math[data-tex]").forEach(function (node) {
      var tex = node.getAttribute("data-tex");
      var display = node.classList.contains("math-display");
      if (!window.katex) {
        // KaTeX did not load: the TeX as written, still readable.
        node.textContent = display ? "$$" + tex + "$$" : "$" + tex + "$";
        return;
      }
      try {
        window.katex.render(tex, node, { displayMode: display, throwOnError: false, trust: false });
      } catch (e) {
        node.textContent = tex;
      }
    });
  }

  if (hasLibs) {
    window.marked.setOptions({ gfm: true, breaks: true });
    window.marked.use({ extensions: mathExtensions });
    window.DOMPurify.addHook("afterSanitizeAttributes", function (node) {
      // Links in replies open in a new tab and tell the target nothing about us.
      if (node.tagName === "A" && node.getAttribute("href")) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", LINK_REL);
      }
      // Still in DOMPurify's inert document, where nothing is fetched: an image that may not
      // load loses its src here, and is replaced once sanitising is over (render, below).
      if (node.tagName === "IMG" && held) {
        var src = (node.getAttribute("src") || "").trim();
        var verdict = imageVerdict(src);
        if (verdict !== "image") {
          node.removeAttribute("src");
          held.push([node, verdict === "link" ? new URL(src, document.baseURI).href : ""]);
        }
      }
    });
  }

  var PURIFY = {
    USE_PROFILES: { html: true },
    // Media would fetch from wherever a reply says, like images: replies have none.
    FORBID_TAGS: [
      "style", "form", "input", "button", "textarea", "select", "iframe",
      "audio", "video", "source", "track", "picture",
    ],
    // srcset and background name images too (the src check above sees only src).
    FORBID_ATTR: ["style", "srcset", "background", "poster"],
    RETURN_DOM_FRAGMENT: true,
  };

  // An image that may not load: a link to it (text: its alt, or the URL), or its alt text alone
  // where it is no http(s) URL or already inside a link.
  function replaceImage(img, href) {
    var alt = (img.getAttribute("alt") || "").trim();
    if (!href || img.closest("a")) {
      img.replaceWith(document.createTextNode(alt || href));
      return;
    }
    var link = document.createElement("a");
    link.href = href;
    link.target = "_blank";
    link.rel = LINK_REL;
    link.className = "remote-image";
    link.title = "Image not loaded: " + href;
    link.textContent = alt || href;
    img.replaceWith(link);
  }

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
    held = [];
    var fragment;
    try {
      fragment = window.DOMPurify.sanitize(html, PURIFY);
      held.forEach(function (entry) {
        replaceImage(entry[0], entry[1]);
      });
    } finally {
      held = null;
    }
    drawMath(fragment);
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
