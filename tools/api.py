"""REST: ``/api/v1/tool-servers/`` (docs/tools.md). Parse, call one service or selector, shape.

Header values are write-only: no answer carries them (staff see ``header_names``). Non-staff
users list the servers they may use, with their tools, without URL, headers or who may use
them; any other id answers ``not_found``.
"""

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat_platform.errors import ValidationFailed
from tools import queries, services
from tools.models import ToolServer


def tool_server_payload(server: ToolServer, *, staff: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": server.pk,
        "name": server.name,
        "transport": server.transport,
        "tools": list(server.tool_list),
        "tools_refreshed_at": server.tools_refreshed_at,
    }
    if staff:
        data.update(
            url=server.url,
            header_names=list(server.header_names),
            public=server.public,
            groups=sorted(g.pk for g in server.groups.all()),
            refresh_error=server.refresh_error,
            created_at=server.created_at,
        )
    return data


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise ValidationFailed(details={"non_field_errors": ["Expected a JSON object."]})
    return dict(request.data)


class ToolSchema(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    input_schema = serializers.DictField()


class ToolServerSchema(serializers.Serializer):
    """The documented shape (``tool_server_payload`` writes it; staff see the last six)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    transport = serializers.ChoiceField(choices=ToolServer.Transport.choices)
    tools = ToolSchema(many=True)
    tools_refreshed_at = serializers.DateTimeField(allow_null=True)
    url = serializers.CharField(required=False)
    header_names = serializers.ListField(child=serializers.CharField(), required=False)
    public = serializers.BooleanField(required=False)
    groups = serializers.ListField(child=serializers.IntegerField(), required=False)
    refresh_error = serializers.CharField(required=False)
    created_at = serializers.DateTimeField(required=False)


_ToolServerInput = inline_serializer(
    "ToolServerInput",
    {
        "name": serializers.CharField(),
        "url": serializers.CharField(),
        "transport": serializers.ChoiceField(choices=ToolServer.Transport.choices, required=False),
        "headers": serializers.DictField(
            child=serializers.CharField(), required=False, write_only=True
        ),
        "public": serializers.BooleanField(required=False),
        "groups": serializers.ListField(child=serializers.IntegerField(), required=False),
    },
)


class ToolServerListApi(APIView):
    @extend_schema(operation_id="v1_tool_servers_list", responses=ToolServerSchema(many=True))
    def get(self, request: Request) -> Response:
        staff = queries.is_staff(request.user)
        found = queries.tool_server_list_for_user(user=request.user).prefetch_related("groups")
        return Response([tool_server_payload(s, staff=staff) for s in found])

    @extend_schema(request=_ToolServerInput, responses={201: ToolServerSchema})
    def post(self, request: Request) -> Response:
        server = services.tool_server_create(user=request.user, **_body(request))
        return Response(tool_server_payload(server, staff=True), status=status.HTTP_201_CREATED)


class ToolServerDetailApi(APIView):
    @extend_schema(responses=ToolServerSchema)
    def get(self, request: Request, server_id: str) -> Response:
        server = queries.tool_server_get_for_user(user=request.user, server_id=server_id)
        return Response(tool_server_payload(server, staff=queries.is_staff(request.user)))

    @extend_schema(request=_ToolServerInput, responses=ToolServerSchema)
    def patch(self, request: Request, server_id: str) -> Response:
        server = services.tool_server_update(
            user=request.user, server_id=server_id, **_body(request)
        )
        return Response(tool_server_payload(server, staff=True))

    @extend_schema(responses={204: None})
    def delete(self, request: Request, server_id: str) -> Response:
        services.tool_server_delete(user=request.user, server_id=server_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ToolServerRefreshApi(APIView):
    @extend_schema(
        request=None,
        responses=inline_serializer("ToolServerTools", {"tools": ToolSchema(many=True)}),
    )
    def post(self, request: Request, server_id: str) -> Response:
        server = services.tool_server_tools_refresh(user=request.user, server_id=server_id)
        return Response({"tools": server.tool_list})
