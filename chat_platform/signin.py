"""Sign-in throttling: failed attempts per account and per address (docs/api.md ``rate_limited``).

Every way in that checks a password goes through ``SignInAttempt``: the token endpoint
(``accounts.api.TokenSignInApi``, which counts a wrong TOTP code as a failure too), the login
page and the admin login (``sign_in_throttled``). Two DRF throttles count failed attempts over a
sliding window on the ``throttle`` cache (Redis in real mode, so the counts hold across web
workers and processes):

* ``SignInAccountThrottle``: by the submitted username (case-folded, hashed), whichever address
  it comes from, existing account or not (the answer never tells which);
* ``SignInAddressThrottle``: by the client address, whichever usernames it tries.

Rates: ``LOGIN_RATE_PER_ACCOUNT`` and ``LOGIN_RATE_PER_ADDRESS``. An attempt takes a slot in both
before the password is checked and gives it back when the sign-in succeeds, so only failures
count and concurrent guesses cannot overtake the count. Past either limit every attempt is
refused, the right password included: the API answers 429 ``rate_limited`` with ``Retry-After``,
the pages a 429 page saying how long to wait.
"""

import hashlib
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework import exceptions as drf
from rest_framework.throttling import SimpleRateThrottle

THROTTLE_CACHE = "throttle"
_PASSWORD_ACCEPTED = "_sign_in_password_accepted"


def sign_in_password_accepted(request: HttpRequest) -> None:
    """The login view saw the right password (the account may still be asked for its TOTP code):
    the attempt is not a failure."""
    setattr(request, _PASSWORD_ACCEPTED, True)


class _FailureThrottle(SimpleRateThrottle):
    """DRF's sliding-window throttle, except that ``allow_request`` only looks: the slot is
    taken by ``take`` and given back by ``give_back``."""

    rate_setting = ""

    def __init__(self, request: HttpRequest, username: str) -> None:
        self.cache = caches[THROTTLE_CACHE]
        self.username = username
        super().__init__()
        self.allowed = self.allow_request(request, None)

    def get_rate(self) -> str:
        # Read at each request (not at import, as DRF's THROTTLE_RATES are): tests and settings
        # overrides take effect.
        return getattr(settings, self.rate_setting)

    def throttle_success(self) -> bool:
        return True

    def _history(self) -> list[float]:
        history = self.cache.get(self.key, [])
        return [t for t in history if t > self.now - self.duration]

    def take(self) -> None:
        if self.key is not None:
            self.cache.set(self.key, [self.now, *self._history()], self.duration)

    def give_back(self) -> None:
        if self.key is not None:
            history = self._history()
            if self.now in history:
                history.remove(self.now)
                self.cache.set(self.key, history, self.duration)


class SignInAccountThrottle(_FailureThrottle):
    scope = "sign_in_account"
    rate_setting = "LOGIN_RATE_PER_ACCOUNT"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        # As the sign-in form reads it (Django's UsernameField: NFKC): a full-width "ｏwner"
        # signs in as "owner", and counted in a bucket of its own.
        name = unicodedata.normalize("NFKC", self.username).strip().casefold()
        if not name:
            return None
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        return self.cache_format % {"scope": self.scope, "ident": digest}


class SignInAddressThrottle(_FailureThrottle):
    scope = "sign_in_address"
    rate_setting = "LOGIN_RATE_PER_ADDRESS"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class SignInThrottled(drf.Throttled):
    default_detail = "Too many failed sign-in attempts."
    extra_detail_singular = "Try again in {wait} second."
    extra_detail_plural = "Try again in {wait} seconds."


class SignInAttempt:
    """One sign-in attempt: ``refused`` (with ``wait`` seconds) past either limit; else it holds
    a slot in both until ``succeeded()`` gives them back."""

    def __init__(self, request: HttpRequest, username: object) -> None:
        name = username if isinstance(username, str) else ""
        # Counted and taken as one step (``_one_at_a_time``): twelve concurrent guesses read
        # the same empty history, and seven were checked against a limit of three.
        with _one_at_a_time():
            self.throttles = [
                SignInAccountThrottle(request, name),
                SignInAddressThrottle(request, name),
            ]
            waits = [t.wait() or 0 for t in self.throttles if not t.allowed]
            self.refused = bool(waits)
            self.wait = max(waits, default=0)
            if not self.refused:
                for throttle in self.throttles:
                    throttle.take()

    def succeeded(self) -> None:
        with _one_at_a_time():
            for throttle in self.throttles:
                throttle.give_back()

    def exception(self) -> SignInThrottled:
        return SignInThrottled(wait=self.wait)


_local_lock = threading.Lock()
LOCK_SECONDS = 5


@contextmanager
def _one_at_a_time() -> Iterator[None]:
    """The sign-in counts are read and written by one attempt at a time: across processes by a
    lock in the throttle cache's Redis, within one process (the in-memory cache) by a lock."""
    cache = caches[THROTTLE_CACHE]
    client = getattr(cache, "_cache", None)
    if client is None or not hasattr(client, "get_client"):
        with _local_lock:
            yield
        return
    redis = client.get_client(write=True)
    with redis.lock(
        cache.make_key("sign-in-lock"), timeout=LOCK_SECONDS, blocking_timeout=LOCK_SECONDS
    ):
        yield


def sign_in_throttle_clear() -> None:
    """Lift every sign-in lockout (forget all counts): the throttle cache holds nothing else."""
    cache = caches[THROTTLE_CACHE]
    client = getattr(cache, "_cache", None)
    if client is not None and hasattr(client, "get_client"):
        # Redis: delete only this cache's keys (its KEY_PREFIX); FLUSHDB would also drop the
        # broker's queues and the channel layer when they share the database.
        redis = client.get_client(write=True)
        keys = list(redis.scan_iter(match=cache.make_key("*")))
        if keys:
            redis.delete(*keys)
    else:
        cache.clear()


def sign_in_throttled(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Throttle a login page view (Django's LoginView, the admin login): a POST that does not
    sign in counts as a failure; past the limits the answer is a 429 page."""

    @wraps(view)
    def throttled_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method != "POST":
            return view(request, *args, **kwargs)
        attempt = SignInAttempt(request, request.POST.get("username", ""))
        if attempt.refused:
            response = render(
                request,
                "registration/login_throttled.html",
                {"message": str(attempt.exception().detail), "login_path": request.get_full_path()},
                status=429,
            )
            response["Retry-After"] = str(int(attempt.exception().wait or 0))
            return response
        response = view(request, *args, **kwargs)
        if response.status_code in (301, 302, 303) and (
            request.user.is_authenticated or getattr(request, _PASSWORD_ACCEPTED, False)
        ):
            attempt.succeeded()
        return response

    return throttled_view
