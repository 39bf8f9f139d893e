"""Shapes of the records API. Input serializers check shape only; the services validate."""

from rest_framework import serializers

from memory.models import MemoryRecord
from memory.payloads import record_payload


class RecordSerializer(serializers.Serializer):
    """A list item (docs/api.md); ``to_representation`` defers to the one payload function."""

    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=MemoryRecord.Kind.choices)
    scope = serializers.ChoiceField(choices=MemoryRecord.Scope.choices)
    description = serializers.CharField()
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    token_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    def to_representation(self, instance: MemoryRecord) -> dict:
        return record_payload(instance)


class RecordDetailSerializer(RecordSerializer):
    body = serializers.CharField()

    def to_representation(self, instance: MemoryRecord) -> dict:
        return {**record_payload(instance), "body": instance.body}


class RecordSearchHitSerializer(RecordSerializer):
    """A ``?q=`` hit: the list item plus its excerpt and the seqs of the messages in it."""

    excerpt = serializers.CharField(
        required=False,
        help_text="Only with ?q=: the matching messages, one dated line each "
        "('[12] 2024-03-08 13:56Z user: …'), or for an info record the text around the match "
        "(matches in **…**).",
    )
    seqs = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        help_text="Only with ?q=: the seqs of the messages in the excerpt (empty for a record "
        "matched as a whole).",
    )


class RecordCreateSerializer(serializers.Serializer):
    name = serializers.CharField(trim_whitespace=False, allow_blank=True)
    description = serializers.CharField(trim_whitespace=False, allow_blank=True)
    body = serializers.CharField(trim_whitespace=False, allow_blank=True)
    scope = serializers.ChoiceField(
        choices=MemoryRecord.Scope.choices, default=MemoryRecord.Scope.SESSION
    )


class RecordUpdateSerializer(serializers.Serializer):
    description = serializers.CharField(trim_whitespace=False, allow_blank=True, required=False)
    body = serializers.CharField(trim_whitespace=False, allow_blank=True, required=False)
