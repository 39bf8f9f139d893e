"""What the model saw, and undoing a compaction, in the page (issue 22, Deliver 3 and 5), in
headless Chromium against the embedded platform with the built-in models: open a reply's record,
expand a part, read the diff against the previous reply; undo the marker and watch the messages
come back to the gauge."""

import time

import httpx
import pytest

from tests.browser.support import ARTIFACTS, create_bot, log_in

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

# Each note: one sentence of facts, and filler the extractive summariser leaves out.
FILLER = (
    " It was a long and quiet sort of day, as these things go."
    " Everybody seemed rather pleased with how it had gone overall."
    " There is not much more to say about it, really, apart from that."
)
NOTES = [
    "Note one: Alice booked room 101 for the 3rd of March at 10:00." + FILLER,
    "Note two: Bob moved the budget review to Friday 14 March, invoice INV-2231." + FILLER,
    "Note three: Carol prefers tea, and the Lisbon offsite is on 22 April." + FILLER,
]


def _post(base, headers, path, body):
    response = httpx.post(f"{base}/api/v1/{path}", json=body, headers=headers, timeout=60)
    assert response.status_code in (200, 201), response.text
    return response.json()


def _get(base, headers, path):
    response = httpx.get(f"{base}/api/v1/{path}", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _headers(base):
    """support.api_headers with a longer wait: checking the password is slow on a loaded
    machine (the first token request outlasted httpx's 5 s there)."""
    response = httpx.post(
        f"{base}/api/v1/auth/token/", json={"username": "demo", "password": "demo"}, timeout=60
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Token {response.json()['token']}"}


def _record(base, headers, message_id):
    """The reply's context record, once written (just after the reply finishes)."""
    url = f"{base}/api/v1/messages/{message_id}/context/?payload=1"
    for _ in range(60):
        response = httpx.get(url, headers=headers, timeout=30)
        if response.status_code == 200:
            return response.json()
        assert response.status_code == 404, response.text
        time.sleep(0.5)
    pytest.fail(f"no context record for message {message_id}")


def _legend(page, part):
    return page.locator(f"#gauge-legend li[data-part={part}] .gauge-num").inner_text()


def _fmt(n: int) -> str:
    return f"{n:,}"


# Four built-in turns, a compaction and an undo, each waited for: more than the default 120 s on
# a machine shared with other work.
def test_what_the_model_saw_and_undo(server_url, desktop):
    page = desktop
    headers = _headers(server_url)
    bot = create_bot(server_url, headers, name="Recorder", model="builtin/recall")
    session = _post(server_url, headers, "sessions/", {"bot": bot["id"]})
    sid = session["id"]
    for note in NOTES:
        _post(server_url, headers, f"sessions/{sid}/messages/", {"content": note, "wait": True})
    compaction = _post(server_url, headers, f"sessions/{sid}/compact/", {})
    assert compaction["outcome"] == "compacted", compaction
    summary = compaction["summary"]
    assert (summary["first_seq"], summary["last_seq"]) == (1, 4)
    last = _post(
        server_url,
        headers,
        f"sessions/{sid}/messages/",
        {"content": "Which room did Alice book?", "wait": True},
    )["assistant_message"]
    assert last["seq"] == 8
    record = _record(server_url, headers, last["id"])

    log_in(page, server_url, next_path=f"/chat/{sid}/")
    page.wait_for_selector('#transcript[aria-busy="false"]')
    page.locator(".compaction-marker").wait_for()
    reply = page.locator('#transcript article.msg[data-seq="8"]')
    button = reply.locator(".msg-context")
    assert button.get_attribute("aria-expanded") == "false"
    button.click()
    view = reply.locator(".ctx-view")
    page.locator('#transcript article.msg[data-seq="8"] .ctx-view[aria-busy="false"]').wait_for()
    assert button.get_attribute("aria-expanded") == "true"

    # The diff against the previous reply's record: the two new messages and the summary that
    # replaced messages 1–4 (then whatever else changed, e.g. the index listing its snapshot).
    diff = view.locator(".ctx-diff").inner_text()
    assert diff.startswith(
        f"Since the previous reply: +2 messages, summary {summary['id']} replaced 1–4"
    ), diff

    # The bar: one segment per part that was sent, in the record's order, over its budget.
    first_call = record["calls"][0]
    sent = [p["kind"] for p in first_call["parts"] if not p.get("trimmed") and p["tokens"] > 0]
    shown = (
        view.locator(".ctx-call")
        .first.locator(".ctx-seg")
        .evaluate_all("nodes => nodes.map(n => n.dataset.kind)")
    )
    assert shown == sent
    assert "summary" in sent and "history" in sent and "user" in sent

    # Expand the summary part: its text as it was sent, and the link to its marker.
    part = view.locator('.ctx-call >> nth=0 >> .ctx-part[data-kind="summary"]')
    assert part.locator(".ctx-part-name").inner_text() == (
        f"Summary {summary['id']} of messages 1–4"
    )
    assert part.get_attribute("open") is None
    part.locator("summary").click()
    block = part.locator(".ctx-text").inner_text()
    as_sent = [m["content"] for m in first_call["messages"] if summary["text"] in m["content"]]
    assert as_sent and block == as_sent[0]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "what-the-model-saw.png"))
    part.locator(".ctx-marker-link").click()
    marker = page.locator(f'.compaction-marker[data-summary-id="{summary["id"]}"]')
    page.wait_for_function(
        '(id) => document.querySelector(`.compaction-marker[data-summary-id="${id}"]`).open',
        arg=summary["id"],
    )

    # Undo the marker: the summary leaves the gauge and its messages come back to the history.
    before = _get(server_url, headers, f"sessions/{sid}/context/")
    assert before["parts"]["summaries"] > 0
    assert _legend(page, "summaries") == _fmt(before["parts"]["summaries"])
    assert page.locator("#transcript article.msg.is-compacted").count() == 4
    marker.locator(".marker-undo").click()
    page.locator(".compaction-marker.is-reverted").wait_for()
    after = _get(server_url, headers, f"sessions/{sid}/context/")
    assert after["parts"]["summaries"] == 0
    assert after["parts"]["history"] > before["parts"]["history"]
    page.wait_for_function(
        "(n) => document.querySelector('#gauge-legend li[data-part=history] .gauge-num')"
        ".textContent === n",
        arg=_fmt(after["parts"]["history"]),
    )
    assert _legend(page, "summaries") == "0"
    page.wait_for_function(
        "() => document.querySelectorAll('#transcript article.msg.is-compacted').length === 0"
    )
    summaries = _get(server_url, headers, f"sessions/{sid}/summaries/")
    assert [(s["id"], s["status"]) for s in summaries] == [(summary["id"], "reverted")]
    reverted = page.locator(f'.compaction-marker[data-summary-id="{summary["id"]}"]')
    assert "undone" in reverted.locator(".marker-meta").inner_text()
    assert reverted.locator(".marker-undo").count() == 0
    # Redrawn from the summaries, the marker stays open and keeps what the undo said.
    assert reverted.get_attribute("open") is not None
    assert (
        reverted.locator(".marker-action-status")
        .inner_text()
        .startswith("Undone: messages 1–4 are back in the context")
    )
    assert page.js_errors == []


def _patch(base, headers, path, body):
    response = httpx.patch(f"{base}/api/v1/{path}", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_undo_over_the_hard_threshold_is_refused_in_words_and_undo_and_compact_the_rest(
    server_url, desktop
):
    page = desktop
    headers = _headers(server_url)
    bot = create_bot(server_url, headers, name="Tight", model="builtin/recall")
    sid = _post(server_url, headers, "sessions/", {"bot": bot["id"]})["id"]
    for note in NOTES:
        _post(server_url, headers, f"sessions/{sid}/messages/", {"content": note, "wait": True})
    summary = _post(server_url, headers, f"sessions/{sid}/compact/", {})["summary"]
    for question in ("Which room did Alice book?", "When is the Lisbon offsite?"):
        _post(server_url, headers, f"sessions/{sid}/messages/", {"content": question, "wait": True})
    # Shrink the bot's window so that the hard threshold H falls between the context now and the
    # context with messages 1–4 back: restored = now - the summary + what it replaced.
    now = _get(server_url, headers, f"sessions/{sid}/context/")["pressure"]
    restored = now - summary["token_count"] + summary["source_tokens"]
    assert restored - now > 40, (now, restored)
    hard = (now + restored) // 2
    budget = -(-hard * 100 // 75)  # H = B * 75 // 100 >= hard
    _patch(server_url, headers, f"bots/{bot['id']}/", {"context_window": budget + 1024})
    report = _get(server_url, headers, f"sessions/{sid}/context/")
    assert report["pressure"] < report["hard"] <= restored, report

    log_in(page, server_url, next_path=f"/chat/{sid}/")
    page.wait_for_selector('#transcript[aria-busy="false"]')
    marker = page.locator(f'.compaction-marker[data-summary-id="{summary["id"]}"]')
    marker.locator("summary").first.click()
    marker.locator(".marker-undo").click()
    status = marker.locator(".marker-action-status.is-refused")
    status.wait_for()
    # Refused: nothing changed on the server, and the page says why in words, with the offer.
    summaries = _get(server_url, headers, f"sessions/{sid}/summaries/")
    assert [(s["id"], s["status"]) for s in summaries] == [(summary["id"], "active")]
    words = status.inner_text()
    assert words.startswith("Not undone: bringing messages 1–4 back would make the context ")
    assert f"at or past the {_fmt(report['hard'])} where the bot must compact" in words
    assert "Nothing was changed." in words
    assert page.locator("#transcript article.msg.is-compacted").count() == 4

    # "Undo and compact the rest": the span comes back (held) and the rest is compacted.
    status.locator(".marker-undo-rest").click()
    page.locator(f'.compaction-marker.is-reverted[data-summary-id="{summary["id"]}"]').wait_for()
    after = _get(server_url, headers, f"sessions/{sid}/summaries/")
    statuses = {s["id"]: s["status"] for s in after}
    assert statuses[summary["id"]] == "reverted"
    reverted = page.locator(f'.compaction-marker[data-summary-id="{summary["id"]}"]')
    # The marker turns reverted on the socket's frame, which can arrive before the request that
    # also compacts the rest has answered; the status says "Undone" once it has.
    reverted.locator(
        ".marker-action-status", has_text="Undone: messages 1–4 are back in the context"
    ).wait_for()
    assert (
        reverted.locator(".marker-action-status")
        .inner_text()
        .startswith("Undone: messages 1–4 are back in the context")
    )
    assert reverted.locator(".marker-release").count() == 1
    page.wait_for_function(
        "() => [1, 2, 3, 4].every((s) => !document.querySelector("
        "`#transcript article.msg[data-seq=\"${s}\"]`).classList.contains('is-compacted'))"
    )
    assert page.js_errors == []
