"""``/api/v1/api-keys/`` (docs/openai-api.md): the signed-in user's keys. Managed with the session
or a ``Token``, never with an API key (a key must not mint or revoke keys)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat_platform import errors
from chat_platform.api import api_errors, secret_response
from chat_platform.isotime import iso_utc
from openai_api import keys
from openai_api.models import ApiKey


class ApiKeyInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=keys.NAME_MAX_CHARS, trim_whitespace=True)
    bots = serializers.ListField(child=serializers.IntegerField(), required=False, allow_null=True)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    daily_token_limit = serializers.IntegerField(required=False, allow_null=True)
    access = serializers.ChoiceField(choices=ApiKey.Access.values, default=ApiKey.Access.FULL)


class ApiKeyOutputSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The key's visible prefix, also its id.")
    name = serializers.CharField()
    prefix = serializers.CharField()
    bots = serializers.ListField(child=serializers.IntegerField(), allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    daily_token_limit = serializers.IntegerField(allow_null=True)
    access = serializers.CharField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class ApiKeyCreatedSerializer(ApiKeyOutputSerializer):
    key = serializers.CharField(help_text="The key itself: shown in this answer only.")


def key_payload(key: ApiKey) -> dict:
    return {
        "id": key.prefix,
        "name": key.name,
        "prefix": key.prefix,
        "bots": None if key.all_bots else sorted(b.pk for b in key.bots.all()),
        "expires_at": iso_utc(key.expiry_date) if key.expiry_date else None,
        "daily_token_limit": key.daily_token_limit,
        "access": key.access,
        "last_used_at": iso_utc(key.last_used_at) if key.last_used_at else None,
        "created_at": iso_utc(key.created),
    }


def _not_with_a_key(request: Request) -> None:
    if isinstance(request.auth, ApiKey):
        raise errors.PermissionDenied("API keys are managed with your account, not with a key.")


class ApiKeyListApi(APIView):
    @extend_schema(responses=ApiKeyOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        _not_with_a_key(request)
        return Response([key_payload(k) for k in keys.key_list_for_user(user=request.user)])

    @extend_schema(
        request=ApiKeyInputSerializer, responses={201: ApiKeyCreatedSerializer, **api_errors(403)}
    )
    def post(self, request: Request) -> Response:
        _not_with_a_key(request)
        serializer = ApiKeyInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key, raw = keys.key_create(
            user=request.user,
            name=data["name"],
            bots=data.get("bots"),
            expires_at=data.get("expires_at"),
            daily_token_limit=data.get("daily_token_limit"),
            access=data["access"],
        )
        return secret_response({**key_payload(key), "key": raw}, status=status.HTTP_201_CREATED)


class ApiKeyDetailApi(APIView):
    @extend_schema(responses={204: None, **api_errors(403)})
    def delete(self, request: Request, prefix: str) -> Response:
        _not_with_a_key(request)
        keys.key_revoke(user=request.user, prefix=prefix)
        return Response(status=status.HTTP_204_NO_CONTENT)
