"""REST adapters: parse, call one service or selector, serialise. No logic lives here."""

import time

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bots import queries
from bots.api.serializers import (
    BotInputSerializer,
    BotOutputSerializer,
    BranchPointSerializer,
    ContextReportSerializer,
    MessageEditSerializer,
    MessageInputSerializer,
    MessageOutputSerializer,
    ParticipantInputSerializer,
    ParticipantOutputSerializer,
    ParticipantPatchSerializer,
    SendOutputSerializer,
    SessionInputSerializer,
    SessionOutputSerializer,
    SessionPatchSerializer,
)
from bots.command_check import check_send
from bots.models import ChatSession, Message
from bots.realtime import message_error, message_payload
from chat_platform import errors
from chat_platform.api import api_errors, error_response
from chat_platform.heavy import heavy_request
from compaction.payloads import result_payload
from compaction.pipeline import context_report
from compaction.queries import message_compacted, seat_compacted_ids
from openai_api.keys import request_key_limits
from turns.services import bot as bot_services
from turns.services import branch as branch_services
from turns.services import message as message_services
from turns.services import participants as participant_services
from turns.services import retry as retry_services
from turns.services import send as send_services
from turns.services import session as session_services


def _valid(serializer_class, data, **kwargs):
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _bot_fields_known(data: object) -> None:
    """A field a bot does not have (a misspelt setting) is refused, not dropped: the answer
    would look like success. What a bot answer carries (``id``, ``owner``…) may come back as
    read; it is not set from here (docs/bots.md, "No unknown fields")."""
    if not hasattr(data, "keys"):
        return  # not an object: the serializer says so
    unknown = sorted(set(data.keys()) - set(BotOutputSerializer.Meta.fields))
    if unknown:
        raise errors.ValidationFailed(details={name: ["Unknown field."] for name in unknown})


class BotListApi(APIView):
    @extend_schema(responses=BotOutputSerializer(many=True))
    def get(self, request: Request) -> Response:
        bots = queries.bot_list_for_user(user=request.user)
        return Response(BotOutputSerializer(bots, many=True, context={"request": request}).data)

    @extend_schema(request=BotInputSerializer, responses={201: BotOutputSerializer})
    def post(self, request: Request) -> Response:
        _bot_fields_known(request.data)
        data = _valid(BotInputSerializer, request.data)
        bot = bot_services.bot_create(owner=request.user, **data)
        return Response(
            BotOutputSerializer(bot, context={"request": request}).data,
            status=status.HTTP_201_CREATED,
        )


class BotDetailApi(APIView):
    @extend_schema(responses=BotOutputSerializer)
    def get(self, request: Request, bot_id: int) -> Response:
        bot = queries.bot_get_for_user(user=request.user, bot_id=bot_id)
        return Response(BotOutputSerializer(bot, context={"request": request}).data)

    @extend_schema(
        request=BotInputSerializer, responses={200: BotOutputSerializer, **api_errors(403)}
    )
    def patch(self, request: Request, bot_id: int) -> Response:
        queries.bot_get_for_edit(user=request.user, bot_id=bot_id)  # 404/403 before 400
        _bot_fields_known(request.data)
        data = _valid(BotInputSerializer, request.data, partial=True)
        bot = bot_services.bot_update(user=request.user, bot_id=bot_id, **data)
        return Response(BotOutputSerializer(bot, context={"request": request}).data)

    @extend_schema(responses={204: None, **api_errors(403)})
    def delete(self, request: Request, bot_id: int) -> Response:
        bot_services.bot_delete(user=request.user, bot_id=bot_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionListApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("bot", int, required=False)],
        responses=SessionOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        sessions = queries.session_list_for_user(
            user=request.user, bot_id=request.query_params.get("bot")
        ).select_related("api_origin")
        return Response(SessionOutputSerializer(sessions, many=True).data)

    # 404: the bot is unknown or not visible to the caller.
    @extend_schema(
        request=SessionInputSerializer, responses={201: SessionOutputSerializer, **api_errors(404)}
    )
    def post(self, request: Request) -> Response:
        data = _valid(SessionInputSerializer, request.data)
        session = session_services.session_create(
            user=request.user, bot_id=data["bot"], title=data.get("title", "")
        )
        return Response(SessionOutputSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetailApi(APIView):
    @extend_schema(responses=SessionOutputSerializer)
    def get(self, request: Request, session_id: int) -> Response:
        session = queries.session_get_for_user(user=request.user, session_id=session_id)
        return Response(SessionOutputSerializer(session).data)

    @extend_schema(request=SessionPatchSerializer, responses={200: SessionOutputSerializer})
    def patch(self, request: Request, session_id: int) -> Response:
        # Access first: another user's session is not_found even when the body is bad. The
        # send takes the session as read here (one read of it per send).
        session = queries.session_get_for_user(user=request.user, session_id=session_id)
        data = _valid(SessionPatchSerializer, request.data)
        changes = {k: data[k] for k in ("title", "model", "extra_instruction") if k in data}
        session = None
        if changes:
            # All checked before any is written; a bad reply_mode never reaches here.
            session = session_services.session_settings_update(
                user=request.user, session_id=session_id, **changes
            )
        if "reply_mode" in data:
            session = participant_services.session_reply_mode_set(
                user=request.user, session_id=session_id, reply_mode=data["reply_mode"]
            )
        assert session is not None
        return Response(SessionOutputSerializer(session).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, session_id: int) -> Response:
        session_services.session_delete(user=request.user, session_id=session_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionMessagesApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after_seq", int, required=False),
            # Rooms: whose seat ``compacted`` is read from (default: the room's default bot).
            OpenApiParameter("bot", int, required=False),
        ],
        responses={200: MessageOutputSerializer(many=True), **api_errors(400, 404)},
    )
    def get(self, request: Request, session_id: int) -> Response:
        session = queries.session_get_for_user(user=request.user, session_id=session_id)
        seat = queries.session_seat_get(
            user=request.user, session=session, bot_id=request.query_params.get("bot")
        )
        raw = request.query_params.get("after_seq")
        after_seq = None
        if raw not in (None, ""):
            try:
                after_seq = int(raw)
            except ValueError:
                raise errors.ValidationFailed(
                    details={"after_seq": ["A whole number is required."]}
                ) from None
        messages = queries.message_list(session=session, after_seq=after_seq)
        covered = seat_compacted_ids(seat, after_seq=after_seq)
        return Response([message_payload(m, compacted=m.pk in covered) for m in messages])

    @extend_schema(
        request=MessageInputSerializer,
        responses={
            201: SendOutputSerializer,
            202: SendOutputSerializer,
            # Errors of the reply carry {user_message, assistant_message} in details.
            **api_errors(422, 429, 502, 503),
        },
    )
    def post(self, request: Request, session_id: int) -> Response:
        # Access first: another user's session is not_found even when the body is bad. The
        # send takes the session as read here (one read of it per send).
        session = queries.session_get_for_user(user=request.user, session_id=session_id)
        data = _valid(MessageInputSerializer, request.data)
        check_send(
            content=data["content"],
            client_id=data.get("client_id"),
            allow_blank=bool(data.get("attachments")),
        )
        if not data["wait"]:
            return self._send(request, session, data)
        # Waiting for the reply holds this request: one of the user's heavy-request slots.
        with heavy_request(user_id=request.user.pk, kind="send_wait"):
            return self._send(request, session, data)

    def _send(self, request: Request, session: ChatSession, data: dict) -> Response:
        result = send_services.session_message_send(
            user=request.user,
            session_id=session.pk,
            session=session,
            content=data["content"],
            client_id=data.get("client_id"),
            reply_as=data.get("reply_as"),
            attachments=data.get("attachments"),
            quota=request_key_limits(request.auth),
        )
        if result.is_command:
            return Response(
                {
                    "notice": MessageOutputSerializer(result.notice).data
                    if result.notice
                    else None,
                    "compaction": result_payload(result.compaction) if result.compaction else None,
                },
                status=status.HTTP_200_OK,
            )
        reply = result.assistant_message
        if result.dispatched is False and reply is not None:
            # Stored, but the task queue is down: the reply starts by itself once it is back (the
            # watchdog hands it over), or at once when the client retries with its client_id.
            reply.refresh_from_db()
            if not reply.is_finished:
                return error_response(
                    errors.ServiceUnavailable.code,
                    "Your message is saved, but the task queue is unavailable, so the reply has "
                    "not started. It starts automatically when the service is back; sending the "
                    "same client_id again retries now.",
                    {
                        "user_message": MessageOutputSerializer(result.user_message).data,
                        "assistant_message": MessageOutputSerializer(reply).data,
                    },
                    errors.ServiceUnavailable.http_status,
                )
        others = list(result.replies[1:])
        if data["wait"] and reply is not None:
            # Every reply to the message (a room's bots answer one after another), within one
            # deadline: the answer says each as it ended, or as it is when time ran out.
            deadline = time.monotonic() + settings.CHAT_WAIT_TIMEOUT_SECONDS
            reply, *others = [
                m
                if m.is_finished
                else message_services.message_wait_finished(
                    message_id=m.pk, timeout=max(0.0, deadline - time.monotonic())
                )
                for m in [reply, *others]
            ]
        body = {
            "user_message": MessageOutputSerializer(result.user_message).data,
            "assistant_message": MessageOutputSerializer(reply).data if reply else None,
        }
        if others:
            # A room where several bots answer: every reply, in answer order (the first is
            # ``assistant_message``).
            body["replies"] = [body["assistant_message"]] + [
                MessageOutputSerializer(m).data for m in others
            ]
        # A reply that failed before any model call (context_too_large) is an error even without
        # wait; with wait, any failure is.
        if (
            reply is not None
            and reply.status == Message.Status.FAILED
            and (data["wait"] or reply.error_code == errors.ContextTooLarge.code)
        ):
            exc_class = REPLY_ERRORS.get(reply.error_code, errors.ModelUnavailable)
            # A daily limit's refusal says what ran out and when it resets, as at the send.
            details = {**message_error(reply).get("details", {}), **body}
            code = exc_class.code
            return error_response(code, reply.error_message, details, exc_class.http_status)
        finished = reply is None or reply.is_finished
        code = status.HTTP_201_CREATED if data["wait"] and finished else status.HTTP_202_ACCEPTED
        return Response(body, status=code)


# A failed reply's own code, answered by a REST send that waited for it (it was
# model_unavailable for any but the first three: a bot that left the room, a database that
# failed). An internal error stays a 502: the turn logged it with its traceback; the request
# itself did not fail.
REPLY_ERRORS: dict[str, type[errors.PlatformError]] = {
    cls.code: cls
    for cls in (
        errors.ContextTooLarge,
        errors.ModelUnavailable,
        errors.QuotaExceeded,
        errors.NotFound,
        errors.ServiceUnavailable,
    )
}


class MessagePinApi(APIView):
    pinned = True

    @extend_schema(request=None, responses=MessageOutputSerializer)
    def post(self, request: Request, message_id: int) -> Response:
        message = message_services.message_pin_set(
            user=request.user, message_id=message_id, pinned=self.pinned
        )
        return Response(message_payload(message, compacted=message_compacted(message)))


class MessageUnpinApi(MessagePinApi):
    pinned = False


def _branch_answer(result: branch_services.BranchResult) -> Response:
    """201 with the branch, its question and its pending reply; a reply refused at once because
    the question can never fit is 422 ``context_too_large`` with the same in ``details``, as a
    send of it answers (the branch and its question stay, as a sent question does)."""
    reply = result.send.assistant_message
    body = {
        "session": SessionOutputSerializer(result.session).data,
        "user_message": MessageOutputSerializer(result.send.user_message).data,
        "assistant_message": MessageOutputSerializer(reply).data if reply else None,
    }
    if reply is not None and reply.error_code == errors.ContextTooLarge.code:
        return error_response(
            errors.ContextTooLarge.code,
            reply.error_message,
            body,
            errors.ContextTooLarge.http_status,
        )
    return Response(body, status=status.HTTP_201_CREATED)


class MessageEditApi(APIView):
    """Edit a sent message: a new branch (201) with the new text and its pending reply."""

    @extend_schema(
        request=MessageEditSerializer, responses={201: None, **api_errors(400, 404, 422, 429)}
    )
    def post(self, request: Request, message_id: int) -> Response:
        queries.message_get_for_user(user=request.user, message_id=message_id)
        data = _valid(MessageEditSerializer, request.data)
        check_send(content=data["content"], client_id=None)
        result = branch_services.message_edit(
            user=request.user,
            message_id=message_id,
            content=data["content"],
            quota=request_key_limits(request.auth),
        )
        return _branch_answer(result)


class MessageRegenerateApi(APIView):
    """Regenerate a reply: a new branch (201) with a new pending reply to the same message."""

    @extend_schema(request=None, responses={201: None, **api_errors(400, 404, 422, 429)})
    def post(self, request: Request, message_id: int) -> Response:
        result = branch_services.reply_regenerate(
            user=request.user, message_id=message_id, quota=request_key_limits(request.auth)
        )
        return _branch_answer(result)


class MessageRetryApi(APIView):
    """Retry a failed or interrupted reply: it runs again, in place, for the same question
    (202 ``{assistant_message}``, the reply as it now stands: pending, its turn handed over;
    422 ``context_too_large`` when its question can never fit, no turn run); nothing new is
    stored."""

    @extend_schema(
        request=None,
        responses={
            202: inline_serializer("RetryResult", {"assistant_message": MessageOutputSerializer()}),
            **api_errors(400, 404, 422, 429),
        },
    )
    def post(self, request: Request, message_id: int) -> Response:
        reply = retry_services.reply_retry(
            user=request.user, message_id=message_id, quota=request_key_limits(request.auth)
        )
        body = {"assistant_message": MessageOutputSerializer(reply).data}
        if reply.status == Message.Status.FAILED:  # refused at once: it can never fit (422)
            details = {**message_error(reply).get("details", {}), **body}
            return error_response(
                reply.error_code,
                reply.error_message,
                details,
                REPLY_ERRORS.get(reply.error_code, errors.ModelUnavailable).http_status,
            )
        return Response(body, status=status.HTTP_202_ACCEPTED)


class SessionBranchesApi(APIView):
    """Where this chat's messages have other versions, and which one it continues."""

    @extend_schema(responses=BranchPointSerializer(many=True))
    def get(self, request: Request, session_id: int) -> Response:
        points = branch_services.session_branch_points(user=request.user, session_id=session_id)
        return Response({"points": [point.as_dict() for point in points]})


class SessionContextApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("bot", int, required=False)],
        responses={200: ContextReportSerializer, **api_errors(404, 503)},
    )
    def get(self, request: Request, session_id: int) -> Response:
        session = queries.session_get_for_user(user=request.user, session_id=session_id)
        # Rooms: ``?bot=`` the report from that participant's seat (its budget, its view).
        bot = participant_services.participant_bot(
            user=request.user, session=session, bot_id=request.query_params.get("bot")
        )
        return Response(context_report(session=queries.session_seat(session, bot)))


def _room_body(session_id: int, request: Request) -> dict:
    session = queries.session_get_for_user(user=request.user, session_id=session_id)
    participants = participant_services.participant_list(user=request.user, session_id=session_id)
    return {
        "reply_mode": session.reply_mode,
        "participants": ParticipantOutputSerializer(participants, many=True).data,
    }


class SessionParticipantsApi(APIView):
    """The bots in a session (a room): every participant, removed ones too (their messages
    stay attributed), in the order they joined; and the room's reply mode."""

    @extend_schema(responses={200: None})
    def get(self, request: Request, session_id: int) -> Response:
        return Response(_room_body(session_id, request))

    @extend_schema(request=ParticipantInputSerializer, responses={201: None, **api_errors(404)})
    def post(self, request: Request, session_id: int) -> Response:
        queries.session_get_for_user(user=request.user, session_id=session_id)
        data = _valid(ParticipantInputSerializer, request.data)
        participant = participant_services.participant_add(
            user=request.user,
            session_id=session_id,
            bot_id=data["bot"],
            sees_from_join=data["sees_from_join"],
            is_default=data["is_default"],
        )
        return Response(
            ParticipantOutputSerializer(participant).data, status=status.HTTP_201_CREATED
        )


class SessionParticipantDetailApi(APIView):
    @extend_schema(
        request=ParticipantPatchSerializer,
        responses={200: ParticipantOutputSerializer, **api_errors(400, 404)},
    )
    def patch(self, request: Request, session_id: int, bot_id: int) -> Response:
        """Make this participant the room's default (``{"is_default": true}``)."""
        queries.session_get_for_user(user=request.user, session_id=session_id)
        _valid(ParticipantPatchSerializer, request.data)
        participant = participant_services.participant_default_set(
            user=request.user, session_id=session_id, bot_id=bot_id
        )
        return Response(ParticipantOutputSerializer(participant).data)

    @extend_schema(responses={204: None, **api_errors(400, 404)})
    def delete(self, request: Request, session_id: int, bot_id: int) -> Response:
        participant_services.participant_remove(
            user=request.user, session_id=session_id, bot_id=bot_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
