"""Import services, by subject (docs/transfer.md):

- ``importing``: one file into chats (``chats_import``), written in steps, read as a stream;
- ``chatgpt_import`` and ``lossless_import``: the two formats; ``common``: what they share;
- ``jobs``: the import job of an upload (stored, run by a ``heavy`` task in a limited child
  process, ended ``done`` or ``failed``).
"""

from transfer.services.common import ImportResult
from transfer.services.importing import chats_import, check_import_size

__all__ = ["ImportResult", "chats_import", "check_import_size"]
