"""A local fake OpenID Connect provider for the SSO tests (docs/accounts.md).

It serves what allauth's ``openid_connect`` provider reads: the discovery document, a JWKS with an
RSA key made at start, an authorization endpoint that redirects back with a code, and a token
endpoint that checks the client, the code, the redirect URI and PKCE, then returns an ID token
signed with that key. The next sign-in's identity (and any defect: another audience, an expired
token) is scripted::

    def test_sso(fake_oidc):
        fake_oidc.identity(email="ann@example.com", audience="someone-else")
        ...
        assert fake_oidc.token_requests[0]["client_id"] == fake_oidc.client_id
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa


@dataclass
class Identity:
    sub: str = "user-1"
    email: str = "ann@example.com"
    email_verified: bool = True
    preferred_username: str = "ann"
    # None: the client id (the right audience).
    audience: str | None = None
    # None: the provider's own issuer.
    issuer: str | None = None
    # Seconds from now; negative: already expired.
    expires_in: int = 600


class FakeOIDC:
    client_id = "chat-platform-test"
    client_secret = "fake-oidc-secret"  # noqa: S105 - a test fixture's secret
    kid = "fake-key-1"

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.fake = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._next = Identity()
        self._codes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.token_requests: list[dict[str, str]] = []
        self.authorize_requests: list[dict[str, str]] = []

    @property
    def issuer(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def identity(self, **fields: Any) -> Identity:
        """The identity the next authorization hands out."""
        self._next = Identity(**fields)
        return self._next

    def start(self) -> FakeOIDC:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- what the endpoints answer --------------------------------------------------------

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
        }

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def authorize(self, query: dict[str, str]) -> str:
        """The Location the authorization endpoint redirects to."""
        self.authorize_requests.append(query)
        if query.get("client_id") != self.client_id or query.get("response_type") != "code":
            raise ValueError("unknown client or response type")
        code = secrets.token_urlsafe(16)
        with self._lock:
            self._codes[code] = {
                "identity": self._next,
                "redirect_uri": query["redirect_uri"],
                "nonce": query.get("nonce"),
                "code_challenge": query.get("code_challenge"),
            }
        return f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.token_requests.append(form)
        if form.get("client_id") != self.client_id or form.get("client_secret") != (
            self.client_secret
        ):
            return 401, {"error": "invalid_client"}
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)
        if grant is None or form.get("redirect_uri") != grant["redirect_uri"]:
            return 400, {"error": "invalid_grant"}
        if grant["code_challenge"]:
            digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant["code_challenge"]:
                return 400, {"error": "invalid_grant", "error_description": "PKCE"}
        identity: Identity = grant["identity"]
        now = int(time.time())
        claims = {
            "iss": identity.issuer or self.issuer,
            "sub": identity.sub,
            "aud": identity.audience or self.client_id,
            "iat": now - 5,
            "exp": now + identity.expires_in,
            "email": identity.email,
            "email_verified": identity.email_verified,
            "preferred_username": identity.preferred_username,
        }
        if grant["nonce"]:
            claims["nonce"] = grant["nonce"]
        id_token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})
        return 200, {
            "access_token": secrets.token_urlsafe(16),
            "token_type": "Bearer",
            "expires_in": 3600,
            "id_token": id_token,
        }


class _Handler(BaseHTTPRequestHandler):
    @property
    def fake(self) -> FakeOIDC:
        return self.server.fake  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/.well-known/openid-configuration":
            self._json(200, self.fake.discovery())
        elif parts.path == "/jwks":
            self._json(200, self.fake.jwks())
        elif parts.path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            try:
                location = self.fake.authorize(query)
            except (KeyError, ValueError) as exc:
                self._json(400, {"error": "invalid_request", "error_description": str(exc)})
                return
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._json(404, {"error": "not_found"})

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/token":
            self._json(404, {"error": "not_found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
        status, payload = self.fake.token(form)
        self._json(status, payload)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def fake_oidc() -> Iterator[FakeOIDC]:
    fake = FakeOIDC().start()
    try:
        yield fake
    finally:
        fake.stop()
