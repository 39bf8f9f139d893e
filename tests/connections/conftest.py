import pytest

ENCRYPTION_KEY = "test-connection-encryption-key-0123456789abcdef"
SECRET_API_KEY = "sk-conn-secret-4f9a7c2e1b8d6035"


@pytest.fixture(autouse=True)
def _encryption_key(settings):
    settings.CONNECTION_ENCRYPTION_KEY = ENCRYPTION_KEY


@pytest.fixture
def fake_connection(staff, fake_openai):
    from connections.services import connection_create, connection_models_refresh

    connection = connection_create(
        user=staff, name="Fake", kind="openai", base_url=fake_openai.url, api_key=SECRET_API_KEY
    )
    return connection_models_refresh(user=staff, connection_id=connection.pk)
