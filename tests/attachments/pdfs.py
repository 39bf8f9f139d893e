"""Small PDFs written by hand for the attachment tests (pypdf reads them; none comes from disk)."""

import zlib


def pdf_bytes(pages: list[str], *, compress: bool = False, stream: bytes | None = None) -> bytes:
    """A PDF whose pages show ``pages`` (one line of text each). ``stream``: a raw content
    stream for the first page instead (e.g. a "zip bomb"), sent Flate-compressed."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font_id = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        content_id = 4 + 2 * i
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_id} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        body = (
            stream
            if (stream is not None and i == 0)
            else (f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode())
        )
        if compress or (stream is not None and i == 0):
            data = zlib.compress(body, 9)
            objects.append(
                f"<< /Length {len(data)} /Filter /FlateDecode >>\nstream\n".encode()
                + data
                + b"\nendstream"
            )
        else:
            objects.append(f"<< /Length {len(body)} >>\nstream\n".encode() + body + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def pdf_shared_stream_bytes(pages: int, stream: bytes, *, level: int = 9) -> bytes:
    """A PDF of ``pages`` pages that all draw one Flate-compressed content stream ``stream``
    (issue 30's CPU bomb: a few KB of file, each page parsing the same megabytes again)."""
    data = zlib.compress(stream, level)
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        f"<< /Length {len(data)} /Filter /FlateDecode >>\nstream\n".encode()
        + data
        + b"\nendstream",
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        + f"/Resources << /Font << /F1 {4 + pages} 0 R >> >> >>".encode()
        for _ in range(pages)
    ]
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)
