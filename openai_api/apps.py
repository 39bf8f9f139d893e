from django.apps import AppConfig


class OpenaiApiConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "openai_api"
    verbose_name = "OpenAI-compatible API"

    def ready(self) -> None:
        # The turn asks its registered hooks (turns.hooks) for a reply's per-call options
        # and tells them when it completed: the API sits above the turn, so it registers itself.
        from openai_api import identity, turn_options
        from turns import hooks as turn_hooks

        turn_hooks.register(options=turn_options.turn_options, completed=identity.turn_completed)
