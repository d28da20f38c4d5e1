"""Published-checkpoint loading (`models/official.py`): layouts, posemb resampling, classifier conversion, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import tiny_config
from vit_jax_struct.models import get_model, official
from vit_jax_struct.train import checkpoint, trainer


def _model(classifier="token", representation_size=None, classes=5, depth=2):
    return get_model(dict(variant="mu/4", depth=depth, classifier=classifier,
                          representation_size=representation_size), classes)


def _shapes(model, size):
    return jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, size, size, 3))))["params"]


def _random(model, size, seed=0):
    """Random values (no compilation) with the model's parameter tree at `size` px."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: rng.standard_normal(s.shape).astype(np.float32), _shapes(model, size))


def _flat_equal(a, b):
    fa, fb = official.flatten(a), official.flatten(b)
    return sorted(fa) == sorted(fb) and all(np.array_equal(np.asarray(fa[k]), np.asarray(fb[k])) for k in fa)


@pytest.mark.parametrize("prefix", ["", "opt/target/"])
def test_original_layout_loads_every_key_with_equal_values(tmp_path, prefix):
    m = _model(representation_size=8)
    p = _random(m, 16)
    flat = {prefix + k: v for k, v in official.flatten(p).items()}
    path = str(tmp_path / "vit.npz")
    np.savez(path, **flat)
    with np.load(path) as z:  # the released files' key names
        assert {"embedding/kernel", "cls", "Transformer/posembed_input/pos_embedding",
                "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel",
                "Transformer/encoderblock_1/LayerNorm_2/scale", "Transformer/encoderblock_0/MlpBlock_3/Dense_1/bias",
                "Transformer/encoder_norm/bias", "pre_logits/kernel", "head/kernel"} <= {k[len(prefix):] for k in z}
    out = official.load(path, _shapes(m, 16), classifier="token", reinit="")  # shapes suffice: nothing re-inits
    assert _flat_equal(out, p)


@pytest.mark.parametrize("scan", [False, True])
def test_big_vision_layout_loads_to_the_same_params(tmp_path, scan):
    m = _model()
    p = _random(m, 16)
    pe = p["Transformer"]["posembed_input"]["pos_embedding"]
    pe[:, :1] = 0.0  # big_vision's class token has no posemb: with a zero CLS entry the round trip is exact
    bv = official.to_big_vision(p, scan=scan)
    assert bv["params/pos_embedding"].shape == (1, 16, 32)  # grid only
    if scan:
        assert bv["params/Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel"].shape == (2, 32, 2, 16)
        assert not any("encoderblock_" in k for k in bv)
    else:
        assert {"params/Transformer/encoderblock_1/LayerNorm_1/bias",
                "params/Transformer/encoderblock_1/MlpBlock_0/Dense_0/kernel"} <= set(bv)
    path = str(tmp_path / "bv.npz")
    np.savez(path, **bv)
    assert _flat_equal(official.load(path, _shapes(m, 16), classifier="token", reinit=""), p)


def test_big_vision_round_trip_computes_the_same_function():
    m = _model()
    p = _random(m, 16, seed=1)  # non-zero CLS posemb: folded into big_vision's cls, back as cls + zero entry
    back = official.load(official.to_big_vision(p), _shapes(m, 16), classifier="token", reinit="")
    x = jnp.asarray(np.random.default_rng(2).standard_normal((2, 16, 16, 3)), jnp.float32)
    apply = jax.jit(lambda params: m.apply({"params": params}, x)[0])
    np.testing.assert_allclose(apply(back), apply(p), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", official.POSEMB_RESIZE)
def test_posemb_resize_keeps_cls_and_constant_grids(method):
    rng = np.random.default_rng(0)
    cls = rng.standard_normal((1, 1, 8)).astype(np.float32)
    const = np.broadcast_to(rng.standard_normal((1, 1, 8)), (1, 196, 8)).astype(np.float32)
    out = official.resize_posemb(np.concatenate([cls, const], 1), (24, 24), num_prefix=1, method=method)
    assert out.shape == (1, 577, 8)
    assert np.array_equal(out[:, :1], cls)  # the CLS entry is copied, never resampled
    np.testing.assert_allclose(out[:, 1:], np.broadcast_to(const[:, :1], (1, 576, 8)), rtol=1e-6, atol=1e-6)
    ramp = np.tile(np.linspace(0, 1, 14, dtype=np.float32)[None, :, None], (14, 1, 1)).reshape(1, 196, 1)
    up = official.resize_posemb(ramp, (24, 24), method=method).reshape(24, 24)
    assert np.all(np.diff(up, axis=1) >= -1e-6) and np.allclose(up[0], up[-1])  # still a left-to-right ramp


def test_posemb_resize_errors_name_the_numbers():
    with pytest.raises(ValueError, match=r"N=197 entries, but a 10x20 grid plus a CLS entry needs 201"):
        official.resize_posemb(np.zeros((1, 197, 4)), (24, 24), old_grid=(10, 20), num_prefix=1)
    with pytest.raises(ValueError, match=r"197 grid positions, which is not a square grid"):
        official.resize_posemb(np.zeros((1, 197, 4)), (24, 24), num_prefix=0)
    with pytest.raises(ValueError, match=r"'nearest' is not one of"):
        official.resize_posemb(np.zeros((1, 196, 4)), (24, 24), method="nearest")
    out = official.resize_posemb(np.ones((1, 12 * 16, 4)), (6, 8), old_grid=(12, 16))  # non-square, explicit
    assert out.shape == (1, 48, 4)


def test_gap_model_never_splits_off_a_cls_entry():
    # 196 = 14x14 positions and no CLS: resampled to 24x24 = 576 (a CLS split would leave 195, not a square).
    src, dst = _model("gap"), _model("gap")
    p = _random(src, 56)
    assert p["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 196, 32)
    p["Transformer"]["posembed_input"]["pos_embedding"][:] = 0.25
    out = official.load(p, _shapes(dst, 96), classifier="gap", reinit="")
    pe = out["Transformer"]["posembed_input"]["pos_embedding"]
    assert pe.shape == (1, 576, 32) and np.allclose(pe, 0.25)


def test_classifier_conversion_is_explicit():
    tok, gap = _model("token"), _model("gap")
    p = _random(tok, 16)
    with pytest.raises(ValueError, match=r"checkpoint has class token `cls` but model.classifier is 'gap'.*"
                                         r"init_convert_classifier"):
        official.load(p, _shapes(gap, 16), classifier="gap", reinit="")
    out = official.load(p, _shapes(gap, 16), classifier="gap", reinit="", convert_classifier=True)
    assert "cls" not in out
    assert np.array_equal(out["Transformer"]["posembed_input"]["pos_embedding"],
                          p["Transformer"]["posembed_input"]["pos_embedding"][:, 1:])
    g = _random(gap, 16)
    with pytest.raises(ValueError, match=r"checkpoint has no class token `cls` but model.classifier is 'token'"):
        official.load(g, _shapes(tok, 16), classifier="token", reinit="")
    back = official.load(g, _shapes(tok, 16), classifier="token", reinit="", convert_classifier=True)
    pe = back["Transformer"]["posembed_input"]["pos_embedding"]
    assert not back["cls"].any() and not pe[:, :1].any()
    assert np.array_equal(pe[:, 1:], g["Transformer"]["posembed_input"]["pos_embedding"])


def test_unknown_missing_and_misshaped_keys_raise_with_their_names():
    m = _model()
    p = official.flatten(_random(m, 16))
    extra = {**p, "Transformer/encoderblock_2/LayerNorm_0/scale": np.ones(32, np.float32)}
    with pytest.raises(ValueError, match=r"1 checkpoint entries not in the model \[Transformer/encoderblock_2/"
                                         r"LayerNorm_0/scale \(32,\)\]"):
        official.load(extra, _shapes(m, 16), classifier="token", reinit="")
    missing = {k: v for k, v in p.items() if k != "Transformer/encoder_norm/scale"}
    with pytest.raises(ValueError, match=r"1 model parameters not in the checkpoint \[Transformer/encoder_norm/scale"):
        official.load(missing, _shapes(m, 16), classifier="token", reinit="")
    wide = official.flatten(_random(get_model(dict(variant="mu/4", depth=2, mlp_dim=64), 5), 16))
    with pytest.raises(ValueError, match=r"MlpBlock_3/Dense_0/kernel: checkpoint \(32, 64\) vs model \(32, 128\)"):
        official.load(wide, _shapes(m, 16), classifier="token", reinit="")
    with pytest.raises(ValueError, match=r"MAPHead_0 \(pool_type='map'"):
        official.load({**p, "MAPHead_0/probe": np.zeros((1, 1, 32))}, _shapes(m, 16), classifier="gap")
    with pytest.raises(FileNotFoundError, match=r"no such \.npz file"):
        official.load("/nonexistent/ViT-B_16.npz", _shapes(m, 16), classifier="token")


def test_head_and_pre_logits_are_reinitialised_by_the_regex():
    src = _model(representation_size=8, classes=21)  # an i21k-style checkpoint: pre_logits + a 21-class head
    ckpt = _random(src, 16)
    dst = _model(classes=5)
    fresh = _random(dst, 16, seed=3)  # stands for the model's fresh init (no compilation)
    out = official.load(ckpt, fresh, classifier="token")  # default regex ^(head|pre_logits)/
    assert "pre_logits" not in out
    assert out["head"]["kernel"] is fresh["head"]["kernel"] and out["head"]["bias"] is fresh["head"]["bias"]
    rest = lambda t: {k: v for k, v in official.flatten(t).items() if not k.startswith(("head/", "pre_logits/"))}
    assert _flat_equal(rest(out), rest(ckpt))
    with pytest.raises(ValueError, match=r"holds only shapes"):
        official.load(ckpt, _shapes(dst, 16), classifier="token")
    with pytest.raises(ValueError, match=r"head/kernel: checkpoint \(8, 21\) vs model \(32, 5\)"):
        official.load(ckpt, fresh, classifier="token", reinit=r"^pre_logits/")


def test_init_from_npz_resamples_and_shards_like_the_model(tmp_path):
    # The trainer's path for config.init_from=*.npz (its full run is in tests/test_configs.py): pretrained at
    # 12 px (3x3 grid), loaded at 8 px (2x2) onto a 2-way FSDP mesh.
    cfg = tiny_config(**{"mesh.fsdp": 2, "model.depth": 2})
    parts = trainer.build(cfg)
    ckpt = _random(get_model({**cfg.model, "representation_size": 8}, 7), 12)
    cfg.init_from = official.save_npz(tmp_path / "pre.npz", ckpt)
    abstract = parts["abstract_state"]["params"]
    fresh = parts["init_state"](jax.random.key(0))["params"]
    params, step = checkpoint.load_params(cfg.init_from, abstract, fresh,
                                          checkpoint.official_options(cfg, parts["model"]))
    assert step == 0
    pe = np.asarray(params["Transformer"]["posembed_input"]["pos_embedding"])
    src_pe = ckpt["Transformer"]["posembed_input"]["pos_embedding"]
    assert pe.shape == (1, 5, 32) and np.array_equal(pe[:, :1], src_pe[:, :1])
    np.testing.assert_allclose(pe[:, 1:], official.resize_posemb(src_pe[:, 1:], (2, 2), method="zoom"), rtol=1e-6)
    assert np.array_equal(np.asarray(params["embedding"]["kernel"]), ckpt["embedding"]["kernel"])
    assert params["head"]["kernel"] is fresh["head"]["kernel"]  # the fresh (zero) head, left in place
    assert jax.tree.all(jax.tree.map(lambda x, s: x.sharding.is_equivalent_to(s.sharding, x.ndim), params, abstract))
    assert any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(params))  # FSDP really shards
    cfg.model.classifier = "gap"
    with pytest.raises(ValueError, match=r"init_convert_classifier"):
        checkpoint.load_params(cfg.init_from, abstract, fresh, checkpoint.official_options(cfg, parts["model"]))
    cfg.init_posemb_grid = "3"
    with pytest.raises(ValueError, match=r"init_posemb_grid '3' is not 'h,w'"):
        checkpoint.official_options(cfg, parts["model"])
