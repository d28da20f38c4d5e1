"""CNN baselines: published sizes, named intermediates, GroupNorm + weight standardization."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax_struct.models import cnn, get_model


def _count(cfg, classes, size):
    m = get_model(cfg, classes)
    shapes = jax.eval_shape(lambda: m.init(jax.random.key(0), jnp.zeros((1, size, size, 3))))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes["params"]))


@pytest.mark.parametrize("cfg,classes,size,millions", [
    (dict(name="resnet", depth=18, stem="cifar"), 10, 32, 11.2),
    (dict(name="vgg"), 10, 32, 20.0),
    (dict(name="resnet", depth=50, stem="imagenet"), 1000, 224, 25.6),
])
def test_parameter_counts(cfg, classes, size, millions):
    assert _count(cfg, classes, size) / 1e6 == pytest.approx(millions, rel=0.05)


def test_resnet18_exact_count_and_named_units():
    assert _count(dict(name="resnet", depth=18), 10, 32) == 11_173_962  # the common CIFAR ResNet-18
    m = get_model(dict(name="resnet", depth=18), 10)
    x = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))
    v = m.init(jax.random.key(0), x)
    assert "batch_stats" in v
    logits, out = m.apply(v, x)
    assert logits.shape == (2, 10) and out["stem"].shape == (2, 16, 16, 64)
    assert [k for k in out if k.startswith("block")] == [f"block{i:02d}" for i in range(8)]
    assert out["block07"].shape == (2, 2, 2, 512) and out["pre_logits"].shape == (2, 512)
    (_, _), new_state = m.apply(v, x, train=True, mutable=["batch_stats"])
    assert not np.allclose(new_state["batch_stats"]["stem_norm"]["mean"], v["batch_stats"]["stem_norm"]["mean"])


def test_group_norm_weight_standardized_resnet_has_no_batch_stats():
    m = get_model(dict(name="resnet", depth=50, stem="imagenet", norm="group", weight_standardization=True), 5)
    v = jax.eval_shape(lambda: m.init(jax.random.key(0), jnp.ones((1, 64, 64, 3))))
    assert set(v) == {"params"}
    assert "GroupNorm" not in str(v) and "norm1" in v["params"]["stage1_unit1"]
    conv = cnn.StdConv(8, (3, 3))
    cv = conv.init(jax.random.key(0), jnp.ones((1, 5, 5, 3)))
    k = cv["params"]["kernel"]
    # The convolution uses the standardized kernel: same output as a plain conv with it.
    ks = (k - k.mean((0, 1, 2))) / jnp.sqrt(k.var((0, 1, 2)) + 1e-10)
    x = jax.random.normal(jax.random.key(1), (1, 5, 5, 3))
    ref = jax.lax.conv_general_dilated(x, ks, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(conv.apply(cv, x), ref + cv["params"]["bias"], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"model.norm 'layer' is not one of"):
        get_model(dict(name="resnet", norm="layer"), 3).init(jax.random.key(0), jnp.ones((1, 8, 8, 3)))
