"""Attention distance, posemb locality, localization, ridge probes and skip norm ratios on known cases."""

import itertools

import jax
import numpy as np
import pytest

from vit_jax_struct.analysis import attention, localization, norms, posemb, probes
from vit_jax_struct.data import permute
from vit_jax_struct.models import get_model


def test_identity_attention_has_zero_distance():
    eye = np.broadcast_to(np.eye(65), (2, 3, 65, 65))
    np.testing.assert_allclose(attention.mean_attention_distance(eye, (8, 8), 4, has_cls=True), 0.0)


def test_uniform_attention_gives_mean_pairwise_grid_distance():
    cells = list(itertools.product(range(8), range(8)))
    ref = np.mean([np.hypot(a[0] - b[0], a[1] - b[1]) for a in cells for b in cells])  # independent double loop
    uniform = np.full((1, 2, 64, 64), 1 / 64)
    np.testing.assert_allclose(attention.mean_attention_distance(uniform, (8, 8), 16, False), ref * 16, rtol=1e-12)
    # With CLS: its column holds half of every row's weight; renormalising over patches gives the same distance.
    w = np.full((1, 1, 65, 65), 0.5 / 64)
    w[..., 0] = 0.5
    np.testing.assert_allclose(attention.mean_attention_distance(w, (8, 8), 16, True), ref * 16, rtol=1e-12)
    acc = attention.AttentionDistance((8, 8), 16, False)
    acc.update({"attention/block00": uniform, "block00": None})
    np.testing.assert_allclose(acc.result()["block00"], ref * 16)
    with pytest.raises(ValueError, match=r"does not fit a \(8, 8\) grid"):
        attention.mean_attention_distance(uniform, (8, 8), 16, True)


def _local_posemb(grid=8, d=64, seed=0):
    """Posemb whose similarity decays with distance: smooth random features of the position."""
    rng = np.random.default_rng(seed)
    freqs = rng.normal(scale=0.4, size=(2, d))
    phase = rng.uniform(0, 2 * np.pi, d)
    yy, xx = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
    pos = np.stack([yy.ravel(), xx.ravel()], -1)
    return np.cos(pos @ freqs + phase)


def test_locality_score_local_random_and_permuted():
    p = _local_posemb()
    local = posemb.locality_score(p, (8, 8))
    assert local < -0.5
    assert abs(posemb.locality_score(np.random.default_rng(1).normal(size=(64, 64)), (8, 8))) < 0.1
    perm = permute.patch_permutation(64, seed=2)
    p_perm = p[perm]  # token position i holds original patch perm[i]
    assert posemb.locality_score(p_perm, (8, 8)) > local + 0.3  # looks unstructured in token order
    assert posemb.locality_score(posemb.reindex(p_perm, permute.inverse_permutation(perm)), (8, 8)) == \
        pytest.approx(local, abs=1e-12)
    s = posemb.cosine_similarity(p)
    np.testing.assert_allclose(np.diag(s), 1.0)
    assert s.min() >= -1 - 1e-12 and s.max() <= 1 + 1e-12


def test_ridge_probe_solves_separable_data_and_primal_equals_dual():
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=4, size=(3, 5))
    y = rng.integers(0, 3, 300)
    x = centers[y] + rng.normal(size=(300, 5))
    res = probes.probe(x[:200], y[:200], x[200:], y[200:], 3, shots=(1, 10, 0))
    assert res["full"] > 0.95 and res["10"] > 0.9 and 0.0 <= res["1"] <= 1.0
    idx = probes.k_shot_indices(y, 4, seed=0)
    assert sorted(np.bincount(y[idx]).tolist()) == [4, 4, 4]
    wide = rng.normal(size=(10, 40))  # more features than examples: dual branch
    yw = rng.integers(0, 2, 10)
    w = probes.ridge_fit(wide, yw, 2, lam=0.5)
    a = np.concatenate([wide, np.ones((10, 1))], 1)
    t = -np.ones((10, 2))
    t[np.arange(10), yw] = 1
    np.testing.assert_allclose(w, np.linalg.solve(a.T @ a + 0.5 * np.eye(41), a.T @ t), atol=1e-8)


def test_localization_finds_tokens_that_copy_their_patch():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(64, 8, 8, 3))
    patches = localization.image_patches(images, 4)  # [64, 4, 48]
    assert patches.shape == (64, 4, 48)
    np.testing.assert_array_equal(patches[:, 1], images[:, 0:4, 4:8].reshape(64, 48))
    proj = rng.normal(size=(48, 16))
    tokens = patches @ proj  # token t is a linear function of its own patch only
    loc = localization.Localization(4)
    loc.update(tokens[:32], images[:32])
    loc.update(tokens[32:], images[32:])
    m, frac = loc.result()
    assert m.shape == (4, 4) and frac == 1.0
    assert np.all(np.diag(m) > m.max(axis=1, where=~np.eye(4, dtype=bool), initial=-1) + 0.3)


def test_skip_norm_ratios_from_sown_intermediates():
    m = get_model(dict(variant="mu/4", depth=2), 3)
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))
    v = m.init(jax.random.key(1), x)
    (_, out), inter = m.apply(v, x, mutable=["intermediates"])
    r = norms.norm_ratios(inter["intermediates"], has_cls=True)
    assert set(r) == {f"block0{i}/{b}/{t}" for i in range(2) for b in ("mhsa", "mlp") for t in ("cls", "patches")}
    blk = inter["intermediates"]["Transformer"]["encoderblock_1"]
    z, f = np.asarray(blk["mlp_residual"][0]), np.asarray(blk["mlp_branch"][0])
    np.testing.assert_allclose(z + f, out["block01"], rtol=1e-6, atol=1e-6)  # z'' = z' + MLP(LN(z'))
    ref = (np.linalg.norm(z[:, 0], axis=-1) / np.linalg.norm(f[:, 0], axis=-1)).mean()
    assert r["block01/mlp/cls"] == pytest.approx(ref, rel=1e-6)


def test_in_jit_measures_equal_the_numpy_ones():
    """`analysis/run.py` computes attention distance, skip-norm ratios and CKA Gram matrices inside jit (float32);
    they equal the float64 numpy definitions to float32 rounding."""
    import jax
    import jax.numpy as jnp

    from vit_jax_struct.analysis import attention, cka, norms, run

    rng = np.random.default_rng(0)
    w = rng.uniform(size=(3, 2, 5, 5))
    w /= w.sum(-1, keepdims=True)
    want = attention.mean_attention_distance(w, (2, 2), 4.0, True)
    got = jax.jit(lambda a: attention.mean_attention_distance(a, (2, 2), 4.0, True, xp=jnp))(w.astype(np.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    inter = {"Transformer": {f"encoderblock_{i}": {f"{b}_{k}": (rng.standard_normal((3, 5, 8)),)
                                                    for b in ("mhsa", "mlp") for k in ("residual", "branch")}
                             for i in range(2)}}
    want = norms.norm_ratios(inter, True)
    got = jax.jit(lambda t: norms.norm_ratios(t, True, xp=jnp))(jax.tree.map(lambda x: x.astype(np.float32), inter))
    assert set(got) == set(want) and all(abs(float(got[k]) - want[k]) < 1e-5 * abs(want[k]) for k in want)
    x = rng.standard_normal((6, 5, 8))
    np.testing.assert_allclose(np.asarray(jax.jit(run._gram)(x.astype(np.float32))), cka.gram(x), rtol=1e-5,
                               atol=1e-4)


def test_report_names_the_sweep_folder_of_a_model_compared_across_folders(tmp_path):
    from vit_jax_struct.analysis import plots

    (tmp_path / "cka_vs_full,seed=2.png").write_bytes(b"")
    base = {"step": 1, "examples": 8, "model": {}, "cka_across": {"matrix": [[0.5]]}}
    text = lambda other: (plots.report({**base, "workdir": "/s/grid/gap,seed=1", "cka_across": {  # noqa: E731
        **base["cka_across"], "other": other}}, str(tmp_path)), (tmp_path / "report.md").read_text())[1]
    assert "## CKA across models (refs/full,seed=2)" in text("/s/refs/full,seed=2")  # another folder: named
    assert "## CKA across models (full,seed=2)" in text("/s/grid/full,seed=2")       # the same folder
