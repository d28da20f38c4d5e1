"""ViT: sizes, parameter layout, outputs, and MHSA against an independent numpy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax_struct.models import get_model, vit
from vit_jax_struct.train.sharding import tree_paths


def _count(variant, classes=1000, size=224, **kw):
    m = get_model(dict(variant=variant, **kw), classes)
    shapes = jax.eval_shape(lambda: m.init(jax.random.key(0), jnp.zeros((1, size, size, 3))))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


@pytest.mark.parametrize("variant,millions", [("Ti/16", 5.717), ("B/16", 86.568), ("L/16", 304.327),
                                              ("H/14", 632.046)])
def test_parameter_counts_match_the_vit_paper(variant, millions):
    # ViT paper Table 1 (86M / 307M / 632M; L/16 with a 1000-class head at 224 px is 304.3M).
    assert _count(variant) / 1e6 == pytest.approx(millions, abs=1e-3)


def test_original_parameter_layout_and_gap_has_no_cls():
    m = get_model(dict(variant="mu/4", depth=2), 10)
    params = m.init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)))["params"]
    paths = set(tree_paths(params))
    for p in ["embedding/kernel", "cls", "Transformer/posembed_input/pos_embedding",
              "Transformer/encoderblock_1/LayerNorm_0/scale",
              "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel",
              "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/out/kernel",
              "Transformer/encoderblock_1/LayerNorm_2/bias", "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel",
              "Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias", "Transformer/encoder_norm/scale",
              "head/kernel", "head/bias"]:
        assert p in paths, p
    assert params["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 17, 32)  # 16 patches + CLS
    gap = get_model(dict(variant="mu/4", classifier="gap"), 10).init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)))
    assert "cls" not in gap["params"]
    assert gap["params"]["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 16, 32)


def test_outputs_shapes_attention_rows_and_zero_head():
    m = get_model(dict(variant="mu/4", depth=2, head_bias_init=-10.0), 5)
    x = jax.random.normal(jax.random.key(1), (3, 16, 16, 3))
    variables = m.init(jax.random.key(0), x)
    logits, out = m.apply(variables, x, return_attention=True)
    np.testing.assert_array_equal(logits, -10.0)  # zero-init kernel: logits are the bias
    assert out["stem"].shape == (3, 16, 32) and out["block01"].shape == (3, 17, 32)
    assert out["pre_logits"].shape == (3, 32)
    a = out["attention/block00"]
    assert a.shape == (3, 2, 17, 17)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-6)
    _, out2 = m.apply(variables, x)
    assert not any(k.startswith("attention/") for k in out2)
    np.testing.assert_array_equal(out["pre_logits"], out2["pre_logits"])


def test_mhsa_matches_numpy_reference():
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32)
    mod = vit.MultiHeadDotProductAttention(num_heads=2)
    variables = mod.init(jax.random.key(0), x)
    y, w = mod.apply(variables, x)
    p = jax.tree.map(np.asarray, variables["params"])
    proj = lambda name: np.einsum("bnd,dhk->bnhk", x, p[name]["kernel"]) + p[name]["bias"]
    q, k, v = proj("query"), proj("key"), proj("value")
    logits = np.einsum("bqhk,bvhk->bhqv", q, k) / np.sqrt(4)
    ref_w = np.exp(logits - logits.max(-1, keepdims=True))
    ref_w /= ref_w.sum(-1, keepdims=True)
    ref_y = np.einsum("bhqv,bvhk->bqhk", ref_w, v)
    ref_y = np.einsum("bqhk,hkd->bqd", ref_y, p["out"]["kernel"]) + p["out"]["bias"]
    np.testing.assert_allclose(w, ref_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, ref_y, rtol=1e-4, atol=1e-5)


def test_sincos2d_posemb_has_no_parameter_and_known_values():
    pe = np.asarray(vit.posemb_sincos_2d(2, 3, 8))
    assert pe.shape == (1, 6, 8)
    # Position (0, 0): sin(0) = 0 and cos(0) = 1 for both axes.
    np.testing.assert_allclose(pe[0, 0], [0, 0, 1, 1, 0, 0, 1, 1], atol=1e-7)
    # Position (row 1, col 2): x-part uses 2 * omega, y-part 1 * omega; omega = [1, 1e-4].
    om = np.array([1.0, 1e-4])
    np.testing.assert_allclose(pe[0, 5], np.concatenate([np.sin(2 * om), np.cos(2 * om), np.sin(om), np.cos(om)]),
                               rtol=1e-6)
    m = get_model(dict(variant="mu/4", posemb="sincos2d"), 3)
    params = m.init(jax.random.key(0), jnp.zeros((1, 8, 8, 3)))["params"]
    assert "posembed_input" not in params["Transformer"]


def test_bad_input_errors():
    with pytest.raises(ValueError, match=r"model.variant 'X/16' is not one of mu, Ti, S, B, L, H"):
        get_model(dict(variant="X/16"), 10)
    with pytest.raises(ValueError, match=r"no valid patch size"):
        get_model(dict(variant="Ti/x"), 10)
    with pytest.raises(ValueError, match=r"image size 30x30 is not divisible by the patch size 4"):
        get_model(dict(variant="mu/4"), 10).init(jax.random.key(0), jnp.zeros((1, 30, 30, 3)))
    with pytest.raises(ValueError, match=r"model key\(s\) \['widht'\] are not fields"):
        get_model(dict(variant="mu/4", widht=3), 10)
    with pytest.raises(ValueError, match=r"model.classifier 'cls' is not one of 'token', 'gap'"):
        get_model(dict(variant="mu/4", classifier="cls"), 10).init(jax.random.key(0), jnp.zeros((1, 8, 8, 3)))


def test_bfloat16_compute_keeps_float32_params_and_logits():
    x = jax.random.normal(jax.random.key(1), (2, 8, 8, 3))
    m32 = get_model(dict(variant="mu/4", head_bias_init=0.5), 3)
    m16 = get_model(dict(variant="mu/4", head_bias_init=0.5, dtype="bfloat16"), 3)
    variables = m32.init(jax.random.key(0), x)
    assert {p.dtype for p in jax.tree.leaves(m16.init(jax.random.key(0), x))} == {jnp.dtype("float32")}
    _, o32 = m32.apply(variables, x)
    l16, o16 = m16.apply(variables, x)
    assert l16.dtype == jnp.float32 and o16["block00"].dtype == jnp.bfloat16
    np.testing.assert_allclose(o16["pre_logits"].astype(np.float32), o32["pre_logits"], atol=0.1)
    with pytest.raises(ValueError, match=r"model.dtype 'float8' is not one of"):
        get_model(dict(variant="mu/4", dtype="float8"), 3)
