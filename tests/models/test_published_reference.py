"""Published-layout checkpoints against an independent implementation (timm), without PyTorch here.

`tests/fixtures/make_reference.py` wrote a random tiny ViT in the original vit_jax `.npz` layout and a random tiny
BiT ResNet-v2 in the BiT `.npz` layout, key by key, and the logits timm computes from them on four 64-px images
(timm 1.0.31). Measured max |ours − timm| over the 4 x 10 logits (float32, CPU): ViT 1.0e-6, BiT 1.6e-6
(logits up to ≈ 4 in magnitude); the tolerance below is 1e-4, loose for other CPUs and XLA versions, far below the
1.7e-3 by which tanh-GELU and erf-GELU logits differ.
"""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from vit_jax_struct.models import bit, get_model, official

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
TOL = 1e-4


def load_reference(path: str):
    """`(reference dict, its "images" as float32 [n, 64, 64, 3] in the project's value_range (-1, 1))`; image paths
    are relative to tests/fixtures."""
    with open(path) as f:
        ref = json.load(f)
    images = np.stack([np.asarray(Image.open(os.path.join(FIXTURES, p)).convert("RGB")) for p in ref["images"]])
    return ref, images.astype(np.float32) * np.float32(2.0 / 255.0) - np.float32(1.0)


@pytest.fixture(scope="module")
def reference():
    return load_reference(os.path.join(FIXTURES, "reference_logits.json"))


def _shapes(model, size):
    return jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, size, size, 3))))["params"]


def test_vit_jax_npz_gives_timm_logits(reference):
    ref, x = reference
    v = ref["vit"]
    model = get_model(dict(variant=f"mu/{v['patch']}", width=v["width"], depth=v["depth"], num_heads=v["heads"],
                           mlp_dim=v["mlp"], classifier=v["classifier"]), v["classes"])
    params = official.load(os.path.join(FIXTURES, v["file"]), _shapes(model, ref["image_size"]),
                           classifier="token", reinit="")
    logits = np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x)[0])(params, x))
    want = np.asarray(v["logits"])
    assert logits.shape == want.shape == (4, 10)
    np.testing.assert_allclose(logits, want, rtol=0, atol=TOL)
    np.testing.assert_array_equal(logits.argmax(-1), want.argmax(-1))
    # The reference is the tanh-GELU model; erf-GELU logits are a measurable distance away (1.7e-3), so the test
    # would see an activation mismatch.
    assert np.abs(logits - np.asarray(v["logits_erf_gelu"])).max() > 10 * TOL


def test_bit_npz_gives_timm_logits(reference):
    ref, x = reference
    b = ref["bit"]
    model = get_model(dict(name="resnetv2", units=tuple(b["units"]), width=b["width"], num_groups=b["groups"],
                           ws_eps=1e-8), b["classes"])  # timm's BiT weight-standardisation epsilon
    params = bit.load(os.path.join(FIXTURES, b["file"]), _shapes(model, ref["image_size"]), reinit="")
    logits, out = jax.jit(lambda p, x: model.apply({"params": p}, x))(params, x)
    want = np.asarray(b["logits"])
    np.testing.assert_allclose(np.asarray(logits), want, rtol=0, atol=TOL)
    np.testing.assert_array_equal(np.asarray(logits).argmax(-1), want.argmax(-1))
    assert len(set(want.argmax(-1).tolist())) > 1  # the images are told apart, not one class for all
    # Named intermediates per unit, in forward order, with the published names.
    assert [k for k in out if k.startswith("block")] == ["block00", "block01", "block02", "block03", "block04"]
    assert model.unit_names()["block01"] == "block1/unit02" and out["block04"].shape == (4, 2, 2, 256)
    assert out["stem"].shape == (4, 16, 16, 8)


def test_bit_layout_round_trip_and_mis_shaped_file_lists_every_bad_key(tmp_path, reference):
    ref, _ = reference
    raw = official.read_npz(os.path.join(FIXTURES, ref["bit"]["file"]))
    model = get_model(dict(name="resnetv2", units=(2, 1, 1, 1), width=8, num_groups=4), 10)
    shapes = _shapes(model, 64)
    loaded = bit.load(raw, shapes, reinit="")
    back = bit.to_bit_layout(loaded)
    assert sorted(back) == sorted(raw) and all(np.array_equal(back[k], raw[k]) for k in raw)

    bad = dict(raw)
    bad["resnet/block2/unit01/b/standardized_conv2d/kernel"] = np.zeros((3, 3, 16, 8), np.float32)
    bad["resnet/block3/unit01/c/group_norm/gamma"] = np.zeros((7,), np.float32)
    del bad["resnet/block1/unit02/a/group_norm/beta"]
    bad["resnet/block5/unit01/a/standardized_conv2d/kernel"] = np.zeros((1, 1, 4, 4), np.float32)
    path = str(tmp_path / "bad.npz")
    np.savez(path, **bad)
    with pytest.raises(ValueError) as e:
        bit.load(path, shapes, reinit="")
    msg = str(e.value)
    assert "does not match the ResNetV2 (BiT) model" in msg
    assert "1 checkpoint entries not in the model [block5/unit01/a/standardized_conv2d/kernel (1, 1, 4, 4)]" in msg
    assert "1 model parameters not in the checkpoint [block1/unit02/a/group_norm/bias (32,)]" in msg
    assert "2 shape mismatches" in msg
    assert "block2/unit01/b/standardized_conv2d/kernel: checkpoint (3, 3, 16, 8) vs model (3, 3, 16, 16)" in msg
    assert "block3/unit01/c/group_norm/scale: checkpoint (7,) vs model (32,)" in msg
    # The default re-initialises the head: a 21,843-class head loads into a 10-class model.
    init = bit.random_params(model, 64, seed=1)  # stands in for a fresh init (no compilation)
    big_head = {**raw, "resnet/head/conv2d/kernel": np.zeros((1, 1, 256, 21843), np.float32),
                "resnet/head/conv2d/bias": np.zeros((21843,), np.float32)}
    out = bit.load(big_head, init)
    np.testing.assert_array_equal(out["head"]["kernel"], init["head"]["kernel"])  # kept, shape (256, 10)
    np.testing.assert_array_equal(out["block4"]["unit01"]["c"]["standardized_conv2d"]["kernel"],
                                  raw["resnet/block4/unit01/c/standardized_conv2d/kernel"])


def test_resnetv2_sizes_match_bit():
    """R50x1 / R152x2 parameter counts of BiT (timm resnetv2_50x1_bit / resnetv2_152x2_bit, 1000 classes):
    25,549,352 and 236,335,208; counted from shapes only."""
    for depth, k, want in ((50, 1, 25_549_352), (152, 2, 236_335_208)):
        model = get_model(dict(name="resnetv2", depth=depth, width_factor=k), 1000)
        n = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(_shapes(model, 32)))
        assert n == want, (depth, k, n)
    with pytest.raises(ValueError, match=r"model.depth 34 is not one of \[50, 101, 152\]"):
        _shapes(get_model(dict(name="resnetv2", depth=34), 10), 32)
    with pytest.raises(ValueError, match=r"not divisible by num_groups 32"):
        _shapes(get_model(dict(name="resnetv2", width=8), 10), 32)
