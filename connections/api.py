"""REST: ``/api/v1/connections/`` (docs/connections.md). Parse, call one service or selector, shape.

The key is write-only: no answer carries it, only ``has_key``. Non-staff users list the
connections they may use (with their models), without base URL, key variable or who may use
them; anything they may not use answers ``not_found``.
"""

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat_platform.errors import ValidationFailed
from connections import queries, services
from connections.models import Connection


def connection_payload(connection: Connection, *, staff: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": connection.pk,
        "name": connection.name,
        "kind": connection.kind,
        "provider": queries.connection_prefix(connection),
        "models": list(connection.model_list),
        "models_refreshed_at": connection.models_refreshed_at,
    }
    if staff:
        data.update(
            base_url=connection.base_url,
            api_key_env=connection.api_key_env,
            has_key=connection.has_key,
            public=connection.public,
            groups=sorted(g.pk for g in connection.groups.all()),
            created_at=connection.created_at,
        )
    return data


def _is_staff(request: Request) -> bool:
    return bool(request.user.is_staff)


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ValidationFailed(details={"non_field_errors": ["Expected a JSON object."]})
    return dict(request.data)


class ConnectionSchema(serializers.Serializer):
    """The documented shape (``connection_payload`` writes it; staff see the last six)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Connection.Kind.choices)
    provider = serializers.CharField()
    models = serializers.ListField(child=serializers.DictField())
    models_refreshed_at = serializers.DateTimeField(allow_null=True)
    base_url = serializers.CharField(required=False)
    api_key_env = serializers.CharField(required=False)
    has_key = serializers.BooleanField(required=False)
    public = serializers.BooleanField(required=False)
    groups = serializers.ListField(child=serializers.IntegerField(), required=False)
    created_at = serializers.DateTimeField(required=False)


_ConnectionInput = inline_serializer(
    "ConnectionInput",
    {
        "name": serializers.CharField(),
        "kind": serializers.ChoiceField(choices=Connection.Kind.choices),
        "provider": serializers.CharField(required=False),
        "base_url": serializers.CharField(required=False),
        "api_key": serializers.CharField(required=False, write_only=True),
        "api_key_env": serializers.CharField(required=False),
        "public": serializers.BooleanField(required=False),
        "groups": serializers.ListField(child=serializers.IntegerField(), required=False),
    },
)


class ConnectionListApi(APIView):
    @extend_schema(operation_id="v1_connections_list", responses=ConnectionSchema(many=True))
    def get(self, request: Request) -> Response:
        staff = _is_staff(request)
        found = queries.connection_list_for_user(user=request.user).prefetch_related("groups")
        return Response([connection_payload(c, staff=staff) for c in found])

    @extend_schema(request=_ConnectionInput, responses={201: ConnectionSchema})
    def post(self, request: Request) -> Response:
        connection = services.connection_create(user=request.user, **_body(request))
        return Response(connection_payload(connection, staff=True), status=status.HTTP_201_CREATED)


class ConnectionDetailApi(APIView):
    @extend_schema(responses=ConnectionSchema)
    def get(self, request: Request, connection_id: int) -> Response:
        connection = queries.connection_get_for_user(user=request.user, connection_id=connection_id)
        return Response(connection_payload(connection, staff=_is_staff(request)))

    @extend_schema(request=_ConnectionInput, responses=ConnectionSchema)
    def patch(self, request: Request, connection_id: int) -> Response:
        connection = services.connection_update(
            user=request.user, connection_id=connection_id, **_body(request)
        )
        return Response(connection_payload(connection, staff=True))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, connection_id: int) -> Response:
        services.connection_delete(user=request.user, connection_id=connection_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ConnectionRefreshModelsApi(APIView):
    @extend_schema(
        request=None,
        responses=inline_serializer(
            "ConnectionModels", {"models": serializers.ListField(child=serializers.DictField())}
        ),
    )
    def post(self, request: Request, connection_id: int) -> Response:
        connection = services.connection_models_refresh(
            user=request.user, connection_id=connection_id
        )
        return Response({"models": connection.model_list})
