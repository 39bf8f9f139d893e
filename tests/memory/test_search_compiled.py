"""The statements search compiles once (the info records' ranking passes, the check for
snapshots without indexed messages: docs/performance.md, "Search latency, fourth pass") give the
hits the plain ORM gives (``DB_FAST_PATHS`` off: every statement built and compiled by Django),
info records, fusions' snapshots and kinds and scopes included."""

import pytest

from memory import queries
from tests.memory import message_search_data as data


def _hits(session, settings, *, fast):
    settings.DB_FAST_PATHS = fast
    out = []
    for question in [*data.QUESTIONS, "boat_name", "What is the boat called?", "lake"]:
        for kwargs in ({}, {"kind": "info"}, {"scope": "session"}, {"kind": "snapshot"}):
            hits = queries.records_search(session=session, query=question, **kwargs)
            out.append([(h.name, h.seqs, h.excerpt, round(h.rank, 9)) for h in hits])
    return out


@pytest.mark.django_db
def test_compiled_statements_give_the_plain_orms_hits(owner, bot, other_user, settings):
    session, _ = data.build(owner, bot, other_user)
    fast = _hits(session, settings, fast=True)
    assert any(name == "boat_name" for hits in fast for name, *_ in hits)  # an info hit
    assert fast == _hits(session, settings, fast=False)

    data.fuse(session, 1, 16)  # a snapshot none of whose messages is indexed
    fused = _hits(session, settings, fast=True)
    assert fused != fast
    assert fused == _hits(session, settings, fast=False)
