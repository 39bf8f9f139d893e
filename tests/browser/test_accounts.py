"""Accounts in headless Chromium (docs/accounts.md): staff make an invitation in the admin, a new
person signs up with the link and lands in the chat, signs out and in again on the login page; the
same link is refused the second time."""

from collections.abc import Iterator

import pytest

from tests.browser.support import ARTIFACTS, embedded_platform, sign_out

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

NEW_PASSWORD = "a-long-pass-phrase-9"


def _platform(tmp_path_factory, mode: str) -> Iterator[str]:
    """An embedded platform in this sign-up mode, with a staff account."""
    boss = (
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "get_user_model().objects.create_superuser('boss', 'boss@example.com', 'boss-pass-123')",
    )
    with embedded_platform(
        tmp_path_factory, f"accounts-{mode}", setup=[boss], ACCOUNT_SIGNUP_MODE=mode
    ) as (base, _log):
        yield base


@pytest.fixture(scope="module")
def server_url(tmp_path_factory) -> Iterator[str]:
    yield from _platform(tmp_path_factory, "invite")


@pytest.fixture(scope="module")
def approval_server_url(tmp_path_factory) -> Iterator[str]:
    yield from _platform(tmp_path_factory, "approval")


def _sign_up(page, username):
    page.fill("input[name=username]", username)
    page.fill("input[name=email]", f"{username}@example.com")
    page.fill("input[name=password1]", NEW_PASSWORD)
    page.fill("input[name=password2]", NEW_PASSWORD)
    with page.expect_navigation():
        page.click("main form button[type=submit]")


def _sign_in(page, base, username, password):
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("form button[type=submit]")


def test_sign_up_with_an_invitation_then_sign_in(server_url, chromium):
    base = server_url
    staff_context = chromium.new_context()
    staff = staff_context.new_page()
    _sign_in(staff, base, "boss", "boss-pass-123")
    staff.goto(f"{base}/admin/accounts/invitation/add/")
    staff.fill("#id_note", "for Ann")
    with staff.expect_navigation():
        staff.click("input[name=_save]")
    message = staff.locator(".messagelist .success", has_text="Invitation link").inner_text()
    assert "Invitation link (single use, shown only now" in message
    link = next(word for word in message.split() if "/accounts/signup/?invite=" in word)
    assert link.startswith(f"{base}/accounts/signup/?invite=")
    staff_context.close()

    context = chromium.new_context()
    page = context.new_page()
    page.goto(link)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "accounts-signup.png"))
    _sign_up(page, "ann")
    page.wait_for_selector(".app-user-name")
    assert page.locator(".app-user-name").inner_text() == "Signed in as ann"

    sign_out(page)
    _sign_in(page, base, "ann", NEW_PASSWORD)
    assert page.locator(".app-user-name").inner_text() == "Signed in as ann"
    context.close()

    again = chromium.new_context()
    refused = again.new_page()
    response = refused.goto(link)
    assert response.status == 403
    assert refused.locator("#refused-message").inner_text() == (
        "This invitation link has already been used. Ask for a new one."
    )
    again.close()


def test_sign_up_wait_for_approval_then_sign_in(approval_server_url, chromium):
    base = approval_server_url
    context = chromium.new_context()
    page = context.new_page()
    page.goto(f"{base}/accounts/login/")
    with page.expect_navigation():
        page.click("text=Create an account")
    _sign_up(page, "bea")
    assert page.locator("#inactive-title").inner_text() == "Waiting for approval"
    _sign_in(page, base, "bea", NEW_PASSWORD)
    assert page.locator("#login-error").inner_text() == (
        "This account is waiting for an administrator's approval. "
        "You can sign in once it is approved."
    )
    assert page.locator(".app-user-name").count() == 0

    staff_context = chromium.new_context()
    staff = staff_context.new_page()
    _sign_in(staff, base, "boss", "boss-pass-123")
    staff.goto(f"{base}/admin/accounts/accountapproval/?status__exact=pending")
    row = staff.locator("#result_list tbody tr", has_text="bea")
    row.locator("input[name=_selected_action]").check()
    staff.select_option("select[name=action]", "approve")
    with staff.expect_navigation():
        staff.click("button[name=index]")
    assert "1 account(s) approved." in staff.locator(".messagelist").inner_text()
    staff_context.close()

    _sign_in(page, base, "bea", NEW_PASSWORD)
    assert page.locator(".app-user-name").inner_text() == "Signed in as bea"
    context.close()
