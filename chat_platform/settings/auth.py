"""Accounts: sign-up modes, allauth, two-factor codes, email, single sign-on (docs/accounts.md)."""

from django.core.exceptions import ImproperlyConfigured

from chat_platform import oidc
from chat_platform.settings.core import DEBUG, EMBEDDED, env

# --- Accounts (accounts app, django-allauth; docs/accounts.md) ------------------------------
# The login page stays Django's (accounts.views.SignInView: same form, same throttle); a correct
# password is handed to allauth's login flow, which asks for the TOTP code when the account has
# one. Sign-up, email verification, password reset, TOTP set-up and SSO are allauth's pages.
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_SIGNUP_MODES = ("closed", "invite", "approval", "open")
# closed: staff create accounts; invite: a single-use link from staff; approval: anyone signs
# up and waits (inactive) until staff approve; open: anyone. Closed unless said otherwise, in
# both modes: a site is never open by accident.
ACCOUNT_SIGNUP_MODE = env.str("ACCOUNT_SIGNUP_MODE", default="closed")
if ACCOUNT_SIGNUP_MODE not in ACCOUNT_SIGNUP_MODES:
    raise ImproperlyConfigured(
        f"ACCOUNT_SIGNUP_MODE must be one of {', '.join(ACCOUNT_SIGNUP_MODES)}"
    )
ACCOUNT_INVITE_DAYS = env.int("ACCOUNT_INVITE_DAYS", default=7)
if not 1 <= ACCOUNT_INVITE_DAYS <= 365:
    raise ImproperlyConfigured("ACCOUNT_INVITE_DAYS must be between 1 and 365")
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "accounts.adapter.SocialAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = env.str("ACCOUNT_EMAIL_VERIFICATION", default="optional")
if ACCOUNT_EMAIL_VERIFICATION not in ("none", "optional", "mandatory"):
    raise ImproperlyConfigured("ACCOUNT_EMAIL_VERIFICATION must be none, optional or mandatory")
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_PASSWORD_RESET_BY_CODE_ENABLED = False
# allauth's own rate limits (sign-up, password reset, email confirmation, TOTP codes) stay on;
# password failures are counted by chat_platform/signin.py alone (allauth's login form, the
# only user of its "login_failed" limit for passwords, is not served).
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = env.str("MFA_TOTP_ISSUER", default="chat-platform")
# A code is accepted for one 30-second step either side of now (allauth's default is none): a
# code read just before its step ends still works when it arrives, and a clock a few seconds off
# does not lock the account out. A used code stays used for the whole window (docs/accounts.md).
MFA_TOTP_TOLERANCE = 1
# Email: the console in embedded mode; SMTP from EMAIL_URL in real mode
# (smtp+tls://user:password@host:587, django-environ's form).
EMAIL_URL = env.str("EMAIL_URL", default="consolemail://" if EMBEDDED else "smtp://localhost:25")
globals().update(env.email_url_config(EMAIL_URL))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="chat-platform <noreply@localhost>")
# Single sign-on with any OpenID Connect provider (allauth's openid_connect, chat_platform/oidc.py).
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
OIDC_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_NAME = env.str("OIDC_NAME", default="single sign-on")
OIDC_ALLOWED_DOMAINS = [d.strip().lower() for d in env.list("OIDC_ALLOWED_DOMAINS", default=[])]
OIDC_CREATE_ACCOUNTS = env.bool("OIDC_CREATE_ACCOUNTS", default=False)
# https only (plain http with DEBUG, for a local provider): the ID token's signature is not
# re-checked when it comes straight from the token endpoint (OpenID Connect Core 3.1.3.7), so
# that connection must be TLS.
if OIDC_ISSUER and not (
    (OIDC_ISSUER.startswith("https://") or (DEBUG and OIDC_ISSUER.startswith("http://")))
    and OIDC_CLIENT_ID
):
    raise ImproperlyConfigured(
        "OIDC_ISSUER must be an https:// URL (http:// only with DEBUG), and needs OIDC_CLIENT_ID"
    )
SOCIALACCOUNT_PROVIDERS = oidc.providers_setting(
    issuer=OIDC_ISSUER, client_id=OIDC_CLIENT_ID, secret=OIDC_CLIENT_SECRET, name=OIDC_NAME
)
SOCIALACCOUNT_AUTO_SIGNUP = True
# An existing account whose email the provider vouches for (email_verified) signs in as itself,
# but only when that account's address was verified here too (or set by staff): the social
# adapter (accounts/adapter.py) never hands a self-registered, unconfirmed account to SSO.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
SOCIALACCOUNT_STORE_TOKENS = False
