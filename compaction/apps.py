from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
    verbose_name = "Context admission and compaction"
