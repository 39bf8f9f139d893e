"""Keep litellm and tiktoken offline in every process.

litellm fetches its model-cost map at import unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set, and
tiktoken downloads encodings unless ``TIKTOKEN_CACHE_DIR`` points at local files. litellm ships the
cl100k_base / o200k_base files in its package, so we point tiktoken there without importing
litellm (that import costs ~4 s and must stay lazy).
"""

import importlib.util
import os
from pathlib import Path


def litellm_tokenizers_dir() -> str | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(path) if path.is_dir() else None


def ensure_offline_environment() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        tokenizers = litellm_tokenizers_dir()
        if tokenizers:
            os.environ["TIKTOKEN_CACHE_DIR"] = tokenizers
