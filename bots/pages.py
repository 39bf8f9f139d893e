"""Server-rendered pages.

The chat page is only a shell: its script reads and writes everything through the public REST
API and the session websocket, so the browser has no private path into the domain and behaves
exactly like any other API client.
"""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie


@login_required
@ensure_csrf_cookie  # the script sends the cookie's token as X-CSRFToken on unsafe requests
def chat_page(request: HttpRequest) -> HttpResponse:
    return render(request, "chat/chat.html", {"user": request.user})
