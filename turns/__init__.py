"""The turn floor: the send path, the turn, rooms' routing, dispatch, watchdog, liveness,
hooks and the services that orchestrate bots and sessions (see docs/architecture.md)."""
