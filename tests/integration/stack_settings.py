"""Settings of the real stack that the cross-process tests share (``tests/realstack.py``): the
platform's own settings, with the broker's keys and the channel layer's under a prefix of this
test process (``REAL_STACK_KEY_PREFIX``, docs/testing.md "Shared processes").

Everything else in the test process queues on the same Redis db without the prefix: a task a
test dispatches from the test process (no worker consumes it there) never reaches the shared
worker, and the worker a test starts itself (``processes.celery_worker``) never takes the
shared stack's tasks. kombu prefixes every key of its Redis transport (queues, ``unacked``,
bindings, the remote-control fanout) with ``global_keyprefix``; channels-redis prefixes its keys
with ``prefix``. The cache and the result backend stay unprefixed: the test process clears the
sign-in throttle for the stack's processes too, and results are keyed by task id."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import CELERY_BROKER_TRANSPORT_OPTIONS, CHANNEL_LAYERS

REAL_STACK_KEY_PREFIX = os.environ["REAL_STACK_KEY_PREFIX"]

CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,
    "global_keyprefix": REAL_STACK_KEY_PREFIX,
}
CHANNEL_LAYERS = {
    "default": {
        **CHANNEL_LAYERS["default"],
        "CONFIG": {**CHANNEL_LAYERS["default"]["CONFIG"], "prefix": f"{REAL_STACK_KEY_PREFIX}asgi"},
    }
}
