"""Real ``transformers`` architectures through ``tunecache.compile`` (issue 23).

Tiny configs (one layer, hidden 32, 8 tokens), random weights, nothing downloaded; each model is
wrapped to return its first output, compiled with ``tune="never"`` into an empty store and
compared with eager PyTorch. GPT-2, RoBERTa and DeBERTa-v2 are the three faults of the issue
(an empty ``torch.cat`` operand from ``DynamicCache``; weight prepacking breaking on a
``cumsum``; the NHWC conversion running out of memory on a model without convolutions); then one
model per family. ``tools/bench_coverage.py`` runs 36 architectures through both paths.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tunecache

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed: `pip install -e '.[bench]'` (tools/test.sh does)"
)

pytestmark = [pytest.mark.tvm, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                                                          "ignore::DeprecationWarning")]

VOCAB = 128
_DEC = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)
_ENC = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)


def _first_output(model, names):
    class First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args, strict=True)))
            return out if isinstance(out, torch.Tensor) else out[0]

    return First().eval()


def _ids(n=8):
    return torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(n))


def _text(cls, cfg, **kw):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, cfg)(**kw)).eval()
    return _first_output(model, ("input_ids",)), (_ids(),)


def _compile_and_compare(module, inputs, **kw):
    with torch.no_grad():
        want = module(*inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = tunecache.compile(module, example_inputs=inputs, store="memory", tune="never", progress=False,
                               library_cache=False, **kw)
    got = cm(*inputs)
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-4 * scale, "differs from eager PyTorch"
    return cm


# --- the three faults of issue 23 -----------------------------------------------------------------


def test_gpt2_with_its_dynamic_cache_compiles():
    """use_cache=True (the default): DynamicCache concatenates an empty 1-D placeholder with each
    layer's first keys and values; the import used to fail with 'Concat expects all input
    tensors to have same ndim'."""
    model, inputs = _text("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2,
                          n_positions=64, bos_token_id=1, eos_token_id=2)
    assert model.model.config.use_cache
    cm = _compile_and_compare(model, inputs)
    assert any("torch.cat" in n for n in cm.report.notes)
    assert "note: import: dropped empty 1-D operands" in str(cm.report)


@pytest.mark.parametrize(("cls", "cfg", "kw"), [
    ("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64)),
    ("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=2, **_DEC)),
], ids=["gpt2", "llama"])
def test_a_decoder_lm_passed_as_it_is_compiles_without_its_kv_cache(cls, cfg, kw):
    """A decoder LM passed directly (use_cache=True, its config's default) returns a key/value
    cache object torch.export cannot flatten ('Found DynamicCache in output'): it is exported
    with use_cache=False, says so, and computes the same logits."""
    torch.manual_seed(0)
    model = getattr(transformers, cls)(getattr(transformers, cfg)(**kw)).eval()
    assert model.config.use_cache
    ids = _ids()
    with torch.no_grad():
        want = model(ids).logits
    try:  # what a user met before (transformers 5.x, torch 2.13)
        torch.export.export(model, (ids,))
        refused = False
    except Exception as err:  # noqa: BLE001 - torch.export's own error types vary
        refused = "cache" in str(err).lower()
    cm = tunecache.compile(model, example_inputs=(ids,), store="memory", tune="never", progress=False,
                           library_cache=False)
    assert refused == any(n.startswith("import: exported with use_cache=False") for n in cm.report.notes), (
        refused, cm.report.notes)
    got = cm(ids)
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max())


def test_a_decoder_lm_from_a_factory_file_compiles_from_the_command_line(tmp_path, capfd):
    """The same through ``tunecache compile FILE.py:factory`` (the report's notes in its JSON)."""
    import json

    from tunecache.cli import main

    src = tmp_path / "lm.py"
    src.write_text(
        "import torch, transformers\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        f"    cfg = transformers.GPT2Config(vocab_size={VOCAB}, n_embd=32, n_layer=1, n_head=2, n_positions=64)\n"
        f"    return transformers.GPT2LMHeadModel(cfg).eval(), (torch.randint(3, {VOCAB}, (1, 8)),)\n"
    )
    assert main(["compile", f"{src}:make", "--db", "memory", "--tune", "never", "--no-library-cache", "--json"]) == 0
    notes = json.loads(capfd.readouterr().out)["notes"]
    assert any(n.startswith("import: exported with use_cache=False") for n in notes), notes


def test_roberta_builds_with_an_empty_store():
    """The position ids' cumsum has no compute block under its root: weight prepacking, which ran
    on every kernel even without records, failed the build ('There should be a compute block if
    there is only one subtree under the root')."""
    model, inputs = _text("RobertaModel", "RobertaConfig", pad_token_id=1, **_ENC)
    cm = _compile_and_compare(model, inputs)
    assert any(t.name.startswith("cumsum") for t in cm.report.tasks)
    assert all(t.outcome in ("predicted", "fallback") for t in cm.report.tasks)


def test_deberta_v2_keeps_its_layout():
    """No 2-D convolution: the NHWC conversion is not run (it raised std::bad_alloc)."""
    model, inputs = _text("DebertaV2Model", "DebertaV2Config", **_ENC)
    _compile_and_compare(model, inputs)


# --- one model per family -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "cfg", "kw"),
    [
        pytest.param("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=2, **_DEC), id="llama"),
        pytest.param("LlamaForCausalLM", "LlamaConfig", dict(num_key_value_heads=2, use_cache=False, **_DEC),
                     id="llama-no-cache"),  # a bool cumsum in the mask: PyTorch sums it in int64
        pytest.param("FalconForCausalLM", "FalconConfig",
                     dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4),
                     id="falcon"),  # keys and values indexed [..., [-2], :]: negative indices wrap
    ],
)
def test_decoder_lms(cls, cfg, kw):
    model, inputs = _text(cls, cfg, **kw)
    _compile_and_compare(model, inputs)


def test_encoder_decoder_with_decoder_inputs():
    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=64)
    model = _first_output(transformers.BartModel(cfg).eval(), ("input_ids", "decoder_input_ids"))
    _compile_and_compare(model, (_ids(), _ids(4)))


def test_vision_transformer():
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                                  window_size=4)
    model = _first_output(transformers.SwinModel(cfg).eval(), ("pixel_values",))
    _compile_and_compare(model, (torch.randn(1, 3, 32, 32),))


def test_audio_encoder_decoder():
    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=32, encoder_layers=1,
                                     decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                     encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
                                     max_target_positions=32, decoder_start_token_id=1, pad_token_id=0,
                                     bos_token_id=1, eos_token_id=2)
    model = _first_output(transformers.WhisperModel(cfg).eval(), ("input_features", "decoder_input_ids"))
    _compile_and_compare(model, (torch.randn(1, 16, 32), _ids(4)))


def test_onnx_path_with_exported_shape_arithmetic(tmp_path):
    """The TorchScript exporter writes Shape/Gather/ConstantOfShape arithmetic TVM's importer
    rejects ('ConstantOfShape ... ndim 0', 'Slice requires a statically known input rank'):
    folded to constants for the static input shapes."""
    model, inputs = _text("MistralForCausalLM", "MistralConfig", num_key_value_heads=4, **_DEC)
    path = tmp_path / "mistral.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17)
        cm = tunecache.compile(str(path), example_inputs=tuple(x.numpy() for x in inputs), store="memory",
                               tune="never", progress=False, library_cache=False)
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = cm(*[x.numpy() for x in inputs])
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    assert any("folded to constants" in n for n in cm.report.notes)


# --- the zoo's decoder LM is a LLaMA ----------------------------------------------------------------


def test_zoo_llama_small_computes_what_transformers_llama_computes():
    from tunecache import zoo

    zm = zoo.get("llama_small", seq_len=8, num_layers=2, hidden=32, heads=4, kv_heads=2, intermediate=64, vocab=64)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                                   rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                                   use_cache=False)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    ours = zm.module
    names = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
             "lm_head.weight": "lm_head.weight"}
    for i in range(2):
        p, q = f"layers.{i}.", f"model.layers.{i}."
        names.update({p + "input_norm.weight": q + "input_layernorm.weight",
                      p + "post_norm.weight": q + "post_attention_layernorm.weight"})
        names.update({p + f"attention.{n}.weight": q + f"self_attn.{n}.weight" for n in ("q_proj", "k_proj", "v_proj",
                                                                                          "o_proj")})
        names.update({p + f"{n}.weight": q + f"mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")})
    theirs = dict(hf.named_parameters())
    with torch.no_grad():
        for ours_name, p in ours.named_parameters():
            theirs[names[ours_name]].copy_(p)
        torch.testing.assert_close(hf(input_ids=zm.example_inputs[0]).logits, ours(*zm.example_inputs),
                                   rtol=1e-4, atol=1e-5)
