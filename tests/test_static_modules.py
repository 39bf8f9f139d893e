"""The chat client is native ES modules under static/chat/, one folder per floor
(docs/architecture.md), with no build step: the page loads the entry module as a file (the
Content-Security-Policy allows scripts from 'self' only, no inline script), and every relative
import names a module that exists and exports that name, so a rename that misses one importer
fails here, not only in a browser."""

import posixpath
import re

import pytest
from django.test import Client

from tests.factories import UserFactory
from tests.integration.processes import ROOT

CHAT = ROOT / "static" / "chat"
SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.S)
IMPORT = re.compile(r'^import \{([^}]*)\} from "(\.\.?/[\w/.-]+\.js)";', re.M)
EXPORT = re.compile(r"^export (?:function|const|let|class) ([\w$]+)", re.M)
# Classic scripts: markdown.js beside the vendored libraries it wires together; theme.js in
# <head>, not deferred, so the remembered theme is applied before the first paint.
CLASSIC = {"markdown.js", "theme.js"}


@pytest.fixture
def member(db):
    client = Client()
    client.force_login(UserFactory(username="member"))
    return client


def test_chat_page_loads_the_client_as_one_module_and_no_inline_script(member):
    body = member.get("/chat/new/").content.decode()
    scripts = SCRIPT.findall(body)
    assert scripts, "the chat page loads no script"
    assert [inline for _attrs, inline in scripts if inline.strip()] == []
    chat = [s for s in scripts if "chat/" in s[0]]
    assert [attrs.strip() for attrs, _ in chat] == [
        'src="/static/chat/theme.js"',
        'src="/static/chat/markdown.js" defer',
        'type="module" src="/static/chat/chat.js"',
    ]


def test_every_import_of_a_chat_module_names_one_of_its_exports():
    modules = {
        p.relative_to(CHAT).as_posix(): p.read_text()
        for p in CHAT.rglob("*.js")
        if p.name not in CLASSIC
    }
    assert "chat.js" in modules and "lib/dom.js" in modules
    exports = {name: set(EXPORT.findall(text)) for name, text in modules.items()}
    broken = []
    imported = set()
    for name, text in modules.items():
        for names, specifier in IMPORT.findall(text):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), specifier))
            imported.add(target)
            for wanted in (n.strip().split(" as ")[0] for n in names.split(",") if n.strip()):
                if wanted not in exports.get(target, set()):
                    broken.append(f"{name}: {wanted} from {target}")
    assert broken == []
    # Every module is reached from the entry (none is left over from an earlier layout).
    assert set(modules) - {"chat.js"} == imported


def test_every_component_stylesheet_is_linked_once_in_cascade_order(member):
    """The styles are one file per component (static/chat/css/); a file no template links is a
    component that silently lost its rules. A Django ``{# #}`` comment ends at its line: one
    spread over two lines is printed into the page, above the header."""
    body = member.get("/chat/new/").content.decode()
    assert "{#" not in body and "#}" not in body
    links = re.findall(r'<link rel="stylesheet" href="/static/(chat/css/[\w-]+\.css)">', body)
    assert len(links) == len(set(links))
    assert sorted(links) == sorted(f"chat/css/{p.name}" for p in (CHAT / "css").glob("*.css"))
    assert links[0] == "chat/css/base.css"
    # fold.css (a phone's folded room bar and gauge) overrides rooms.css's phone rules: after it.
    assert links[-3:] == ["chat/css/rooms.css", "chat/css/context.css", "chat/css/fold.css"]
