"""REST adapters of the memory app (docs/api.md): parse, authorise through the one chokepoint,
call one service or selector, serialise. Another user's session is ``404 not_found`` before the
body is even looked at."""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bots.models import ChatSession
from bots.queries import session_get_for_user, session_seat_get
from chat_platform.api import api_errors
from chat_platform.errors import ValidationFailed
from connections import usage
from memory import queries, search, services
from memory.api.serializers import (
    RecordCreateSerializer,
    RecordDetailSerializer,
    RecordSearchHitSerializer,
    RecordSerializer,
    RecordUpdateSerializer,
)
from memory.models import MemoryRecord
from memory.payloads import message_hit_payload, record_payload
from openai_api.keys import request_key_limits

LIST_MAX = 500
SEARCH_MAX = 50
PATCH_FIELDS = ("description", "body")
CREATE_FIELDS = ("name", "description", "body", "scope")
SNAPSHOT_MADE_BY_COMPACTION = (
    'Only "info" records can be made here: snapshots are written by compaction, read-only.'
)
IMMUTABLE_FIELDS = ("name", "scope", "kind", "first_seq", "last_seq", "token_count")


def _seat(request: Request, session_id: int) -> ChatSession:
    """The session, from the seat ``?bot=`` names in a room (its bot-scoped records, its
    snapshots); a bot that is not a participant is not found."""
    session = session_get_for_user(user=request.user, session_id=session_id)
    return session_seat_get(
        user=request.user, session=session, bot_id=request.query_params.get("bot")
    )


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    """The shared error shape (one schema component for the whole API)."""
    return api_errors(*codes)


def _choice(request: Request, field: str, choices: tuple[str, ...]) -> str | None:
    value = request.query_params.get(field)
    if value in (None, ""):
        return None
    if value not in choices:
        raise ValidationFailed(details={field: [f"Must be one of: {', '.join(choices)}."]})
    return value


def _valid(serializer_class: type, data: Any, **kwargs: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class SessionRecordListApi(APIView):
    @extend_schema(
        operation_id="v1_sessions_records_list",
        parameters=[
            OpenApiParameter("kind", str, enum=MemoryRecord.Kind.values, required=False),
            OpenApiParameter("scope", str, enum=MemoryRecord.Scope.values, required=False),
            OpenApiParameter("bot", int, required=False, description="A room's participant."),
            OpenApiParameter(
                "q",
                str,
                required=False,
                description="Search (as search_records): hits ranked best first, each with an "
                "excerpt (the record's matching messages, whole and dated) and their seqs.",
            ),
        ],
        responses={
            200: OpenApiResponse(
                RecordSearchHitSerializer(many=True),
                description="Records readable from the session, newest first (with q: ranked, "
                "each with excerpt).",
            ),
            **_errors(400, 401, 404),
        },
    )
    def get(self, request: Request, session_id: int) -> Response:
        session = _seat(request, session_id)
        kind = _choice(request, "kind", tuple(MemoryRecord.Kind.values))
        scope = _choice(request, "scope", tuple(MemoryRecord.Scope.values))
        q = request.query_params.get("q", "")
        if q.strip():
            # The question's embedding is charged to the key the search came through too.
            with usage.quota_scope(extra=request_key_limits(request.auth)):
                hits = queries.records_search(
                    session=session, query=q, limit=SEARCH_MAX, kind=kind, scope=scope, web=True
                )
            return Response(
                [
                    {**record_payload(h.record), "excerpt": h.excerpt, "seqs": list(h.seqs)}
                    for h in hits
                ]
            )
        records = queries.records_for_session(session=session, kind=kind, scope=scope).defer("body")
        return Response(RecordSerializer(records[:LIST_MAX], many=True).data)

    @extend_schema(
        request=RecordCreateSerializer,
        responses={201: RecordDetailSerializer, **_errors(400, 401, 404, 413)},
    )
    def post(self, request: Request, session_id: int) -> Response:
        session = _seat(request, session_id)
        if isinstance(request.data, dict):
            # An info record only: a snapshot is compaction's (and read-only), and a field this
            # call does not take is refused, not dropped (as a PATCH's is).
            refused = {
                field: ([SNAPSHOT_MADE_BY_COMPACTION] if field == "kind" else ["Unknown field."])
                for field in sorted(request.data)
                if field not in CREATE_FIELDS
                and not (field == "kind" and request.data[field] == "info")
            }
            if refused:
                raise ValidationFailed(details=refused)
        data = _valid(RecordCreateSerializer, request.data)
        record = services.record_create(session=session, **data)
        return Response(RecordDetailSerializer(record).data, status=status.HTTP_201_CREATED)


class SessionRecordDetailApi(APIView):
    @extend_schema(
        operation_id="v1_sessions_records_retrieve",
        responses={200: RecordDetailSerializer, **_errors(401, 404)},
    )
    def get(self, request: Request, session_id: int, name: str) -> Response:
        session = _seat(request, session_id)
        record = queries.record_get_for_session(session=session, name=name)
        return Response(RecordDetailSerializer(record).data)

    @extend_schema(
        request=RecordUpdateSerializer,
        responses={200: RecordDetailSerializer, **_errors(400, 401, 404, 413)},
    )
    def patch(self, request: Request, session_id: int, name: str) -> Response:
        session = _seat(request, session_id)
        queries.record_get_for_session(session=session, name=name)  # 404 before 400
        if isinstance(request.data, dict):
            refused = {
                field: (["Cannot be changed."] if field in IMMUTABLE_FIELDS else ["Unknown field."])
                for field in sorted(request.data)
                if field not in PATCH_FIELDS
            }
            if refused:
                raise ValidationFailed(details=refused)
        data = _valid(RecordUpdateSerializer, request.data)
        record = services.record_update(session=session, name=name, **data)
        return Response(RecordDetailSerializer(record).data)

    @extend_schema(responses={204: None, **_errors(400, 401, 404)})
    def delete(self, request: Request, session_id: int, name: str) -> Response:
        session = _seat(request, session_id)
        services.record_delete(session=session, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageSearchApi(APIView):
    """Search all my chats: the signed-in user's own messages, by content."""

    @extend_schema(
        operation_id="v1_search",
        parameters=[
            OpenApiParameter(
                "q",
                str,
                required=True,
                description="Words to find (natural language; no operator syntax). At most "
                f"{search.QUERY_MAX_CHARS} characters are read.",
            )
        ],
        responses={
            200: OpenApiResponse(
                description="{results: [{session: {id, title, bot}, message: {id, seq, role, "
                "created_at}, excerpt, rank}]}, best first; matched words in **…**."
            ),
            **_errors(400, 401),
        },
    )
    def get(self, request: Request) -> Response:
        q = request.query_params.get("q")
        if q is None or not q.strip():
            raise ValidationFailed(details={"q": ["Give the words to search for."]})
        hits = queries.messages_search_for_user(user_id=request.user.pk, query=q)
        return Response({"results": [message_hit_payload(hit) for hit in hits]})
