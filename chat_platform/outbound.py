"""One policy for every HTTP request a model call makes, whichever library makes it.

A model call leaves through one of several clients: the direct road's ``httpx.Client``
(``llm/openai_compat.py``), the OpenAI SDK's client inside litellm (which follows redirects), or
litellm's own ``HTTPHandler`` (also following them). Giving each its own settings would leave the
next road litellm adds unguarded, so the policy sits where all of them meet: httpx's transport.
``install()`` wraps ``httpx.HTTPTransport.handle_request`` once per process; the wrapper does
nothing unless the calling code is inside ``scope(policy)`` (the gateway opens one around every
request it makes to a provider), so the tests' and the platform's other clients are untouched.

Inside a scope:

* **No redirect is followed.** A 3xx answer raises ``OutboundRefused`` before any client can
  act on its ``Location``: an approved base answering 307 to a metadata address is a dead end.
* **Each connection's address is checked.** A request to the call's approved endpoint (the
  bot's api_base, listed by the operator in ``PROVIDER_API_BASES`` or set by staff) goes where
  the operator said, loopback and private addresses included. A request anywhere else is
  resolved first; it is refused unless every address is public (no loopback, private,
  link-local, metadata, shared, multicast or reserved range), and it is then sent to the
  address that was checked (TLS still verifies the host name), so a second DNS answer cannot
  swap it for an internal one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx
import structlog

from chat_platform.provider_policy import DEFAULT_PORTS, endpoint_parse

log = structlog.get_logger(__name__)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class OutboundRefused(Exception):
    """A request the outbound policy does not allow (never sent, or its redirect not followed).

    ``str()`` is fit to show a user: it names the rule and the address, never a key."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


Endpoint = tuple[str, str, int]  # (scheme, host, port)


@dataclass(frozen=True)
class Policy:
    # The endpoints the operator or staff approved for this call: any address is fine for them.
    approved: frozenset[Endpoint] = frozenset()
    # A staff-approved bot without an api_base: litellm chooses the provider's endpoint (or the
    # operator's environment does), so the destination is the operator's choice.
    any_destination: bool = False


def policy_for(*, approved_bases: Iterable[str] = (), any_destination: bool = False) -> Policy:
    endpoints = (endpoint_parse(url) for url in approved_bases if url)
    return Policy(
        approved=frozenset((e.scheme, e.host, e.port) for e in endpoints if e is not None),
        any_destination=any_destination,
    )


_current: ContextVar[Policy | None] = ContextVar("outbound_policy", default=None)


@contextlib.contextmanager
def scope(policy: Policy) -> Iterator[None]:
    """Every httpx request made by this thread (or task) until the block ends obeys ``policy``."""
    install()
    token = _current.set(policy)
    try:
        yield
    finally:
        _current.reset(token)


def address_is_public(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_link_local)


def _resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    seen: list[str] = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.append(address)
    return seen


def _check(request: httpx.Request, policy: Policy) -> None:
    url = request.url
    scheme = url.scheme.lower()
    host = (url.host or "").lower()
    port = url.port or DEFAULT_PORTS.get(scheme, 0)
    if policy.any_destination or (scheme, host, port) in policy.approved:
        return
    addresses = _resolve(host, port)
    if not addresses or not all(address_is_public(a) for a in addresses):
        raise OutboundRefused(f"{host} is not an allowed provider address")
    # Connect to the address just checked; the Host header and TLS keep the name.
    request.url = url.copy_with(host=addresses[0])
    if scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": host}


_original_handle_request: Any = None
_install_lock = threading.Lock()


def _guarded_handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
    policy = _current.get()
    if policy is None:
        return _original_handle_request(self, request)
    _check(request, policy)
    response: httpx.Response = _original_handle_request(self, request)
    if response.status_code in _REDIRECTS:
        # Where it pointed goes to the server's log only: the refusal's text reaches users (a
        # failed reply, a check, a connection's refresh) and must not tell them an address.
        log.warning(
            "outbound_redirect_refused",
            status=response.status_code,
            location=response.headers.get("location", ""),
        )
        response.close()
        raise OutboundRefused(
            f"the provider answered with a redirect (HTTP {response.status_code}), not followed",
            status_code=response.status_code,
        )
    return response


def install() -> None:
    """Wrap httpx's transport once per process (idempotent, thread-safe)."""
    global _original_handle_request
    if _original_handle_request is not None:
        return
    with _install_lock:
        if _original_handle_request is None:
            _original_handle_request = httpx.HTTPTransport.handle_request
            httpx.HTTPTransport.handle_request = _guarded_handle_request  # type: ignore[method-assign]


def refusal_in(exc: BaseException) -> OutboundRefused | None:
    """The ``OutboundRefused`` an SDK wrapped (litellm and the OpenAI SDK re-raise transport
    failures as their own connection errors), or None."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, OutboundRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
