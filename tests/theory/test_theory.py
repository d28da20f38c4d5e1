"""Synthetic structured data and the one-layer positional-attention ViT (Jelassi, Sander & Li 2022)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax_struct.theory import data, model


def test_grid_partition_is_a_partition_of_contiguous_blocks():
    p = data.make_partition(16, 4, "grid")
    assert p.shape == (4, 4) and sorted(p.ravel().tolist()) == list(range(16))
    np.testing.assert_array_equal(p[0], [0, 1, 4, 5])  # top-left 2x2 block of the 4x4 grid
    np.testing.assert_array_equal(p[3], [10, 11, 14, 15])
    r = data.make_partition(64, 4, "random", seed=3)
    assert sorted(r.ravel().tolist()) == list(range(64))
    with pytest.raises(ValueError, match=r"set_size 5 does not divide num_patches 16"):
        data.make_partition(16, 5)


def test_samples_balanced_with_signal_on_one_set():
    part = data.make_partition(16, 4)
    w = data.unit_vector(8, 0)
    s = data.sample(1000, part, w, np.random.default_rng(0), alpha=1.0, noise_prob=0.5, sigma=0.1)
    assert s["x"].shape == (1000, 16, 8) and (s["y"] == 1).sum() == 500
    coef = s["x"] @ w  # noise is orthogonal to w*: projections are exactly the coefficients
    for i in range(20):
        sig = part[s["signal_set"][i]]
        np.testing.assert_allclose(coef[i, sig], s["y"][i], atol=1e-5)
        others = np.setdiff1d(np.arange(16), sig)
        assert set(np.round(coef[i, others], 4)) <= {-1.0, 0.0, 1.0}
    free = data.sample(50, part, w, np.random.default_rng(0), structured=False)
    assert len({p.tobytes() for p in free["partition"]}) > 40  # a fresh partition per example


def test_ideal_attention_separates_a_large_sample():
    part = data.make_partition(64, 4)
    w = data.unit_vector(32, 0)
    s = data.sample(20000, part, w, np.random.default_rng(1), alpha=1.0, noise_prob=0.3, sigma=0.1)
    params = {"Q": jnp.asarray(model.ideal_logits(part)), "v": jnp.asarray(4.0 * w)}
    assert model.test_error(params, jnp.asarray(s["x"]), jnp.asarray(s["y"])) < 0.01
    uniform = {"Q": jnp.zeros((64, 64)), "v": jnp.asarray(4.0 * w)}
    assert model.test_error(uniform, jnp.asarray(s["x"]), jnp.asarray(s["y"])) > 0.1  # structure matters


def test_gradients_match_finite_differences():
    part = data.make_partition(16, 4)
    w = data.unit_vector(8, 0)
    s = data.sample(64, part, w, np.random.default_rng(2))
    x, y = jnp.asarray(s["x"], jnp.float64), jnp.asarray(s["y"], jnp.float64)
    with jax.enable_x64(True):
        p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64),
                         model.init_params(jax.random.key(0), 16, 8, q_init_std=0.5, v_init_std=0.5))
        g = jax.grad(model.logistic_loss)(p, x, y)
        for name, idx in [("Q", (3, 7)), ("Q", (0, 0)), ("v", (2,)), ("v", (5,))]:
            eps = 1e-6
            up = {k: v.at[idx].add(eps) if k == name else v for k, v in p.items()}
            dn = {k: v.at[idx].add(-eps) if k == name else v for k, v in p.items()}
            fd = (model.logistic_loss(up, x, y) - model.logistic_loss(dn, x, y)) / (2 * eps)
            assert float(g[name][idx]) == pytest.approx(float(fd), rel=1e-5, abs=1e-10)


def test_patch_association_measures():
    part = data.make_partition(16, 4)
    ideal = np.asarray(model.attention(jnp.asarray(model.ideal_logits(part, scale=50.0))))
    m = model.patch_association(ideal, part)
    assert m["purity"] == pytest.approx(1.0) and m["own_set_mass"] == pytest.approx(1.0)
    assert m["ari"] == pytest.approx(1.0)
    u = model.patch_association(np.full((16, 16), 1 / 16), part)
    assert u["purity"] == pytest.approx(0.25) and u["own_set_mass"] == pytest.approx(0.25)
    rows_to_set0 = np.zeros((16, 16))  # every row attends to one whole set, but not its own
    rows_to_set0[:, part[0]] = 0.25
    w = model.patch_association(rows_to_set0, part)
    assert w["purity"] == pytest.approx(1.0) and w["own_set_mass"] == pytest.approx(0.25)


def test_identity_q_init_starts_self_attending():
    p = model.init_params(jax.random.key(0), 16, 8, q_init_std=0.0, v_init_std=0.1, q_init="identity", q_init_diag=1.5)
    a = np.asarray(model.attention(p["Q"]))
    np.testing.assert_allclose(np.diag(a), np.exp(1.5) / (np.exp(1.5) + 15), rtol=1e-5)  # ≈ 0.23, soft
    g = model.init_params(jax.random.key(0), 16, 8, q_init_std=0.5, v_init_std=0.1)  # default: Gaussian
    assert abs(float(jnp.mean(jnp.diag(g["Q"])))) < 0.5
    with pytest.raises(ValueError, match=r"q_init 'zeros' is not one of"):
        model.init_params(jax.random.key(0), 16, 8, 0.1, 0.1, q_init="zeros")


def test_study_sampler_follows_the_data_definition():
    """The jax sampler of the multi-seed study draws the same distribution as `data.sample` (Def. 2.1)."""
    from vit_jax_struct.theory import study

    ids = jnp.asarray(study.set_ids(data.make_partition(16, 4)))
    w = jnp.asarray(data.unit_vector(8, 0))
    x, y = study.sample(jax.random.key(0), 2000, ids, w, alpha=1.0, q=0.5, sigma=0.1)
    coef = np.asarray(x @ w)
    assert x.shape == (2000, 16, 8) and set(np.unique(np.asarray(y))) == {-1.0, 1.0}
    # Exactly one set carries y on all its C = 4 positions; elsewhere ±1 with probability q/2 each, else 0.
    agree = np.stack([(np.round(coef[:, np.asarray(ids) == s], 4) == np.asarray(y)[:, None]).all(1)
                      for s in range(4)], 1)
    assert agree.any(1).all()
    signal_pos = agree[:, np.asarray(ids)]  # [n, D]: the position belongs to a set that carries y
    noise = np.round(coef, 4)[~signal_pos]
    assert set(np.unique(noise)) <= {-1.0, 0.0, 1.0} and abs(np.mean(noise != 0) - 0.5) < 0.03
    resid = np.asarray(x) - coef[..., None] * np.asarray(w)
    np.testing.assert_allclose(resid @ np.asarray(w), 0.0, atol=1e-5)  # noise orthogonal to w*
    assert abs(resid.std() - 0.1 * np.sqrt(7 / 8)) < 0.005
    # Without structure the signal set differs between examples.
    x2, y2 = study.sample(jax.random.key(1), 200, ids, w, structured=False)
    c2 = np.round(np.asarray(x2 @ w), 4) == np.asarray(y2)[:, None]
    assert len({tuple(r) for r in c2}) > 100


def test_own_set_mass_is_one_for_block_attention_and_chance_for_uniform():
    from vit_jax_struct.theory import study

    part = data.make_partition(16, 4)
    ids = jnp.asarray(study.set_ids(part))
    assert float(study.own_set_mass(model.attention(jnp.asarray(model.ideal_logits(part, 50.0))), ids)) == \
        pytest.approx(1.0, abs=1e-6)
    assert float(study.own_set_mass(jnp.full((16, 16), 1 / 16), ids)) == pytest.approx(0.25)


def test_symmetric_logits_have_a_zero_diagonal_and_are_symmetric():
    q = jax.random.normal(jax.random.key(0), (5, 5))
    a = np.asarray(model.logits(q, "symmetric"))
    np.testing.assert_array_equal(a, a.T)
    np.testing.assert_array_equal(np.diag(a), 0.0)
    np.testing.assert_array_equal(np.triu(a, 1), np.triu(np.asarray(q), 1))
    with pytest.raises(ValueError, match="parametrization 'x'"):
        model.logits(q, "x")


def test_samples_to_target_takes_the_first_n_from_which_the_error_stays_below():
    from vit_jax_struct.theory import study

    errs = [[0.5, 0.5], [0.01, 0.5], [0.03, 0.4], [0.01, 0.3]]  # [n, seeds]
    assert study.samples_to_target(errs, [8, 16, 32, 64], 0.02) == [6.0, 7.0]  # 64; never → 2 · 64


def test_rows_with_patch_association_counts_rows_whose_top_c_entries_are_their_set():
    import numpy as np

    from vit_jax_struct.theory import study

    ids = np.array([0, 0, 1, 1])
    perfect = np.where(ids[:, None] == ids[None, :], 0.4, 0.1)
    assert study.rows_with_patch_association(perfect, ids) == 4
    swapped = perfect.copy()
    swapped[0] = [0.1, 0.1, 0.4, 0.4]  # row 0 attends to the other set
    swapped[3] = [0.3, 0.1, 0.2, 0.4]  # row 3's top two are {3, 0}, not its set {2, 3}
    assert study.rows_with_patch_association(swapped, ids) == 2
    assert study.rows_with_patch_association(np.full((4, 4), 0.25), ids) == 2  # ties by index: rows 0, 1 pass


def test_set_block_mass_counts_attention_to_one_set_whichever_it_is_against_a_permutation_null():
    import numpy as np

    from vit_jax_struct.theory import study

    ids = np.repeat(np.arange(4), 4)  # 4 sets of 4 positions
    # Every query of set s attends uniformly to the positions of set (s + 1) mod 4: no own-set mass at all, yet
    # perfectly aligned with the partition.
    shifted = np.where(ids[None, :] == (ids[:, None] + 1) % 4, 0.25, 0.0)
    assert float(study.own_set_mass(shifted, ids)) == 0.0
    assert study.set_block_mass(shifted, ids) == 1.0
    uniform = np.full((16, 16), 1 / 16)
    assert study.set_block_mass(uniform, ids) == 0.25  # C/D
    assert study.set_block_null(uniform, ids, draws=50) == 0.25  # any partition reads uniform attention alike
    null = study.set_block_null(shifted, ids, draws=200)
    assert 0.25 < null < 1.0  # random partitions catch part of the block structure, never all of it
    assert null == study.set_block_null(shifted, ids, draws=200)  # deterministic (fixed generator seed)
    assert study.set_block_excess([shifted, uniform], ids) == [1.0 - study.set_block_null(shifted, ids), 0.0]
