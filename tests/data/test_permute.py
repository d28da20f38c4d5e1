"""Patch permutation and nested data-size subsets."""

import numpy as np
import pytest

from vit_jax_struct.data import permute, sources


def test_permutation_is_a_bijection_and_inverse_undoes_it():
    perm = permute.patch_permutation(64, seed=3)
    assert sorted(perm.tolist()) == list(range(64))
    inv = permute.inverse_permutation(perm)
    np.testing.assert_array_equal(perm[inv], np.arange(64))
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    y = permute.permute_patches(x, perm, 4)
    assert not np.array_equal(x, y)
    np.testing.assert_array_equal(permute.permute_patches(y, inv, 4), x)
    # Output patch i is input patch perm[i] (row-major on the 8x8 grid).
    i = 10
    r, c = divmod(i, 8)
    rs, cs = divmod(int(perm[i]), 8)
    np.testing.assert_array_equal(y[:, 4 * r:4 * r + 4, 4 * c:4 * c + 4], x[:, 4 * rs:4 * rs + 4, 4 * cs:4 * cs + 4])
    with pytest.raises(ValueError, match=r"not divisible by the permutation patch size 5"):
        permute.permute_patches(x, perm, 5)


def test_permute_wrapper_and_saved_record(tmp_path):
    perm = permute.patch_permutation(4, seed=0)
    ident = lambda r, *rng: {"image": r["image"], "label": r["label"]}
    img = np.arange(16 * 3, dtype=np.float32).reshape(4, 4, 3)
    out = permute.PermutePatches(ident, perm, 2)({"image": img, "label": 1}, np.random.default_rng(0))
    np.testing.assert_array_equal(out["image"], permute.permute_patches(img, perm, 2))
    permute.save_permutation(str(tmp_path), perm, 2, 4, seed=0)
    rec = permute.load_permutation(str(tmp_path))
    np.testing.assert_array_equal(rec["perm"], perm)
    np.testing.assert_array_equal(rec["inverse"], permute.inverse_permutation(perm))
    assert rec["grid"] == [2, 2] and permute.load_permutation(str(tmp_path / "none")) is None


def test_nested_subsets_are_nested():
    src = sources.DigitsSource("train")
    sets = [set(sources.nested_subset(src, f, seed=1).indices.tolist()) for f in (0.03, 0.1, 0.3)]
    assert [len(s) for s in sets] == [43, 144, 431]
    assert sets[0] < sets[1] < sets[2]
    assert sources.nested_subset(src, 1.0) is src and sources.nested_subset(src) is src
    assert len(sources.nested_subset(src, examples=100, seed=1)) == 100
    assert set(sources.nested_subset(src, examples=43, seed=1).indices.tolist()) == sets[0]
    with pytest.raises(ValueError, match=r"data.train_fraction 1.5 is not in \(0, 1\]"):
        sources.nested_subset(src, 1.5)
