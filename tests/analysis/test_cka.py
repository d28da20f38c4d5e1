"""CKA against analytic properties and an independent full-batch numpy reference."""

import numpy as np
import pytest
from scipy.stats import ortho_group

from vit_jax_struct.analysis import cka


def _hsic1_reference(x, y):
    """Song et al. 2012 Eq. 5 written out with explicit matrices (independent of the vectorised code)."""
    n = len(x)
    k = x.reshape(n, -1) @ x.reshape(n, -1).T
    l_ = y.reshape(n, -1) @ y.reshape(n, -1).T
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(l_, 0.0)
    one = np.ones(n)
    return (np.trace(k @ l_) + (one @ k @ one) * (one @ l_ @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ k @ l_ @ one)) / (n * (n - 3))


rng = np.random.default_rng(0)


def test_identity_orthogonal_and_scale_invariance():
    x = rng.normal(size=(200, 30))
    assert cka.linear_cka(x, x) == pytest.approx(1.0, abs=1e-12)
    q = ortho_group.rvs(30, random_state=1)
    assert cka.linear_cka(x, x @ q) == pytest.approx(1.0, abs=1e-10)
    y = np.tanh(x[:, :10]) + 0.1 * rng.normal(size=(200, 10))
    base = cka.linear_cka(x, y)
    assert 0.1 < base < 0.99
    assert cka.linear_cka(3.7 * x, y) == pytest.approx(base, rel=1e-10)
    assert cka.linear_cka(x, 0.01 * y) == pytest.approx(base, rel=1e-10)
    assert cka.linear_cka(x @ q, y @ ortho_group.rvs(10, random_state=2)) == pytest.approx(base, rel=1e-9)


def test_independent_gaussians_near_zero_with_unbiased_estimator():
    x, y = rng.normal(size=(1024, 64)), rng.normal(size=(1024, 64))
    assert abs(cka.linear_cka(x, y)) < 0.05


def test_constant_features_give_zero_not_nan():
    x = np.ones((64, 5))
    y = rng.normal(size=(64, 5))
    assert cka.linear_cka(x, y) == 0.0
    acc = cka.MinibatchCKA()
    acc.update([x, y, np.zeros((64, 3))])
    m = acc.result()
    assert np.isfinite(m).all() and m[1, 1] == pytest.approx(1.0)


def test_minibatch_accumulation_matches_numpy_reference():
    n, bs = 1024, 256
    layers_a = [rng.normal(size=(n, 4, 8)), rng.normal(size=(n, 16))]
    layers_a.append(layers_a[0].reshape(n, -1)[:, :16] + 0.5 * layers_a[1])
    layers_b = [np.sin(layers_a[1]), rng.normal(size=(n, 3, 3))]
    acc = cka.MinibatchCKA()
    for i in range(0, n, bs):
        acc.update([f[i:i + bs] for f in layers_a], [f[i:i + bs] for f in layers_b])
    got = acc.result()
    ref = np.zeros((3, 2))
    for a, fa in enumerate(layers_a):
        for b, fb in enumerate(layers_b):
            xy = sum(_hsic1_reference(fa[i:i + bs], fb[i:i + bs]) for i in range(0, n, bs))
            xx = sum(_hsic1_reference(fa[i:i + bs], fa[i:i + bs]) for i in range(0, n, bs))
            yy = sum(_hsic1_reference(fb[i:i + bs], fb[i:i + bs]) for i in range(0, n, bs))
            ref[a, b] = xy / np.sqrt(xx * yy)
    np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"n ≥ 4"):
        cka.hsic1_cross(np.zeros((1, 3, 3)), np.zeros((1, 3, 3)))
