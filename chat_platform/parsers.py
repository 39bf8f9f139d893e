"""DRF's JSON parser through the one depth-limited parse (``chat_platform.jsontext``).

A module of its own: DRF imports the parser classes while it builds ``APIView``, so this may
not import anything that imports ``rest_framework.views`` (``chat_platform.api`` does).
"""

import codecs
from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant

from chat_platform.jsontext import json_loads


class JSONParser(parsers.JSONParser):
    """A body nested too deep is a ParseError (400 ``validation_error``), never a 500."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})
        try:
            text = codecs.getreader(encoding)(stream).read()
            return json_loads(text, parse_constant=strict_constant if self.strict else None)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
