"""Fixtures of the cross-process tests: ``real_stack`` is shared by the whole test process
(tests/conftest.py)."""
