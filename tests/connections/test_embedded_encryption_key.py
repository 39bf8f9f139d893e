"""`make run` writes CONNECTION_ENCRYPTION_KEY into `.env` (scripts/ensure_env.sh, issue 32):
with that value and nothing else, a staff user saves a connection with its key."""

import subprocess
from pathlib import Path

import pytest

from connections import crypto
from connections.models import Connection
from tests.connections.conftest import SECRET_API_KEY

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_staff_user_saves_a_keyed_connection_with_the_written_key(
    staff_client, settings, tmp_path
):
    env_file = tmp_path / ".env"
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure_env.sh"), str(env_file)], check=True)
    (line,) = [
        x for x in env_file.read_text().splitlines() if x.startswith("CONNECTION_ENCRYPTION_KEY=")
    ]
    settings.CONNECTION_ENCRYPTION_KEY = line.removeprefix("CONNECTION_ENCRYPTION_KEY=")
    response = staff_client.post(
        "/api/v1/connections/",
        {
            "name": "Local",
            "kind": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": SECRET_API_KEY,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["has_key"] is True
    stored = Connection.objects.get(pk=response.json()["id"])
    assert crypto.key_decrypt(stored.api_key_encrypted) == SECRET_API_KEY
