"""``POST /api/v1/auth/token/``: a DRF token for what the login page would let in
(docs/accounts.md, "The token endpoint").

The same checks as the page, in its order: the sign-in throttle (``chat_platform.signin``), the
password, approval (a pending account is told so, once the password is right), a verified email
address under mandatory verification, and the TOTP code (or a recovery code) of an account with
two-factor authentication, sent as ``code`` with the password. A refusal mints nothing.
"""

from typing import Any

from allauth.mfa.base.forms import AuthenticateForm
from allauth.mfa.utils import is_mfa_enabled
from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from accounts import services
from accounts.forms import PENDING_MESSAGE
from chat_platform.account_gate import UNVERIFIED_MESSAGE, email_verification_missing
from chat_platform.api import api_errors, secret_response
from chat_platform.errors import SignInRefused
from chat_platform.signin import SignInAttempt

MFA_REQUIRED_MESSAGE = (
    "This account uses two-factor authentication: send the code from your authenticator app "
    "(or a recovery code) as 'code' with the username and password."
)
MFA_INVALID_MESSAGE = "The two-factor code is not right (or was already used)."


@extend_schema_serializer(component_name="AuthToken")
class TokenRequestSerializer(AuthTokenSerializer):
    code = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="The TOTP (or recovery) code: required when the account has two-factor "
        "authentication.",
    )


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField()


def _field(data: Any, name: str) -> object:
    return data.get(name) if hasattr(data, "get") else None


class TokenSignInApi(ObtainAuthToken):
    serializer_class = TokenRequestSerializer
    # The API's own parsers, not the three DRF's view brings: its JSON parser refuses a body
    # nested past 64 levels (deeper, Python's own parser ran out of stack: a 500 for anyone).
    parser_classes = api_settings.DEFAULT_PARSER_CLASSES

    @extend_schema(
        request=TokenRequestSerializer,
        responses={200: TokenSerializer, **api_errors(403, 429)},
        description=(
            "`401 mfa_required` / `mfa_invalid`: the account has two-factor authentication and "
            "`code` is missing or wrong. `403 account_pending`: waiting for approval. "
            "`403 email_unverified`: email verification is mandatory and the address is not "
            "confirmed. Nothing is minted on any refusal."
        ),
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = request.data
        attempt = SignInAttempt(request, _field(data, "username"))
        if attempt.refused:
            raise attempt.exception()
        serializer = self.get_serializer(data=data)
        if not serializer.is_valid():
            pending = services.pending_user_for_credentials(
                username=_field(data, "username"), password=_field(data, "password")
            )
            if pending is not None:
                attempt.succeeded()
                raise SignInRefused("account_pending", PENDING_MESSAGE)
            serializer.is_valid(raise_exception=True)  # a wrong password: counted
        user = serializer.validated_data["user"]
        if email_verification_missing(user):
            attempt.succeeded()
            raise SignInRefused("email_unverified", UNVERIFIED_MESSAGE)
        if is_mfa_enabled(user):
            code = serializer.validated_data.get("code") or ""
            if not code.strip():
                attempt.succeeded()  # a right password before the code is no failure
                raise SignInRefused("mfa_required", MFA_REQUIRED_MESSAGE, http_status=401)
            if not AuthenticateForm(user=user, data={"code": code.strip()}).is_valid():
                # The slot stays taken: wrong codes count like wrong passwords.
                raise SignInRefused("mfa_invalid", MFA_INVALID_MESSAGE, http_status=401)
        attempt.succeeded()
        token, _created = Token.objects.get_or_create(user=user)
        return secret_response({"token": token.key})
