"""Positional attention (Jelassi et al. 2022) and skip-connection removal (Raghu et al. 2021 §5)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax_struct.models import get_model, vit


def _attn(model, variables, x):
    _, out = model.apply(variables, x, return_attention=True)
    return [out[f"attention/block{i:02d}"] for i in range(2)]


def test_positional_attention_is_image_independent_and_differs_from_standard():
    x1 = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))
    x2 = jax.random.normal(jax.random.key(2), (2, 16, 16, 3))
    pos = get_model(dict(variant="mu/4", depth=2, attention="positional"), 4)
    std = get_model(dict(variant="mu/4", depth=2), 4)
    variables = pos.init(jax.random.key(0), x1)  # same parameter tree for both
    a1, a2 = _attn(pos, variables, x1), _attn(pos, variables, x2)
    for b in range(2):
        np.testing.assert_array_equal(a1[b], a2[b])
        np.testing.assert_array_equal(a1[b][0], a1[b][1])  # same for every example of the batch
    s1 = _attn(std, variables, x1)
    assert not np.allclose(s1[0], a1[0], atol=1e-3)
    assert not np.allclose(s1[0][0], s1[0][1], atol=1e-4)  # standard attention depends on the image
    # The equation: softmax((P W_q)(P W_k)^T / sqrt(d_head)) with P the posemb (CLS row included).
    p = variables["params"]
    P = p["Transformer"]["posembed_input"]["pos_embedding"][0]
    mh = p["Transformer"]["encoderblock_0"]["MultiHeadDotProductAttention_1"]
    q = jnp.einsum("nd,dhk->nhk", P, mh["query"]["kernel"]) + mh["query"]["bias"]
    k = jnp.einsum("nd,dhk->nhk", P, mh["key"]["kernel"]) + mh["key"]["bias"]
    ref = jax.nn.softmax(jnp.einsum("qhk,vhk->hqv", q, k) / np.sqrt(16), axis=-1)
    np.testing.assert_allclose(a1[0][0], ref, rtol=1e-5, atol=1e-6)


def test_positional_attention_in_chosen_blocks_only_and_sincos_cls_vector():
    x1 = jax.random.normal(jax.random.key(1), (1, 16, 16, 3))
    x2 = jax.random.normal(jax.random.key(2), (1, 16, 16, 3))
    m = get_model(dict(variant="mu/4", depth=2, attention="positional", positional_attention_blocks="1"), 4)
    v = m.init(jax.random.key(0), x1)
    a1, a2 = _attn(m, v, x1), _attn(m, v, x2)
    assert not np.allclose(a1[0], a2[0], atol=1e-4)
    np.testing.assert_array_equal(a1[1], a2[1])
    s = get_model(dict(variant="mu/4", depth=1, attention="positional", posemb="sincos2d", add_posemb=False), 4)
    params = s.init(jax.random.key(0), x1)["params"]
    assert params["Transformer"]["cls_pos_embedding"].shape == (1, 1, 32)
    with pytest.raises(ValueError, match=r"positional_attention_blocks \[5\] are not in \[0, 2\)"):
        get_model(dict(variant="mu/4", depth=2, attention="positional", positional_attention_blocks="5"),
                  4).init(jax.random.key(0), x1)


def test_add_posemb_false_keeps_positions_out_of_tokens():
    x = jax.random.normal(jax.random.key(1), (1, 8, 8, 3))
    m = get_model(dict(variant="mu/4", add_posemb=False, classifier="gap"), 4)
    _, out = m.apply(m.init(jax.random.key(0), x), x)
    np.testing.assert_array_equal(out["encoder_input"], out["stem"])


@pytest.mark.parametrize("kind", ["none", "mhsa", "mlp", "both"])
def test_skip_removal_follows_the_block_equations(kind):
    z = jax.random.normal(jax.random.key(3), (2, 5, 32))
    block = vit.Encoder1DBlock(mlp_dim=64, num_heads=2, remove_skip=None if kind == "none" else kind)
    variables = block.init(jax.random.key(0), z)
    out, _ = block.apply(variables, z)
    p = variables["params"]
    ln = lambda name, x: nn.LayerNorm().apply({"params": p[name]}, x)
    mhsa = lambda x: vit.MultiHeadDotProductAttention(2).apply({"params": p["MultiHeadDotProductAttention_1"]}, x)[0]
    mlp = lambda x: vit.MlpBlock(64).apply({"params": p["MlpBlock_3"]}, x)
    z1 = mhsa(ln("LayerNorm_0", z)) + (0 if kind in ("mhsa", "both") else z)   # z' = MHSA(LN(z)) [+ z]
    z2 = mlp(ln("LayerNorm_2", z1)) + (0 if kind in ("mlp", "both") else z1)  # z'' = MLP(LN(z')) [+ z']
    np.testing.assert_allclose(out, z2, rtol=1e-5, atol=1e-5)


def test_skip_ablation_only_changes_the_named_block():
    x = jax.random.normal(jax.random.key(1), (1, 16, 16, 3))
    base = get_model(dict(variant="mu/4", depth=3), 4)
    abl = get_model(dict(variant="mu/4", depth=3, skip_ablation="1:both"), 4)
    v = base.init(jax.random.key(0), x)
    _, o1 = base.apply(v, x)
    _, o2 = abl.apply(v, x)
    np.testing.assert_array_equal(o1["block00"], o2["block00"])
    assert not np.allclose(o1["block01"], o2["block01"])
    assert vit.parse_skip_ablation("1:both, 2:mlp", 3) == {1: "both", 2: "mlp"}
    with pytest.raises(ValueError, match=r"skip_ablation block 7 is not in \[0, 3\)"):
        vit.parse_skip_ablation("7:both", 3)
    with pytest.raises(ValueError, match=r"skip_ablation kind 'attn' is not one of"):
        vit.parse_skip_ablation("1:attn", 3)
