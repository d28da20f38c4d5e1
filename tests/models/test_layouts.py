"""timm layouts beyond the plain ViT: DeiT, DeiT III, DINOv2 (with and without registers) and CLIP vision towers.

Fixtures: tests/fixtures/make_timm_layouts.py, run by hand in a separate venv with torch 2.14.1 (CPU), timm 1.0.31,
builds each family from its own timm entry point (deit_tiny_patch16_224, deit3_small_patch16_224,
vit_small_patch14_dinov2, vit_small_patch14_reg4_dinov2, vit_base_patch16_clip_quickgelu_224, and the refused
deit_tiny_distilled_patch16_224 and vit_giant_patch14_dinov2) shrunk to width 16, 2 blocks, 2 heads, with random
weights (LayerScale gammas 1 ± 0.5), and records their logits (DINOv2: the headless model's CLS features) on the
fixture images; and it loads random tiny models exported here (LayerScale, norm_pre + QuickGELU + eps 1e-5,
registers) and records timm's logits. Measured max |ours − timm| (float32, CPU, jitted, logits up to ≈ 2.4): DeiT
4.8e-7, DeiT III 8.3e-7, DINOv2 (features) 1.2e-6, DINOv2 with registers 2.3e-6, CLIP (QuickGELU) 3.6e-7; exported
here -> timm: DeiT III 8.9e-7, CLIP 1.0e-6, DINOv2 with registers 8.3e-7. Tolerance 1e-5. The same weights under
another activation (tanh for the erf families, erf for QuickGELU) move them by 1.9e-4 … 2.2e-2. No torch here: the
files are read with `safetensors.numpy`.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import logging as absl_logging

from tests.conftest import tiny_config
from tests.models.test_published_reference import FIXTURES, load_reference
from vit_jax_struct.models import get_model, official, torch_layouts, vit
from vit_jax_struct.train import checkpoint

LAYOUTS = os.path.join(FIXTURES, "weights_io", "layouts")
TOL = 1e-5
# What each family needs on our side beyond what the weights say (`torch_layouts.timm_features`).
FAMILIES = {
    "deit": dict(gelu="erf"),
    "deit3": dict(gelu="erf"),
    "dinov2": dict(gelu="erf"),
    "dinov2_reg4": dict(gelu="erf"),
    "clip_quickgelu": dict(gelu="quick", layer_norm_eps=1e-5),
}
# What `timm_features` must read from each file (besides width 16, depth 2, mlp 32).
FEATURES = {
    "deit": dict(patch_size=8, layerscale=None, norm_pre=False, num_registers=0, num_classes=5),
    "deit3": dict(patch_size=8, layerscale=torch_layouts.LAYERSCALE_INIT, norm_pre=False, num_registers=0,
                  num_classes=5),
    "dinov2": dict(patch_size=14, layerscale=torch_layouts.LAYERSCALE_INIT, norm_pre=False, num_registers=0,
                   num_classes=0),
    "dinov2_reg4": dict(patch_size=14, layerscale=torch_layouts.LAYERSCALE_INIT, norm_pre=False, num_registers=4,
                        num_classes=5),
    "clip_quickgelu": dict(patch_size=8, layerscale=None, norm_pre=True, num_registers=0, num_classes=5),
}


@pytest.fixture(scope="module")
def reference():
    ref, x = load_reference(os.path.join(LAYOUTS, "reference.json"))
    return ref, x


def _crop(x, size):
    o = (x.shape[1] - size) // 2  # as make_timm_layouts.crop: the central size x size pixels, no resampling
    return x[:, o:o + size, o:o + size]


def _path(name):
    return os.path.join(LAYOUTS, f"{name}.safetensors")


def _model(name, **overrides):
    """Our model for fixture `name`: the fields the weights determine, 2 heads, the family's GELU / epsilon."""
    feats = torch_layouts.timm_features(official.read_weights(_path(name)))
    classes = feats.pop("num_classes")
    cfg = dict(name="vit", variant=f"mu/{feats['patch_size']}", num_heads=2, **feats, **FAMILIES.get(name, {}))
    cfg.update(overrides)
    return cfg, get_model(cfg, classes)


def _shapes(model, size):
    return jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, size, size, 3))))["params"]


def _apply(model, params, x):
    return np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x)[0])(params, jnp.asarray(x)))


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("name", list(FAMILIES))
def test_timm_families_give_timms_logits_here(reference, name):
    ref, x = reference
    made = ref["models"][name]
    feats = torch_layouts.timm_features(official.read_weights(_path(name)))
    assert feats == dict(width=16, depth=2, mlp_dim=32, classifier="token", **FEATURES[name])
    cfg, model = _model(name)
    size = made["image_size"]
    params = official.load(_path(name), _shapes(model, size), classifier="token", reinit="")
    x = _crop(x, size)
    logits, want = _apply(model, params, x), np.asarray(made["logits"])
    assert logits.shape == want.shape == (4, 16 if name == "dinov2" else 5)  # headless DINOv2: CLS features
    np.testing.assert_allclose(logits, want, rtol=0, atol=TOL)
    assert np.ptp(want, axis=0).min() > 100 * TOL  # the logits differ between the images by far more than TOL
    # The family's own activation matters: the same weights under another GELU are far from timm's logits.
    other = {"erf": "tanh", "quick": "erf"}[cfg["gelu"]]
    _, wrong = _model(name, gelu=other)
    assert np.abs(_apply(wrong, params, x) - want).max() > 10 * TOL
    np.testing.assert_allclose(_apply(wrong, params, x), made["logits_other_gelu"], rtol=0, atol=TOL)
    if cfg.get("layerscale") is not None:  # the gammas are far from 1: a model without LayerScale would show
        flat = official.flatten(params)
        unit = official.unflatten({k: (np.ones_like(v) if k.endswith(("/ls1", "/ls2")) else v)
                                   for k, v in flat.items()})
        assert np.abs(_apply(model, unit, x) - want).max() > 100 * TOL
    if cfg.get("norm_pre"):  # timm's CLIP towers use LayerNorm eps 1e-5: with 1e-6 the logits move
        _, eps6 = _model(name, layer_norm_eps=1e-6)
        assert np.abs(_apply(eps6, params, x) - want).max() > TOL


def test_init_from_config_path_loads_a_deit3_file(reference):
    """Through the config: `c.model.layerscale` etc. reach the model, `official_options` feeds `official.load`."""
    ref, x = reference
    c = tiny_config(init_from=_path("deit3"), init_reinit="", **{
        "model.variant": "mu/8", "model.width": 16, "model.depth": 2, "model.num_heads": 2, "model.mlp_dim": 32,
        "model.gelu": "erf", "model.layerscale": 1e-6, "data.image_size": 64})
    model = get_model(c.model, 5)
    assert model.layerscale == 1e-6 and model.norm_pre is False and model.layer_norm_eps == 1e-6
    params = official.load(c.init_from, _shapes(model, 64), **checkpoint.official_options(c, model))
    assert params["Transformer"]["encoderblock_0"]["ls1"].shape == (16,)
    np.testing.assert_allclose(_apply(model, params, x), ref["models"]["deit3"]["logits"], rtol=0, atol=TOL)


@pytest.fixture
def absl_warnings(monkeypatch):
    seen = []
    monkeypatch.setattr(absl_logging, "warning", lambda msg, *args: seen.append(msg % args if args else msg))
    return seen


def test_a_gelu_mismatch_is_one_line(tmp_path, absl_warnings):
    model = get_model(_model("deit")[0], 5)
    # A timm file records no activation: a tanh model is warned once, in one line; an erf model is not.
    c = tiny_config(init_from=_path("deit"), **{"model.gelu": "tanh", "data.image_size": 64})
    checkpoint.official_options(c, model)
    assert len(absl_warnings) == 1 and "\n" not in absl_warnings[0]
    assert "does not record its GELU" in absl_warnings[0] and "--config.model.gelu=erf" in absl_warnings[0]
    c.model.gelu = "erf"
    checkpoint.official_options(c, model)
    assert len(absl_warnings) == 1
    # A CLIP tower (norm_pre): the warning names QuickGELU and the 1e-5 epsilon unless the model has them.
    c = tiny_config(init_from=_path("clip_quickgelu"), **{"model.gelu": "erf", "data.image_size": 64})
    checkpoint.official_options(c, model)
    assert len(absl_warnings) == 2 and "--config.model.gelu=quick" in absl_warnings[1]
    assert "layer_norm_eps=1e-5" in absl_warnings[1] and "\n" not in absl_warnings[1]
    c.model.update(gelu="quick", layer_norm_eps=1e-5)
    checkpoint.official_options(c, model)
    assert len(absl_warnings) == 2
    # A file that records its GELU (our export's safetensors header) refuses another one in one line.
    sd = official.read_weights(_path("deit"))
    recorded = str(tmp_path / "erf.safetensors")
    torch_layouts.write_safetensors(recorded, sd, {**torch_layouts.SAFETENSORS_METADATA, "gelu": "erf"})
    c = tiny_config(init_from=recorded, **{"model.gelu": "tanh", "data.image_size": 64})
    with pytest.raises(ValueError) as e:
        checkpoint.official_options(c, model)
    assert "trained with the erf GELU" in _one_line(e) and "--config.model.gelu=erf" in str(e.value)
    assert official.checkpoint_gelu(recorded)[0] == "erf"


def test_swiglu_is_refused_in_one_line():
    _, model = _model("dinov2")
    shapes = _shapes(model, 28)
    with pytest.raises(ValueError) as e:  # timm's SwiGLUPacked keeps the names fc1/fc2: told by the shapes
        official.load(_path("dinov2_swiglu"), shapes, classifier="token", reinit="")
    msg = _one_line(e)
    assert "'blocks.0.mlp.fc1.weight' (64, 16)" in msg and "packed SwiGLU" in msg and "supported timm features" in msg
    sd = official.read_weights(_path("dinov2_swiglu"))  # the DINOv2 repository's names: mlp.w12 / mlp.w3
    sd = {k.replace("mlp.fc1", "mlp.w12").replace("mlp.fc2", "mlp.w3"): v for k, v in sd.items()}
    with pytest.raises(ValueError) as e:
        official.load(sd, shapes, classifier="token", reinit="")
    assert "'blocks.0.mlp.w12.bias' is a SwiGLU MLP" in _one_line(e)
    sd = {**official.read_weights(_path("dinov2")), "blocks.1.attn.q_norm.weight": np.ones(8, np.float32)}
    with pytest.raises(ValueError) as e:
        official.load(sd, shapes, classifier="token", reinit="")
    msg = _one_line(e)  # every difference listed, then the feature named with what is supported
    assert "1 checkpoint entries not in the model [blocks.1.attn.q_norm.weight (8,)]" in msg
    assert "timm features this ViT does not have: 'blocks.1.attn.q_norm.weight' is QK-norm" in msg
    assert msg.endswith("supported timm features: " + torch_layouts.SUPPORTED_TIMM + ".")


def test_dinov2_mask_token_is_dropped_and_its_original_names_load(reference, caplog):
    ref, x = reference
    x = _crop(x, 56)
    _, model = _model("dinov2")
    sd = {**official.read_weights(_path("dinov2")), "mask_token": np.ones((1, 16), np.float32)}
    with caplog.at_level("INFO"):
        params = official.load(sd, _shapes(model, 56), classifier="token", reinit="")
    assert any("dropped checkpoint entry mask_token" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(_apply(model, params, x), ref["models"]["dinov2"]["logits"], rtol=0, atol=TOL)
    # The DINOv2 repository's file with registers: `register_tokens`, and a posemb with a class entry (timm folds
    # that entry into cls_token for its no_embed_class model); both compute the same function.
    _, model = _model("dinov2_reg4")
    timm_sd = official.read_weights(_path("dinov2_reg4"))
    r0 = np.random.default_rng(0).normal(size=(1, 1, 16)).astype(np.float32)
    original = {k: v for k, v in timm_sd.items() if k not in ("reg_token", "cls_token", "pos_embed")}
    original.update(register_tokens=timm_sd["reg_token"], cls_token=timm_sd["cls_token"] - r0,
                    pos_embed=np.concatenate([r0, timm_sd["pos_embed"]], axis=1), mask_token=np.zeros((1, 16)))
    params = official.load(original, _shapes(model, 56), classifier="token", reinit="")
    np.testing.assert_allclose(_apply(model, params, x), ref["models"]["dinov2_reg4"]["logits"], rtol=0, atol=TOL)


def test_distilled_deit_is_refused_listing_its_entries_first():
    _, model = _model("deit")
    with pytest.raises(ValueError) as e:
        official.load(_path("deit_distilled"), _shapes(model, 64), classifier="token", reinit="")
    msg = _one_line(e)
    assert msg.startswith("checkpoint entries ['dist_token', 'head_dist.bias', 'head_dist.weight'] are not in the "
                          "model: the checkpoint is a distilled DeiT (timm `dist_token`, `head_dist`)")


@pytest.mark.parametrize("name, overrides, text", [
    ("deit3", dict(layerscale=None), "checkpoint has LayerScale (timm `blocks.{i}.ls1.gamma`"),
    ("deit", dict(layerscale=1e-5), "model.layerscale is set"),
    ("clip_quickgelu", dict(norm_pre=False), "set --config.model.norm_pre=True"),
    ("deit", dict(norm_pre=True), "model.norm_pre is True but the checkpoint has no norm_pre"),
])
def test_a_feature_mismatch_is_one_line(name, overrides, text):
    _, model = _model(name, **overrides)
    with pytest.raises(ValueError) as e:
        official.load(_path(name), _shapes(model, 64), classifier="token", reinit="")
    assert text in _one_line(e)


def test_new_fields_default_to_the_plain_vit_and_scan_with_layerscale():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    plain = vit.VisionTransformer(num_classes=3, variant="mu/4")
    v = plain.init(jax.random.PRNGKey(1), x)
    assert not any(k.endswith(("/ls1", "/ls2")) or "norm_pre" in k for k in official.flatten(v["params"]))
    explicit = vit.VisionTransformer(num_classes=3, variant="mu/4", layerscale=None, norm_pre=False,
                                     layer_norm_eps=1e-6, gelu="tanh")
    assert np.array_equal(np.asarray(plain.apply(v, x)[0]), np.asarray(explicit.apply(v, x)[0]))
    y = jnp.linspace(-4, 4, 17)
    np.testing.assert_allclose(np.asarray(vit.gelu(y, "quick")), np.asarray(y / (1 + jnp.exp(-1.702 * y))),
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"model\.gelu 'relu' is not one of 'tanh', 'erf', 'quick'"):
        vit.VisionTransformer(num_classes=3, variant="mu/4", gelu="relu").init(jax.random.PRNGKey(1), x)
    # LayerScale and norm_pre under nn.scan: the stacked parameters compute what the unscanned ones do.
    kw = dict(num_classes=3, variant="mu/4", depth=2, layerscale=0.5, norm_pre=True, gelu="quick")
    unscanned, scanned = vit.VisionTransformer(**kw), vit.VisionTransformer(scan=True, **kw)
    p = unscanned.init(jax.random.PRNGKey(1), x)["params"]
    assert p["Transformer"]["encoderblock_1"]["ls2"].shape == (32,) and "norm_pre" in p["Transformer"]
    np.testing.assert_allclose(np.asarray(scanned.apply({"params": vit.stack_blocks(p)}, x)[0]),
                               np.asarray(unscanned.apply({"params": p}, x)[0]), rtol=0, atol=1e-6)


def test_reference_records_the_libraries():
    with open(os.path.join(LAYOUTS, "reference.json")) as f:
        ref = json.load(f)
    assert ref["versions"]["timm"] == "1.0.31"
    acts = {k: (m["act_layer"], m["layer_norm_eps"]) for k, m in ref["models"].items()}
    assert acts["deit"] == acts["deit3"] == acts["dinov2"] == ("GELU", 1e-6)
    assert acts["clip_quickgelu"] == ("QuickGELU", 1e-5) and ref["models"]["clip_quickgelu"]["pre_norm"]
    assert ref["models"]["deit3"]["no_embed_class"] and ref["models"]["dinov2_reg4"]["num_reg_tokens"] == 4


@pytest.mark.parametrize("name", ["here_deit3", "here_clip", "here_dinov2_reg4"])
def test_models_exported_here_give_our_logits_in_timm(reference, name):
    """`export` to timm with LayerScale (`init_values`), norm_pre (`pre_norm`, the patch bias folded into the
    posemb), QuickGELU and eps 1e-5 (`vit_base_patch16_clip_224`), registers: timm loaded every tensor and computed
    our logits (make_timm_layouts.py step 2a); the file loads back here to the same tensors."""
    from vit_jax_struct import export

    ref, x = reference
    there = ref["exported_here"][name]
    path = os.path.join(FIXTURES, there["file"])
    with open(path + ".json") as f:
        side = json.load(f)
    cfg, size = side["model"], there["image_size"]
    model = get_model(cfg, side["architecture"]["num_classes"])
    params = official.load(path, _shapes(model, size), classifier="token", reinit="")
    np.testing.assert_allclose(_apply(model, params, _crop(x, size)), there["logits"], rtol=0, atol=TOL)
    assert there["act_layer"] == {"erf": "GELU", "quick": "QuickGELU"}[cfg["gelu"]]
    assert there["layer_norm_eps"] == cfg.get("layer_norm_eps", 1e-6)
    assert official.checkpoint_gelu(path)[0] == cfg["gelu"]  # the header says which GELU
    if cfg.get("norm_pre"):
        assert side["timm"]["model_name"] == export.TIMM_EPS5_MODEL and side["timm"]["kwargs"]["pre_norm"] is True
        assert side["timm"]["kwargs"]["act_layer"] == "quick_gelu"
    if cfg.get("layerscale"):
        assert side["timm"]["kwargs"]["init_values"] == cfg["layerscale"]
    stored = official.read_weights(path)
    again = export.convert(params, "timm")
    assert sorted(again) == sorted(stored) and all(np.array_equal(again[k], stored[k]) for k in stored)


@pytest.mark.parametrize("model, fmt, text", [
    (dict(layerscale=1e-5), "hf", "model.layerscale 1e-05: the hf ViT has no LayerScale; use --format=timm"),
    (dict(norm_pre=True), "vit_jax", "model.norm_pre True: the vit_jax ViT has no LayerNorm before the first block"),
    (dict(layer_norm_eps=1e-5), "big_vision", "model.layer_norm_eps 1e-05: the big_vision ViT's LayerNorms have eps"),
    (dict(layer_norm_eps=1e-4), "timm", "model.layer_norm_eps 0.0001: the timm ViT's LayerNorms have eps 1e-06 or"),
    (dict(gelu="quick"), "vit_jax", "model.gelu 'quick': the vit_jax ViT uses flax's tanh GELU"),
])
def test_export_of_a_feature_the_format_lacks_is_one_line(model, fmt, text):
    from vit_jax_struct import export

    with pytest.raises(export.ExportError) as e:
        export.check_model({"name": "vit", **model}, fmt)
    assert text in _one_line(e)
    export.check_model({"name": "vit", "gelu": "quick", "layer_norm_eps": 1e-5}, "hf")  # transformers has both
    assert export.hf_config({**export._arch({"name": "vit", "variant": "mu/8", "gelu": "quick",
                                             "layer_norm_eps": 1e-5}, 5)}, 64)["hidden_act"] == "quick_gelu"
