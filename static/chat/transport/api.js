/*
 * REST: the API under /api/v1/ is the source of truth. api() resolves with the parsed body and
 * rejects with an ApiError (status, code, message, details); a 401 goes back to the login page.
 */

import { quotaWords } from "../lib/quota.js";
import { API, LOGIN_URL } from "../state/page.js";

function ApiError(status, body) {
  var err = (body && body.error) || {};
  this.status = status;
  this.code = err.code || (status === 0 ? "network_error" : "http_" + status);
  this.message =
    err.message ||
    (body && typeof body.detail === "string" ? body.detail : "") ||
    (status === 0 ? "Could not reach the server." : "Request failed (" + status + ").");
  this.details = err.details === undefined ? null : err.details;
}

export function csrfToken() {
  var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  var meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.getAttribute("content") : "";
}

export function api(method, path, body) {
  var opts = {
    method: method,
    credentials: "same-origin",
    headers: { Accept: "application/json" },
  };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  if (method !== "GET" && method !== "HEAD") opts.headers["X-CSRFToken"] = csrfToken();
  return fetch(API + path, opts).then(
    function (res) {
      return res.text().then(function (text) {
        var data = null;
        if (text) {
          try {
            data = JSON.parse(text);
          } catch (e) {
            data = null;
          }
        }
        if (res.status === 401) {
          // Signed out elsewhere (or the session expired): back to the login page.
          window.location.assign(LOGIN_URL + "?next=" + encodeURIComponent(location.pathname));
        }
        if (!res.ok) throw new ApiError(res.status, data);
        return data;
      });
    },
    function () {
      throw new ApiError(0, null);
    }
  );
}

export function asList(data) {
  if (Array.isArray(data)) return data;
  if (data && Array.isArray(data.results)) return data.results;
  return [];
}

export function describeError(err) {
  if (!err) return "Something went wrong.";
  if (err.code === "quota_exceeded") {
    var words = quotaWords(err.details);
    return words.title + " " + words.advice;
  }
  var text = err.message || String(err);
  if (err.code && err.code.indexOf("http_") !== 0 && err.code !== "network_error") {
    text += " (" + err.code + ")";
  }
  return text;
}
