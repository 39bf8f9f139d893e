"""Thumbnails of attached images (issue 32, Deliver 11; docs/attachments.md "Thumbnails"): the
picture itself, inline, to its owner only (the download's check), within a pixel limit read
from the header (never decoded on the server) and a byte limit; the header reader itself."""

import struct
import zlib

import pytest

from attachments.imagesize import image_size
from attachments.models import Attachment
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def png(width: int, height: int, *, rows: bytes | None = None) -> bytes:
    """A valid PNG (8-bit greyscale): ``rows`` defaults to every pixel black."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    raw = rows if rows is not None else (b"\x00" + b"\x00" * width) * height
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _image(owner, data: bytes, *, name="photo.png", kind="image", content_type="image/png"):
    session = SessionFactory(user=owner)
    return Attachment.objects.create(
        user=owner,
        session=session,
        name=name,
        kind=kind,
        content_type=content_type,
        size=len(data),
        data=data,
    )


def test_the_owner_gets_the_picture_inline(owner, owner_client):
    data = png(3, 2)
    image = _image(owner, data)
    response = owner_client.get(f"/api/v1/attachments/{image.pk}/thumbnail/")
    assert response.status_code == 200
    assert response.content == data
    assert (
        response["Content-Type"],
        response["Content-Disposition"],
        response["X-Content-Type-Options"],
        response["Content-Security-Policy"],
    ) == ("image/png", 'inline; filename="photo.png"', "nosniff", "default-src 'none'; sandbox")


def test_anyone_else_gets_not_found_as_for_the_download(owner, owner_client, other_client):
    image = _image(owner, png(3, 2))
    for url in (f"/api/v1/attachments/{image.pk}/thumbnail/", f"/api/v1/attachments/{image.pk}/"):
        refused = other_client.get(url)
        assert refused.status_code == 404
        assert refused.json()["error"] == {
            "code": "not_found",
            "message": "Attachment not found.",
            "details": {},
        }
    assert other_client.get("/api/v1/attachments/999999/thumbnail/").status_code == 404


def test_signed_out_is_refused(owner):
    from django.test import Client

    image = _image(owner, png(3, 2))
    assert Client().get(f"/api/v1/attachments/{image.pk}/thumbnail/").status_code in (401, 403)


def test_a_decompression_bomb_is_never_served_as_a_thumbnail(owner, owner_client, settings):
    # A header saying 50,000 x 50,000 pixels (2.5 GB decoded): the header is all the server
    # reads, and it says too many; the browser is never given it to decode either.
    settings.ATTACHMENT_THUMBNAIL_MAX_PIXELS = 25_000_000
    header_only = png(50_000, 50_000, rows=b"")
    bomb = _image(owner, header_only, name="bomb.png")
    refused = owner_client.get(f"/api/v1/attachments/{bomb.pk}/thumbnail/")
    assert refused.status_code == 404
    assert refused.json()["error"] == {
        "code": "not_found",
        "message": "bomb.png is shown as a link only: a thumbnail is for images up to "
        "25,000,000 pixels and 5,242,880 bytes (or its header could not be read).",
        "details": {},
    }
    # Still downloadable, as a file.
    assert owner_client.get(f"/api/v1/attachments/{bomb.pk}/").status_code == 200


def test_over_the_byte_limit_or_not_an_image_has_no_thumbnail(owner, owner_client, settings):
    settings.ATTACHMENT_THUMBNAIL_MAX_BYTES = 100
    big = _image(owner, png(40, 40, rows=bytes(range(256)) * 7), name="big.png")
    assert big.size > 100
    assert owner_client.get(f"/api/v1/attachments/{big.pk}/thumbnail/").status_code == 404
    text = _image(owner, b"plain words", name="a.txt", kind="text", content_type="text/plain")
    refused = owner_client.get(f"/api/v1/attachments/{text.pk}/thumbnail/")
    assert refused.status_code == 404
    assert refused.json()["error"]["message"] == (
        "This file is not an image: it has no thumbnail. Download it."
    )


def _jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + b"\xff\xff" + sof + b"\xff\xd9"


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(640, 480), (640, 480)),
        (b"GIF89a" + struct.pack("<HH", 320, 200) + b"\x00" * 4, (320, 200)),
        (_jpeg(1024, 768), (1024, 768)),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8 "
            + b"\x00" * 7
            + b"\x9d\x01\x2a"
            + struct.pack("<HH", 800, 600),
            (800, 600),
        ),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8X"
            + b"\x00" * 8
            + (99).to_bytes(3, "little")
            + (49).to_bytes(3, "little"),
            (100, 50),
        ),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8L"
            + b"\x00" * 4
            + b"\x2f"
            + bytes([0x3F, 0x40, 0x1F, 0x00]),
            (64, 126),
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00", None),  # cut short
        (b"\xff\xd8\xff" + b"\x00" * 50, None),  # no marker where one must be
        (b"\xff\xd8" + b"\xff\xe0\x00\x01" * 3, None),  # a segment length under 2
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", None),
    ],
)
def test_image_size_reads_only_the_header(data, size):
    assert image_size(data) == size


def test_a_long_jpeg_walk_is_linear():
    # 200,000 empty segments before the frame: walked one segment per step.
    data = b"\xff\xd8" + b"\xff\xfe\x00\x02" * 200_000 + _jpeg(9, 7)[2:]
    assert image_size(data) == (9, 7)
