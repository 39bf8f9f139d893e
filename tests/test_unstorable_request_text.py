"""No 500 from input: NUL in a path parameter or a query value is a ``validation_error`` naming
it, for every view (docs/security.md), and nothing is looked up or changed."""

import pytest

from openai_api.models import ApiKey
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def _validation_error(response, field: str) -> None:
    assert response.status_code == 400, response.content[:300]
    assert response.json() == {
        "error": {
            "code": "validation_error",
            "message": "The request is not valid.",
            "details": {field: ["Text may not contain NUL characters or unpaired surrogates."]},
        }
    }


def test_nul_in_an_api_key_prefix_is_a_validation_error(owner, owner_client):
    created = owner_client.post("/api/v1/api-keys/", {"name": "k"}, format="json")
    assert created.status_code == 201, created.json()
    _validation_error(owner_client.delete("/api/v1/api-keys/%00/"), "prefix")
    _validation_error(owner_client.delete("/api/v1/api-keys/ab%00cd/"), "prefix")
    assert ApiKey.objects.filter(user=owner, revoked=False).count() == 1


@pytest.mark.parametrize(
    "path",
    ["/api/v1/sessions/{session}/records/%00/", "/api/v1/connections/%00/"],
    ids=["record-name", "connection-id"],
)
def test_nul_in_any_str_path_parameter_is_a_validation_error(owner, owner_client, path):
    session = SessionFactory(user=owner)
    field = "name" if "records" in path else "connection_id"
    for method in ("get", "patch", "delete"):
        response = getattr(owner_client, method)(path.format(session=session.pk))
        _validation_error(response, field)


def test_nul_in_a_query_value_is_a_validation_error(owner_client):
    _validation_error(owner_client.get("/api/v1/search/?q=a%00b"), "q")


def test_anonymous_gets_the_same_answer(client):
    _validation_error(client.delete("/api/v1/api-keys/%00/"), "prefix")


def test_a_page_with_nul_in_its_path_is_a_bad_request(client, staff):
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    for path in ("/admin/bots/bot/%00/change/", "/admin/openai_api/apikey/ab%00/delete/"):
        response = client.get(path)
        assert (response.status_code, response.content.decode()) == (
            400,
            "Text may not contain NUL characters or unpaired surrogates.",
        )


def test_the_openai_api_answers_its_own_404(client):
    response = client.get("/v1/%00")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
