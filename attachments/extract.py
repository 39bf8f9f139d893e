"""What an uploaded file is, and the text a model sees of it: pure functions over bytes.

A file is accepted only as what its name says *and* its bytes show: a ``.txt`` must decode as
UTF-8 without NUL characters (a binary file renamed ``.txt`` is refused), a ``.pdf`` must start
with ``%PDF-`` and parse (pypdf, with its decompression limits lowered so a "zip bomb" stream is
refused instead of filling memory), an image must carry its format's signature. Anything else is
an ``AttachmentRefused`` whose message says what was wrong, in words a user can act on.
"""

import io
import re
import unicodedata
from dataclasses import dataclass

# The extensions read as text (UTF-8). Code files are text: the model reads them as written.
TEXT_EXTENSIONS = frozenset(
    [
        "txt",
        "text",
        "md",
        "markdown",
        "rst",
        "csv",
        "tsv",
        "json",
        "jsonl",
        "ndjson",
        "yaml",
        "yml",
        "toml",
        "ini",
        "cfg",
        "conf",
        "env",
        "log",
        "xml",
        "html",
        "htm",
        "css",
        "scss",
        "less",
        "js",
        "mjs",
        "cjs",
        "jsx",
        "ts",
        "tsx",
        "py",
        "pyi",
        "rb",
        "go",
        "rs",
        "java",
        "kt",
        "kts",
        "scala",
        "swift",
        "c",
        "h",
        "cc",
        "cpp",
        "cxx",
        "hpp",
        "hh",
        "cs",
        "php",
        "pl",
        "pm",
        "sh",
        "bash",
        "zsh",
        "fish",
        "ps1",
        "bat",
        "sql",
        "r",
        "lua",
        "dart",
        "ex",
        "exs",
        "erl",
        "hs",
        "ml",
        "vue",
        "svelte",
        "tex",
        "bib",
        "diff",
        "patch",
        "gitignore",
        "dockerfile",
        "makefile",
        "gradle",
        "properties",
        "graphql",
        "proto",
    ]
)
# Text files by their whole name (no extension).
TEXT_NAMES = frozenset({"dockerfile", "makefile", "readme", "license", "changelog"})

IMAGE_SIGNATURES: dict[str, tuple[str, tuple[bytes, ...]]] = {
    "png": ("image/png", (b"\x89PNG\r\n\x1a\n",)),
    "jpg": ("image/jpeg", (b"\xff\xd8\xff",)),
    "jpeg": ("image/jpeg", (b"\xff\xd8\xff",)),
    "gif": ("image/gif", (b"GIF87a", b"GIF89a")),
    "webp": ("image/webp", (b"RIFF",)),
}

# Characters a file name may not hold: path separators, control characters (NUL included).
_BAD_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")


class AttachmentRefused(ValueError):
    """The file is not accepted; ``str(exc)`` says why, for the user."""

    sandbox_refusal = True  # raised in the extraction child: a refusal, not a crash


@dataclass(frozen=True)
class Extracted:
    kind: str  # "text" | "pdf" | "image"
    content_type: str
    text: str  # what the model reads ("" for images, and for a PDF until it is extracted)
    # A PDF's text is extracted later, by a task in a limited child process
    # (``pdf_text_child``), never in the process that received the upload.
    deferred: bool = False


@dataclass(frozen=True)
class Limits:
    max_text_chars: int  # the most text a file may contribute
    pdf_max_pages: int
    pdf_max_stream_bytes: int  # the most one PDF stream may decompress to
    # The most the pages' content streams may decode to, all pages together (a shared stream
    # counts once per page that draws it: each page's text is extracted from it again).
    pdf_max_decoded_bytes: int = 0


def check_file_name(name: object) -> str:
    """A plain file name: no folders, no control characters, at most 200 characters."""
    if not isinstance(name, str) or not name.strip():
        raise AttachmentRefused("The file needs a name.")
    if _BAD_NAME.search(name):
        raise AttachmentRefused(
            "The file name may not contain folders (/ or \\) or control characters: "
            "send the file under its own name."
        )
    name = unicodedata.normalize("NFC", name.strip())
    if name in (".", "..") or re.search(r"[\ud800-\udfff]", name):
        raise AttachmentRefused("The file name is not a usable name.")
    if len(name) > 200:
        raise AttachmentRefused(
            f"The file name is {len(name)} characters long; at most 200 are allowed."
        )
    return name


def _extension(name: str) -> str:
    base = name.lower()
    if base in TEXT_NAMES:
        return "txt"
    return base.rsplit(".", 1)[1] if "." in base else ""


def supported_kinds_text() -> str:
    return "text, Markdown, CSV, JSON, code files, PDF, or PNG/JPEG/GIF/WebP images"


def extract(*, name: str, data: bytes, limits: Limits) -> Extracted:
    """What the file is and its text (a PDF's text: ``deferred``, see ``pdf_text_child``);
    raises ``AttachmentRefused``."""
    if not data:
        raise AttachmentRefused(f"{name} is empty.")
    ext = _extension(name)
    if ext in IMAGE_SIGNATURES:
        return _image(name, ext, data)
    if ext == "pdf":
        if not data.startswith(b"%PDF-"):
            raise AttachmentRefused(f"{name} is named as a PDF but is not one.")
        return Extracted("pdf", "application/pdf", "", deferred=True)
    if ext in TEXT_EXTENSIONS:
        return Extracted("text", "text/plain; charset=utf-8", _plain_text(name, data, limits))
    raise AttachmentRefused(
        f"{name}: this kind of file cannot be attached. Attach {supported_kinds_text()}."
    )


def _image(name: str, ext: str, data: bytes) -> Extracted:
    content_type, signatures = IMAGE_SIGNATURES[ext]
    ok = any(data.startswith(sig) for sig in signatures)
    if ext == "webp":
        ok = ok and data[8:12] == b"WEBP"
    if not ok:
        raise AttachmentRefused(f"{name} is named as a {ext.upper()} image but is not one.")
    return Extracted("image", content_type, "")


def _plain_text(name: str, data: bytes, limits: Limits) -> str:
    if b"\x00" in data:
        raise AttachmentRefused(
            f"{name} is not a text file (it holds binary data such as NUL bytes)."
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AttachmentRefused(
            f"{name} is not UTF-8 text (byte {exc.start:,} is not valid): save it as UTF-8, "
            "or attach it as the kind of file it is."
        ) from None
    text = text.replace("\r\n", "\n")
    _check_length(name, text, limits)
    if not text.strip():
        raise AttachmentRefused(f"{name} holds no text.")
    return text


def _check_length(name: str, text: str, limits: Limits) -> None:
    if len(text) > limits.max_text_chars:
        raise AttachmentRefused(
            f"{name} holds more than {limits.max_text_chars:,} characters of text; "
            "attach a shorter file or a part of it."
        )


def _pdf_text(name: str, data: bytes, limits: Limits) -> str:
    if not data.startswith(b"%PDF-"):
        raise AttachmentRefused(f"{name} is named as a PDF but is not one.")
    import pypdf  # only when a PDF is attached: the web process need not load it at start-up

    # A stream that claims or unpacks to more than this is refused (a "zip bomb" PDF). The
    # limits hold for this call only (pypdf keeps them in a context variable).
    most = limits.pdf_max_stream_bytes
    config = pypdf.apply_configuration(
        maximum_declared_stream_length=most,
        array_based_stream_maximum_output_length=most,
        jbig2_maximum_output_length=most,
        lzw_maximum_output_length=most,
        run_length_maximum_output_length=most,
        zlib_maximum_output_length=most,
        brotli_maximum_output_length=most,
    )
    with config:
        return _pdf_read(name, data, limits)


def _content_bytes(page: object) -> int:
    """How many bytes the page's content stream decodes to (what its text is parsed from)."""
    contents = page.get_contents()  # type: ignore[attr-defined]
    return len(contents.get_data()) if contents is not None else 0


def pdf_text_child(data: bytes, params: dict[str, object]) -> str:
    """The entry point of the extraction child (``chat_platform.sandbox``): the PDF's text, or
    ``AttachmentRefused``. ``params``: ``{"name", "limits": {Limits' fields}}``."""
    raw = params["limits"]
    assert isinstance(raw, dict)
    return _pdf_text(str(params["name"]), data, Limits(**raw))


def _pdf_read(name: str, data: bytes, limits: Limits) -> str:
    import pypdf
    from pypdf.errors import FileNotDecryptedError, LimitReachedError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise AttachmentRefused(f"{name} is password-protected: attach an unprotected copy.")
        pages = len(reader.pages)
        if pages > limits.pdf_max_pages:
            raise AttachmentRefused(
                f"{name} has {pages:,} pages; at most {limits.pdf_max_pages:,} are accepted."
            )
        # Decoding is cheap next to parsing what was decoded: the whole is counted before any
        # page's text is parsed, so a file over the limit costs no parse at all.
        decoded = 0
        for page in reader.pages:
            decoded += _content_bytes(page)
            if limits.pdf_max_decoded_bytes and decoded > limits.pdf_max_decoded_bytes:
                raise AttachmentRefused(
                    f"{name}: PDF text extraction stopped: over "
                    f"{limits.pdf_max_decoded_bytes:,} bytes decoded. Attach a shorter PDF, "
                    "or its text."
                )
        parts: list[str] = []
        total = 0
        for page in reader.pages:
            part = page.extract_text() or ""
            total += len(part)
            if total > limits.max_text_chars:
                _check_length(name, "x" * total, limits)
            parts.append(part)
    except (AttachmentRefused, MemoryError):
        raise
    except LimitReachedError:
        raise AttachmentRefused(
            f"{name} holds a compressed stream larger than "
            f"{limits.pdf_max_stream_bytes:,} bytes once unpacked: it is refused."
        ) from None
    except FileNotDecryptedError:
        raise AttachmentRefused(
            f"{name} is password-protected: attach an unprotected copy."
        ) from None
    except Exception:  # pypdf raises many kinds on a damaged file: all mean "unreadable"
        raise AttachmentRefused(f"{name} could not be read as a PDF (it may be damaged).") from None
    # PDF text layers can hold NUL or unpaired surrogates: dropped, never stored.
    text = re.sub(r"[\x00\ud800-\udfff]", "", "\n\n".join(p.strip() for p in parts)).strip()
    if not text:
        raise AttachmentRefused(
            f"{name} has no text layer (a scanned PDF?): attach a PDF with selectable text."
        )
    return text
