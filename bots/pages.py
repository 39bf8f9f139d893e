"""Server-rendered pages (docs/architecture.md).

The chat page is only a shell: its script reads and writes everything through the public REST
API and the session websocket, so the browser has no private path into the domain and behaves
exactly like any other API client. The URL names the chat (``/chat/<id>/``), so a chat can be
bookmarked and Back/Forward move between chats (the script uses ``history.pushState``).
"""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import ensure_csrf_cookie

from bots import queries
from chat_platform.errors import NotFound


def _chat_shell(
    request: HttpRequest, *, session_id: int | None, bot_id: int | None
) -> HttpResponse:
    return render(
        request,
        "chat/chat.html",
        {
            "user": request.user,
            "session_id": session_id or "",
            "bot_id": bot_id or "",
            # Images in replies render only from these (and this server, data:), as the
            # Content-Security-Policy allows; any other becomes a link (static/chat/markdown.js).
            "image_origins": " ".join(settings.CSP_IMG_SRC_EXTRA),
            "attach_max_bytes": settings.ATTACHMENT_MAX_BYTES,
            "attach_limits": attach_limits_text(),
        },
    )


def _size_words(size: int) -> str:
    if size >= 1024 * 1024 and size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024):,} MB"
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024:,} KB"
    return f"{size:,} bytes"


def attach_limits_text() -> str:
    """The composer's note on what may be attached, from the settings that enforce it."""
    return (
        f"Up to {_size_words(settings.ATTACHMENT_MAX_BYTES)} per file, "
        f"{settings.ATTACHMENT_MESSAGE_MAX_FILES:,} files and "
        f"{_size_words(settings.ATTACHMENT_MESSAGE_MAX_BYTES)} per message: text, Markdown, CSV, "
        "JSON, code and PDF files (the model reads their text), and images for models that "
        "accept them."
    )


@login_required
def chat_home(request: HttpRequest) -> HttpResponse:
    """``/``: the chat used last, or the empty page where typing starts a new chat."""
    last = queries.session_list_for_user(user=request.user).order_by("-updated_at", "-id").first()
    if last is not None:
        return redirect("chat-session", session_id=last.pk)
    return _new_chat(request)


@ensure_csrf_cookie  # the script sends the cookie's token as X-CSRFToken on unsafe requests
def _new_chat(request: HttpRequest) -> HttpResponse:
    return _chat_shell(request, session_id=None, bot_id=None)


@login_required
@ensure_csrf_cookie
def chat_session_page(request: HttpRequest, session_id: int) -> HttpResponse:
    """``/chat/<id>/``: that chat; another user's (or a missing) one is a 404 either way."""
    try:
        session = queries.session_get_for_user(user=request.user, session_id=session_id)
    except NotFound:
        raise Http404("No such chat.") from None
    return _chat_shell(request, session_id=session.pk, bot_id=session.bot_id)


@login_required
@ensure_csrf_cookie
def chat_new_page(request: HttpRequest) -> HttpResponse:
    """``/chat/new/``: a fresh chat, created when the first message is sent."""
    return _new_chat(request)
