"""The Content-Security-Policy every answer carries (django-csp, configured in settings/core.py).

Replies are model output, and a model can be talked into writing anything it saw into a URL: an
image the browser fetches on render is then an exfiltration channel. So the pages load nothing
from elsewhere: scripts, styles, fonts, frames, media and connections come from this server only,
images from this server, ``data:`` and the origins an operator lists in ``CSP_IMG_SRC_EXTRA``;
no page may be framed, no ``<base>`` or form may point elsewhere, no plugin runs. The chat
renderer (static/chat/markdown.js) turns remote images into links, so the policy is the second
wall, not the only one. docs/security.md has the whole story.
"""

import re

from csp.constants import NONE, SELF
from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.http.response import HttpResponseBase

# scheme://host[:port], nothing else: no path, no wildcard, no keyword, no second source.
_ORIGIN = re.compile(
    r"https?://(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*"
    r"|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?",
    re.IGNORECASE,
)


def image_origins_parse(values: list[str]) -> list[str]:
    """``CSP_IMG_SRC_EXTRA`` as a list of origins (``https://img.example.com``, one trailing
    ``/`` dropped); raises ValueError naming whatever is not an http(s) origin."""
    origins: list[str] = []
    bad: list[str] = []
    for raw in values:
        value = raw.strip()
        if not value:
            continue
        if value.endswith("/") and not value.endswith("//"):
            value = value[:-1]
        if not _ORIGIN.fullmatch(value):
            bad.append(raw.strip())
        elif value not in origins:
            origins.append(value)
    if bad:
        raise ValueError(
            "not http(s) origins (scheme://host[:port], no path, no wildcard): " + ", ".join(bad)
        )
    return origins


def directives(*, img_src_extra: list[str]) -> dict[str, list[str]]:
    """The policy; ``connect-src`` also gets the page's own websocket origin, per request."""
    return {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:", *img_src_extra],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }


def websocket_source(request: HttpRequest) -> str | None:
    """``ws://host[:port]`` (``wss://`` over https) of the host the page was asked from.

    CSP Level 3 lets ``'self'`` match the same host's ws/wss, and current browsers do; older
    ones (Safari before 15.4) do not, so the origin is named too. The host is the validated one
    (``ALLOWED_HOSTS``, Django's host pattern), so it can carry no other source or directive."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's middleware, plus the websocket origin in ``connect-src``."""

    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        source = websocket_source(request)
        if source is not None and not report_only:
            update = dict(parts.update or {})  # the view's own update is shared: copy it
            connect = update.get("connect-src") or []
            if isinstance(connect, str):
                connect = [connect]
            update["connect-src"] = [*connect, source]
            parts.update = update
        return parts
