import pytest

from tests.factories import BotFactory, SessionFactory


@pytest.fixture
def sibling_session(owner, bot):
    """Another chat of the same user with the same bot."""
    return SessionFactory(user=owner, bot=bot, title="sibling")


@pytest.fixture
def other_bot_session(owner):
    """A chat of the same user with a different bot."""
    return SessionFactory(user=owner, bot=BotFactory(owner=owner), title="other bot")


@pytest.fixture
def other_user_session(other_user, bot):
    """Another user's chat with the same (shared) bot."""
    bot.is_shared = True
    bot.save(update_fields=["is_shared"])
    return SessionFactory(user=other_user, bot=bot, title="other user")
