"""High-norm patch tokens (Darcet et al. 2024), `analysis/outliers.py`: on constructed inputs with known outliers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax_struct.analysis import outliers, run
from vit_jax_struct.models.vit import VisionTransformer


def test_neighbour_cosine_analytic_and_the_same_under_jit():
    # 2x3 grid, D = 2: the top row points along x, the bottom row along y (orthogonal).
    e = np.array([[[1, 0], [2, 0], [3, 0], [0, 1], [0, 5], [0, 2]]], np.float64)
    c = outliers.neighbour_cosine(e, (2, 3))
    # Top-left corner: right neighbour parallel (1), below orthogonal (0) -> 1/2. Top middle: left, right parallel,
    # below orthogonal -> 2/3. The bottom row mirrors the top.
    np.testing.assert_allclose(c, [[1 / 2, 2 / 3, 1 / 2, 1 / 2, 2 / 3, 1 / 2]], atol=1e-12)
    rng = np.random.default_rng(0)
    r = rng.standard_normal((3, 12, 5))
    np.testing.assert_allclose(jax.jit(lambda x: outliers.neighbour_cosine(x, (3, 4), xp=jnp))(r),
                               outliers.neighbour_cosine(r, (3, 4)), atol=1e-6)
    # Brute force on the random grid.
    g = r.reshape(3, 3, 4, 5)
    u = g / np.linalg.norm(g, axis=-1, keepdims=True)
    want = np.zeros((3, 3, 4))
    for i in range(3):
        for j in range(4):
            nb = [(i + di, j + dj) for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1))
                  if 0 <= i + di < 3 and 0 <= j + dj < 4]
            want[:, i, j] = np.mean([(u[:, i, j] * u[:, a, b]).sum(-1) for a, b in nb], axis=0)
    np.testing.assert_allclose(outliers.neighbour_cosine(r, (3, 4)), want.reshape(3, 12), atol=1e-12)
    with pytest.raises(ValueError, match="do not fill a 3x3 grid"):
        outliers.neighbour_cosine(r, (3, 3))


def test_robust_threshold_is_median_plus_k_scaled_mad():
    # median 3, |x - 3| = 2, 1, 0, 1, 97 -> MAD 1
    assert outliers.robust_threshold([1, 2, 3, 4, 100], k=6) == pytest.approx(3 + 6 * 1.4826)
    with pytest.raises(ValueError, match="k must be > 0, got 0"):
        outliers.robust_threshold([1.0], k=0)


def _planted(m=40, n=16, seed=0):
    """Norms `[m, n]` near 10 with outliers of norm 200 at position 5 in every other image (block01 only)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(9.0, 11.0, (2, m, n))
    base[1, ::2, 5] = 200.0
    return {"block00": base[0], "block01": base[1]}


def test_norm_outliers_recovers_planted_tokens_where_and_how_many():
    norms = _planted()
    cos = np.zeros((40, 16))
    cos[::2, 5] = 0.9  # the outlier patches are redundant with their neighbours
    feats = np.zeros((40, 16, 3), np.float32)
    acc = outliers.NormOutliers((4, 4), threshold=150.0, mad_k=6.0)
    for s in (slice(0, 24), slice(24, 40)):  # two batches
        acc.update({k: v[s] for k, v in norms.items()}, cos[s], feats[s])
    r = acc.result()
    b0, b1 = r["blocks"]["block00"], r["blocks"]["block01"]
    assert b0["fraction_above_fixed"] == 0 and b0["fraction_above_robust"] == 0
    assert b1["fraction_above_fixed"] == b1["fraction_above_robust"] == 20 / (40 * 16)
    assert b1["max"] == 200.0 and 11 < b1["robust_threshold"] < 150
    o = r["outliers"]
    assert r["analysis_block"] == "block01" and o["count"] == 20 and o["images_with_outlier"] == 20
    want = np.zeros(16)
    want[5] = 0.5
    np.testing.assert_array_equal(o["position_fraction"], want)
    assert o["neighbour_cosine_outlier"] == pytest.approx(0.9) and o["neighbour_cosine_normal"] == 0.0
    assert sum(b1["histogram"]) == 40 * 16
    assert o["position_probe"]["outlier"]["reason"].startswith("fewer than 20 tokens")  # 10 per half


def test_position_probe_reads_position_from_normal_tokens_not_from_position_free_outliers():
    # Darcet et al. Table 1a in miniature: normal tokens carry their position (one-hot + noise), outlier tokens a
    # position-free global vector: the probe finds the first exactly and the second at chance level.
    rng = np.random.default_rng(0)
    m, n = 200, 16
    feats = np.eye(n, dtype=np.float32)[None].repeat(m, 0) + 0.05 * rng.standard_normal((m, n, n)).astype(np.float32)
    mask = np.zeros((m, n), bool)
    mask[:, [0, 5, 10, 15]] = rng.random((m, 4)) < 0.5
    feats[mask] = 3.0 + 0.05 * rng.standard_normal((mask.sum(), n)).astype(np.float32)
    normal = outliers.position_probe(feats, ~mask, (4, 4))
    outlier = outliers.position_probe(feats, mask, (4, 4))
    assert normal["top1"] == 1.0 and normal["mean_distance_patches"] == 0.0 and normal["chance_top1"] == 1 / 16
    assert outlier["top1"] < 0.5 and outlier["mean_distance_patches"] > 1.0  # 4 positions: chance 1/4
    assert outlier["n_train"] + outlier["n_test"] == mask.sum()


def test_a_vit_patch_embedding_planted_outlier_is_found_by_the_analysis_summaries():
    # A bright patch makes one patch embedding huge; pre-LN blocks carry it along the residual stream (the MHSA and
    # MLP read LayerNorm-ed tokens, so the other tokens stay small): the planted position is the one outlier.
    model = VisionTransformer(num_classes=3, variant="mu/4", width=16, depth=2, mlp_dim=32, num_heads=2)
    images = np.zeros((8, 16, 16, 3), np.float32)
    images[:4, 4:8, 8:12] = 500.0  # grid position (1, 2) -> token 6, in images 0-3
    params = model.init(jax.random.PRNGKey(0), images[:1])
    fn = run.make_summaries(model, is_vit=True, has_cls=True, grid=(4, 4), patch=4)
    res, _ = fn(params, images)
    acc = outliers.NormOutliers((4, 4))
    acc.update(res["token_norms"], res["neighbour_cosine"], res["patch_tokens"])
    r = acc.result()
    assert sorted(r["blocks"]) == ["block00", "block01"]
    want = np.zeros(16)
    want[6] = 0.5
    np.testing.assert_array_equal(r["outliers"]["position_fraction"], want)
    assert r["outliers"]["count"] == 4 and all(b["fraction_above_robust"] == 4 / 128 for b in r["blocks"].values())


def test_bad_thresholds_are_refused_in_one_line():
    with pytest.raises(ValueError, match="threshold must be > 0, got -1"):
        outliers.NormOutliers((2, 2), threshold=-1)
    with pytest.raises(ValueError, match=r"--outlier_norm and --outlier_mad_k must be > 0, got 150\.0 and 0\.0"):
        run.analyze("/nonexistent", outlier_norm=150.0, outlier_mad_k=0.0)


def test_norm_outlier_figure_keeps_both_thresholds_inside_the_frame_and_draws_a_run_without_outliers(tmp_path):
    from vit_jax_struct.analysis import plots

    # the limits pad past the extreme values (a threshold at the top is drawn inside, not on the frame)
    assert plots._padded_log_limits([10.0, 150.0, np.nan, 0.0]) == pytest.approx((10.0 / 1.6, 150.0 * 1.6))
    norms = _planted()
    acc = outliers.NormOutliers((4, 4), threshold=150.0, mad_k=6.0)
    acc.update(norms, np.zeros((40, 16)), np.zeros((40, 16, 3), np.float32))
    with_outliers = acc.result()
    quiet = outliers.NormOutliers((4, 4), threshold=150.0, mad_k=6.0)
    quiet.update({"block00": norms["block00"]}, np.zeros((40, 16)), np.zeros((40, 16, 3), np.float32))
    none = quiet.result()
    assert with_outliers["outliers"]["count"] == 20 and none["outliers"]["count"] == 0
    for name, r in (("with.png", with_outliers), ("none.png", none)):
        plots.norm_outliers(r, tmp_path / name)
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
