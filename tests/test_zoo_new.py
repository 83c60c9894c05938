"""The zoo's models the store has not seen (issue 19): VGG-16, ViT-B/16, a GPT-2-style decoder,
and BERT-base at other sequence lengths.

Each is built tiny (the layers of the real model, fewer and narrower), compiled with
``tune="never"`` against an in-memory store, and compared with PyTorch. The full-size models are
only measured by hand (docs/NOTES.md, session 9): importing them takes tens of seconds each.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import tunecache
from tunecache import zoo
from tunecache.errors import UnsupportedModelError
from tunecache.models import load_model_spec

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

NEW = ("vgg16", "vit_b16", "gpt2_small")

#: The tiny versions the tests build: the real models' layers, fewer and narrower. VGG-16 keeps
#: all its layers (its weights are 138M parameters whatever the image size: ~1 s to build).
TINY: dict[str, dict[str, int]] = {
    "vgg16": dict(image_size=32),
    "vit_b16": dict(image_size=32, patch=16, num_layers=1, hidden=64, heads=2, mlp=128),
    "gpt2_small": dict(num_layers=1, hidden=64, heads=2, vocab=100, seq_len=16),
}


@pytest.fixture(scope="module")
def tiny() -> dict[str, zoo.ZooModel]:
    return {name: zoo.get(name, **params) for name, params in TINY.items()}


def test_the_new_models_are_in_the_zoo_and_its_listing(capfd) -> None:
    from tunecache.cli.main import main

    assert set(NEW) <= set(zoo.names())
    assert "image_size=224" in zoo.describe("vgg16") and "batch_norm=False" in zoo.describe("vgg16")
    assert "patch=16" in zoo.describe("vit_b16") and "hidden=768" in zoo.describe("vit_b16")
    assert "seq_len=128" in zoo.describe("gpt2_small") and "vocab=50257" in zoo.describe("gpt2_small")
    assert main(["zoo", "list"]) == 0
    out = capfd.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert set(NEW) <= listed, out


@pytest.mark.parametrize(
    ("name", "out_shape"),
    [("vgg16", (1, 1000)), ("vit_b16", (1, 1000)), ("gpt2_small", (1, 16, 100))],
)
def test_the_new_models_run_in_pytorch_seeded(tiny, name, out_shape) -> None:
    m = tiny[name]
    assert not m.module.training and "=" in m.name
    state = torch.random.get_rng_state()
    again = zoo.get(name, **TINY[name])
    assert torch.equal(torch.random.get_rng_state(), state)
    with torch.no_grad():
        out = m.module(*m.example_inputs)
        torch.testing.assert_close(again.module(*again.example_inputs), out, rtol=0, atol=0)
    assert tuple(out.shape) == out_shape and torch.isfinite(out).all() and out.std() > 1e-3


def test_vit_b16_and_gpt2_small_have_the_real_models_shapes() -> None:
    vit = zoo.get("vit_b16", num_layers=1)  # 224x224 in patches of 16: 196 patches and a class token
    assert vit.module.pos_embed.shape == (1, 197, 768) and vit.example_inputs[0].shape == (1, 3, 224, 224)
    assert len(zoo.get("vit_b16", image_size=32, hidden=64, heads=2, mlp=128).module.layers) == 12
    gpt = zoo.get("gpt2_small", num_layers=1, vocab=100)
    assert gpt.example_inputs[0].shape == (1, 128) and gpt.module.wpe.weight.shape == (1024, 768)
    assert gpt.module.lm_head.weight is gpt.module.wte.weight  # tied, as GPT-2
    assert gpt.module.layers[0].act.approximate == "tanh"


def test_gpt2_small_is_causal(tiny) -> None:
    m = tiny["gpt2_small"]
    ids = m.example_inputs[0]
    changed = ids.clone()
    changed[0, 10] = (ids[0, 10] + 1) % 100
    with torch.no_grad():
        a, b = m.module(ids), m.module(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10], rtol=0, atol=0)  # earlier positions never see it
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_vgg16_batch_norm_and_parameters_from_a_spec() -> None:
    module, inputs, name = load_model_spec("vgg16:image_size=32,batch_norm=1,num_classes=10")
    assert name == "vgg16(image_size=32, num_classes=10, batch_norm=1)"
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in module.modules()) == 13
    assert sum(isinstance(m, torch.nn.Conv2d) for m in module.modules()) == 13
    with torch.no_grad():
        assert module(*inputs).shape == (1, 10)
    plain, _, _ = load_model_spec("vgg16:image_size=32,batch_norm=false")
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in plain.modules())
    with pytest.raises(UnsupportedModelError, match="batch_norm"):
        zoo.get("vgg16", batch_norm="maybe")


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("vgg16", {"image_size": 16}, "below 32"),
        ("vit_b16", {"image_size": 40}, "patches of 16"),
        ("vit_b16", {"hidden": 100}, "heads=12"),
        ("gpt2_small", {"hidden": 100}, "not divisible"),
        ("gpt2_small", {"kv_heads": 2}, "takes batch"),
    ],
)
def test_bad_parameters_say_what_is_wrong(name, params, match) -> None:
    with pytest.raises(UnsupportedModelError, match=match):
        zoo.get(name, **params)


@pytest.mark.tvm
@pytest.mark.parametrize("name", NEW)
def test_the_new_models_compile_and_compute_what_pytorch_computes(tiny, name) -> None:
    m = tiny[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = tunecache.compile(m.module, example_inputs=m.example_inputs, tune="never", store="memory",
                               progress=False, library_cache=False)
    assert cm.report.trials == 0 and cm.report.tasks
    # An empty store: nothing to replay, programs predicted from each task's design space.
    assert all(t.outcome in ("predicted", "fallback") for t in cm.report.tasks)
    with torch.no_grad():
        ref = m.module(*m.example_inputs)
    np.testing.assert_allclose(cm(*m.example_inputs).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.tvm
@pytest.mark.parametrize("seq_len", [64, 384])
def test_bert_base_at_other_sequence_lengths_gives_other_attention_tasks(target, seq_len) -> None:
    from tunecache.tvm_layer import frontend

    module, inputs, name = load_model_spec(f"bert_base:seq_len={seq_len},num_layers=1")
    assert name == f"bert_base(seq_len={seq_len}, num_layers=1)" and inputs[0].shape == (1, seq_len)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        imported = frontend.import_model(module, inputs)
    tasks = frontend.extract_tasks(frontend.prepare_for_tuning(imported, target), target)
    families = collections.Counter(t.desc.family for t in tasks)
    assert families["matmul"] == 3  # QKV/output projections, FFN up, FFN down: as at 128 (test_frontend)
    # scores and context; at 64 (= the head size) their shapes are the same: one task
    assert sum(t.weight for t in tasks if t.desc.family == "batch_matmul") == 2
    scores = [t for t in tasks if t.desc.family == "batch_matmul"]
    assert all(seq_len in t.desc.shapes[0] for t in scores)
    matmuls = [t for t in tasks if t.desc.family == "matmul"]
    assert all(t.desc.shapes[0][0] == seq_len for t in matmuls), [t.desc.shapes for t in matmuls]
