from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts: invitations and approvals"

    def ready(self) -> None:
        # Models are loaded only now: the receivers' module imports them.
        from accounts import receivers

        receivers.connect()
