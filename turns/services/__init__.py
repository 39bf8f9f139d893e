"""The chat's services by subject: ``bot`` (bot CRUD), ``session`` (sessions), ``send`` (a
user's message, its reply's hand-over, ``/compact``, pins, stop). Validate (check_*), then do
(do_*), then notify. Every change to a message's state goes through ``bots.transitions``; the
chat turn itself lives in ``turns.turn``.
"""
