"""The ``SOCIALACCOUNT_PROVIDERS`` value for one generic OpenID Connect provider (allauth's
``openid_connect``), from the ``OIDC_*`` settings; shared by the settings and the tests."""

from typing import Any

PROVIDER_ID = "sso"


def providers_setting(*, issuer: str, client_id: str, secret: str, name: str) -> dict[str, Any]:
    apps = []
    if issuer:
        apps.append(
            {
                "provider_id": PROVIDER_ID,
                "name": name,
                "client_id": client_id,
                "secret": secret,
                "settings": {
                    "server_url": issuer,
                    # Claims come from the ID token, whose audience, expiry and issuer are
                    # checked; the issuer expected is the configured one, whatever the
                    # discovery document says.
                    "fetch_userinfo": False,
                    "openid_configuration_overrides": {"issuer": issuer},
                },
            }
        )
    return {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": apps}}
