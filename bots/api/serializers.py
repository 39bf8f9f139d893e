from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.utils import html

from bots.models import Bot, ChatSession, Message, SessionParticipant
from bots.realtime import message_payload
from turns.services.bot import BOT_API_FIELDS, BOT_PRIVATE_FIELDS


class BotOutputSerializer(serializers.ModelSerializer):
    editable = serializers.SerializerMethodField()

    class Meta:
        model = Bot
        fields = ["id", "owner", *BOT_API_FIELDS, "created_at", "editable"]

    def get_editable(self, bot: Bot) -> bool:
        request = self.context.get("request")
        user = getattr(request, "user", None)
        return bool(user and (bot.owner_id == user.pk or user.is_staff))

    def to_representation(self, instance: Bot) -> dict:
        data = super().to_representation(instance)
        if not data["editable"]:
            for name in BOT_PRIVATE_FIELDS:
                data.pop(name, None)
        return data


class BotInputSerializer(serializers.ModelSerializer):
    """Shape and types only; the service runs the model's full validation."""

    # An id, resolved (and access-checked) by the service: the same error whether a connection
    # does not exist or is not the user's to use.
    connection = serializers.IntegerField(required=False, allow_null=True, min_value=1)

    class Meta:
        model = Bot
        fields = list(BOT_API_FIELDS)
        # The slug's rule (``slug_validator``, unique per owner) is the model's, run by the
        # service; here it is only a string, so every error comes back the same way.
        extra_kwargs = {"name": {"required": True}, "slug": {"validators": []}}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            if isinstance(field, serializers.BooleanField):
                # A form body (``curl -d``) that leaves a switch out leaves it unset, as JSON
                # does: the model's default, not False (DRF reads a missing checkbox as off).
                field.default_empty_html = empty


class SessionOutputSerializer(serializers.ModelSerializer):
    # Where the chat came from: null for the chat page and this API, or
    # ``{"kind": "api", "key_name"}`` for a chat an OpenAI-compatible client started (the
    # ``api_origin`` row the openai_api app keeps; read by relation, so no import of it).
    origin = serializers.SerializerMethodField()
    # The chat's bot as the chat list draws it (avatar and name, docs/api.md): every chat is
    # listed whatever bot the page has picked for the next one, and a bot no longer shared may
    # be missing from the bot list. Read through ``select_related("bot")``: no statement each.
    bot_info = serializers.SerializerMethodField()

    class Meta:
        model = ChatSession
        # A branch (an edited message or a regenerated reply) names the chat it branched from
        # and the seq where it differs; ``origin`` marks a chat the OpenAI-compatible API made.
        # Per-chat settings: ``model_override`` ("" = the bot's model) and ``extra_instruction``.
        fields = [
            "id",
            "bot",
            "bot_info",
            "is_room",
            "title",
            "created_at",
            "branch_of",
            "branch_seq",
            "origin",
            "model_override",
            "extra_instruction",
            # Rooms: who answers a message (docs/rooms.md); a one-bot chat's is its default.
            "reply_mode",
        ]

    def get_bot_info(self, session: ChatSession) -> dict:
        bot = session.bot
        return {"id": bot.pk, "slug": bot.slug, "name": bot.name}

    def get_origin(self, session: ChatSession) -> dict | None:
        try:
            api = session.api_origin  # type: ignore[attr-defined]
        except ObjectDoesNotExist:
            return None
        return {"kind": "api", "key_name": api.key_name}


class SessionInputSerializer(serializers.Serializer):
    bot = serializers.IntegerField(min_value=1)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class BranchPointSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    versions = serializers.ListField(child=serializers.IntegerField())
    current = serializers.IntegerField()


class SessionRenameSerializer(serializers.Serializer):
    # Blank clears the title (the page then shows the chat's date); NUL and lone surrogates are
    # refused by the model's validator in the service.
    title = serializers.CharField(
        max_length=200, allow_blank=True, trim_whitespace=False, required=False
    )
    # Per-chat settings, checked by the service (types included, so every caller gets the same
    # validation_error): a model among the bot's (its ``model`` or ``allowed_models``; "" = the
    # bot's model), and an instruction sent after the bot's system prompt.
    model = serializers.JSONField(required=False)
    extra_instruction = serializers.JSONField(required=False)


class SessionPatchSerializer(SessionRenameSerializer):
    """A rename, the chat's settings, a room's reply mode (at least one of them)."""

    title = serializers.CharField(
        max_length=200, allow_blank=True, trim_whitespace=False, required=False
    )
    reply_mode = serializers.ChoiceField(choices=ChatSession.ReplyMode.choices, required=False)

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError(
                {
                    "title": [
                        "Nothing to change: send title, model, extra_instruction or reply_mode."
                    ]
                }
            )
        return attrs


class ParticipantOutputSerializer(serializers.Serializer):
    bot = serializers.SerializerMethodField()
    joined_seq = serializers.IntegerField()
    sees_from_join = serializers.BooleanField()
    is_default = serializers.BooleanField()
    removed_at = serializers.DateTimeField(allow_null=True)

    def get_bot(self, participant: SessionParticipant) -> dict:
        bot = participant.bot
        return {"id": bot.pk, "slug": bot.slug, "name": bot.name}


class ParticipantInputSerializer(serializers.Serializer):
    bot = serializers.IntegerField(min_value=1)
    sees_from_join = serializers.BooleanField(required=False, default=False)
    is_default = serializers.BooleanField(required=False, default=False)


class ParticipantPatchSerializer(serializers.Serializer):
    # The one change a participant takes: becoming the default (leaving is DELETE; a room
    # always has exactly one default, so "not default" is said by making another one default).
    # JSON as sent: only the boolean true (a BooleanField would also take "yes" or 1).
    is_default = serializers.JSONField()

    def validate_is_default(self, value: object) -> bool:
        if value is not True:
            raise serializers.ValidationError(
                "Must be true: to change the default, make another participant the default."
            )
        return True


class MessageOutputSerializer(serializers.ModelSerializer):
    """Documents the shape; ``to_representation`` defers to the one payload function."""

    compacted = serializers.BooleanField(read_only=True)

    class Meta:
        model = Message
        fields = [
            "id",
            "seq",
            "role",
            "kind",
            "content",
            "status",
            "finish_reason",
            "token_count",
            "pinned",
            "compacted",
            "created_at",
        ]

    def to_representation(self, instance: Message) -> dict:
        return message_payload(instance)


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "pattern": r"\S",
        "description": "The message text: not blank, at most 1 MB (UTF-8), no NUL. A text "
        "starting with `/compact` compacts instead of starting a turn.",
    }
)
class MessageContentField(serializers.JSONField):
    """Text, as documented; any JSON value is let through so the service refuses non-text with
    the same ``validation_error`` over REST and websocket."""

    def get_value(self, dictionary: Any) -> Any:
        # A form field is text as sent (JSONField would parse "0" or "[1]" as JSON).
        if html.is_html_input(dictionary):
            return dictionary.get(self.field_name, empty)
        return super().get_value(dictionary)


class MessageInputSerializer(serializers.Serializer):
    # Content is checked by the service (blank / > 1 MB) so REST and websocket agree exactly.
    content = MessageContentField()
    client_id = serializers.CharField(
        max_length=100, required=False, allow_null=True, allow_blank=True
    )
    wait = serializers.BooleanField(required=False, default=False)
    # Rooms: the participant that answers (manual mode's "reply as …").
    reply_as = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    # Ids of files uploaded to this chat (POST /api/v1/sessions/{id}/attachments/), checked by
    # the service (types included).
    attachments = serializers.JSONField(required=False)


class MessageEditSerializer(serializers.Serializer):
    # Checked like any sent message (text only, NUL, size, blank) by the send service.
    content = MessageContentField()


class SendOutputSerializer(serializers.Serializer):
    user_message = MessageOutputSerializer()
    assistant_message = MessageOutputSerializer(allow_null=True)


class ContextPartsSerializer(serializers.Serializer):
    system = serializers.IntegerField()
    pinned = serializers.IntegerField()
    summaries = serializers.IntegerField()
    memory_index = serializers.IntegerField()
    history = serializers.IntegerField()


class ContextCompactionSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    in_flight = serializers.BooleanField()
    cooldown_until = serializers.DateTimeField(allow_null=True)


class ContextReportSerializer(serializers.Serializer):
    """Schema of GET /sessions/{id}/context/ (the report itself is built by the pipeline)."""

    window = serializers.IntegerField()
    reserve = serializers.IntegerField()
    budget = serializers.IntegerField()
    # null when the bot's compaction is off (no threshold acts)
    soft = serializers.IntegerField(allow_null=True)
    hard = serializers.IntegerField(allow_null=True)
    target = serializers.IntegerField(allow_null=True)
    pressure = serializers.IntegerField()
    parts = ContextPartsSerializer()
    last_admission = serializers.DictField(allow_null=True)
    compaction = ContextCompactionSerializer()
