"""REST adapters of the compaction app."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chat_platform.api import api_errors
from compaction import queries, records, services
from compaction.payloads import event_payload, result_payload, summary_payload
from openai_api.keys import request_key_limits


class CompactInputSerializer(serializers.Serializer):
    focus = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


CompactionResultSerializer = inline_serializer(
    "CompactionResult",
    {
        "outcome": serializers.CharField(),
        "reason": serializers.CharField(),
        "tokens_before": serializers.IntegerField(),
        "tokens_after": serializers.IntegerField(),
        "summary": serializers.DictField(allow_null=True),
        "event": serializers.DictField(allow_null=True),
        "stopped": serializers.DictField(allow_null=True),
    },
)


class SessionCompactApi(APIView):
    @extend_schema(
        request=CompactInputSerializer,
        parameters=[
            OpenApiParameter("bot", int, required=False, description="A room's participant.")
        ],
        responses={200: CompactionResultSerializer, **api_errors(404, 409, 429, 503)},
    )
    def post(self, request: Request, session_id: int) -> Response:
        serializer = CompactInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = services.session_compact(
            user=request.user,
            session_id=session_id,
            focus=serializer.validated_data["focus"],
            bot_id=request.query_params.get("bot"),
            quota=request_key_limits(request.auth),
        )
        return Response(result_payload(result))


class RevertInputSerializer(serializers.Serializer):
    compact_rest = serializers.BooleanField(required=False, default=False)


RevertResultSerializer = inline_serializer(
    "RevertResult",
    {
        "summary": serializers.DictField(),
        "first_seq": serializers.IntegerField(),
        "last_seq": serializers.IntegerField(),
        "restored": inline_serializer(
            "RevertRestored",
            {
                "messages": serializers.IntegerField(),
                "tokens": serializers.IntegerField(),
                "summaries": serializers.ListField(child=serializers.IntegerField()),
            },
        ),
        "tokens_before": serializers.IntegerField(),
        "tokens_after": serializers.IntegerField(),
        "held": serializers.BooleanField(),
        "event": serializers.DictField(),
        "compaction": serializers.DictField(allow_null=True),
    },
)


class SummaryRevertApi(APIView):
    """Undo a compaction: its messages (a fused summary: its parents) come back to the context.
    ``validation_error`` with ``details.tokens_after`` when that would reach the hard threshold
    (then ``{"compact_rest": true}`` undoes it and compacts everything else);
    ``compaction_busy`` while a compaction of the chat runs."""

    @extend_schema(
        request=RevertInputSerializer,
        responses={200: RevertResultSerializer, **api_errors(400, 404, 409, 429, 503)},
    )
    def post(self, request: Request, summary_id: int) -> Response:
        serializer = RevertInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = services.summary_revert_for_user(
            user=request.user,
            summary_id=summary_id,
            compact_rest=serializer.validated_data["compact_rest"],
            quota=request_key_limits(request.auth),
        )
        return Response(services.revert_payload(result))


class ResummariseInputSerializer(serializers.Serializer):
    focus = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class SummaryResummariseApi(APIView):
    """Run the compaction of this summary's span again from its snapshot, with a focus. The
    quality gates apply: a rejected result keeps the old summary (``outcome``, ``reason`` and
    ``message`` say why); an accepted one supersedes it (``replaced``)."""

    @extend_schema(
        request=ResummariseInputSerializer,
        responses={
            200: inline_serializer(
                "ResummariseResult",
                {
                    "outcome": serializers.CharField(),
                    "reason": serializers.CharField(),
                    "tokens_before": serializers.IntegerField(),
                    "tokens_after": serializers.IntegerField(),
                    "summary": serializers.DictField(allow_null=True),
                    "event": serializers.DictField(allow_null=True),
                    "message": serializers.CharField(),
                    "replaced": serializers.DictField(),
                },
            ),
            **api_errors(400, 404, 409, 429, 503),
        },
    )
    def post(self, request: Request, summary_id: int) -> Response:
        serializer = ResummariseInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(
            services.summary_resummarise_for_user(
                user=request.user,
                summary_id=summary_id,
                focus=serializer.validated_data["focus"],
                quota=request_key_limits(request.auth),
            )
        )


class SummaryReleaseApi(APIView):
    """Release the hold on an undone compaction: automatic compaction may take it again."""

    @extend_schema(
        request=None,
        responses={
            200: inline_serializer(
                "SummaryRelease",
                {"summary": serializers.DictField(), "event": serializers.DictField()},
            ),
            **api_errors(400, 404),
        },
    )
    def post(self, request: Request, summary_id: int) -> Response:
        return Response(services.summary_release_for_user(user=request.user, summary_id=summary_id))


class ExpandInputSerializer(serializers.Serializer):
    record = serializers.CharField(max_length=80, required=False)
    summary = serializers.IntegerField(required=False, min_value=1)

    def validate(self, attrs: dict) -> dict:
        if ("record" in attrs) == ("summary" in attrs):
            raise serializers.ValidationError(
                {"record": ["Name a snapshot record, or give a summary id (one of the two)."]}
            )
        return attrs


class SessionExpandApi(APIView):
    """ "Use the full text next turn": the next reply's context carries this span's messages
    verbatim instead of its summary, inside the budget; for that reply only."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "bot",
                int,
                required=False,
                description="A room's participant (default: the summary's or snapshot's bot).",
            )
        ],
        request=ExpandInputSerializer,
        responses={
            200: inline_serializer(
                "ExpandResult",
                {
                    "record": serializers.CharField(),
                    "first_seq": serializers.IntegerField(),
                    "last_seq": serializers.IntegerField(),
                    "messages": serializers.IntegerField(),
                    "tokens": serializers.IntegerField(),
                    "replaces": serializers.ListField(child=serializers.IntegerField()),
                    "tokens_before": serializers.IntegerField(),
                    "tokens_after": serializers.IntegerField(),
                    "event": serializers.DictField(),
                },
            ),
            **api_errors(400, 404),
        },
    )
    def post(self, request: Request, session_id: int) -> Response:
        serializer = ExpandInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        return Response(
            services.session_expand_for_user(
                user=request.user,
                session_id=session_id,
                record=data.get("record"),
                summary_id=data.get("summary"),
                bot_id=request.query_params.get("bot"),
            )
        )


class SessionSummariesApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("bot", int, required=False, description="A room's participant.")
        ],
        responses={
            200: serializers.ListSerializer(child=serializers.DictField()),
            **api_errors(404),
        },
    )
    def get(self, request: Request, session_id: int) -> Response:
        summaries = queries.summary_list_for_user(
            user=request.user, session_id=session_id, bot_id=request.query_params.get("bot")
        )
        return Response([summary_payload(s) for s in summaries])


class CompactionEventsApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("session", int, required=False),
            OpenApiParameter("bot", int, required=False, description="A room's participant."),
        ],
        # ?session= names a session: unknown or someone else's is not_found.
        responses={
            200: serializers.ListSerializer(child=serializers.DictField()),
            **api_errors(404),
        },
    )
    def get(self, request: Request) -> Response:
        events = queries.event_list_for_user(
            user=request.user,
            session_id=request.query_params.get("session"),
            bot_id=request.query_params.get("bot"),
        )
        return Response([event_payload(e) for e in events[:500]])


MessageFitSerializer = inline_serializer(
    "MessageFit",
    {
        "message": serializers.IntegerField(),
        "budget_tokens": serializers.IntegerField(),
        "required_tokens": serializers.IntegerField(),
        "over_tokens": serializers.IntegerField(),
        "fits": serializers.BooleanField(),
    },
)


class MessageFitApi(APIView):
    """Whether a user message would fit if sent again now, and by how much it does not."""

    @extend_schema(responses={200: MessageFitSerializer, **api_errors(400, 404)})
    def get(self, request: Request, message_id: int) -> Response:
        return Response(queries.message_fit_for_user(user=request.user, message_id=message_id))


MessageContextSerializer = inline_serializer(
    "MessageContext",
    {
        "message": serializers.IntegerField(),
        "calls": serializers.ListSerializer(child=serializers.DictField()),
    },
)


class MessageContextApi(APIView):
    """What the model saw for a reply (docs/context-records.md): each call's parts with their
    provenance and token counts; ``?payload=1`` adds each call's ``messages`` rebuilt exactly as
    sent. The session's owner and staff only; anyone else gets not_found."""

    @extend_schema(
        parameters=[OpenApiParameter("payload", int, required=False, enum=[0, 1])],
        responses={200: MessageContextSerializer, **api_errors(404)},
    )
    def get(self, request: Request, message_id: int) -> Response:
        record = records.record_get_for_user(user=request.user, message_id=message_id)
        payload = request.query_params.get("payload", "") in ("1", "true")
        return Response(records.record_payload(record, payload=payload))
