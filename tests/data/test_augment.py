"""RandAugment (per example, numpy/Pillow), mixup / CutMix (in the step), soft-target losses, uint8 batches."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import common
from tests.conftest import tiny_config
from vit_jax_struct.data import augment, mixup, pipeline, preprocess, sources
from vit_jax_struct.models import get_model
from vit_jax_struct.train import optim, trainer


def _photo(seed=0, h=40, w=48):
    """A smooth RGB gradient plus noise (so every op changes something)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (h + w)], -1)
    return np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)


def test_randaugment_ops_do_what_they_say():
    img = _photo()
    rng = np.random.default_rng(0)
    for name in augment.OPS:
        out = augment.apply_op(name, img, 15, rng)
        assert out.shape == img.shape and out.dtype == np.uint8, name
    np.testing.assert_array_equal(augment.invert(img), 255 - img)
    assert (augment.posterize(img, 6) % 4 == 0).all()
    np.testing.assert_array_equal(augment.solarize(img, 384), img)  # TF's threshold at magnitude 15: a no-op
    np.testing.assert_array_equal(augment.brightness(img, 0.0), 0)
    np.testing.assert_array_equal(augment.color(img, 1.0), img)
    ac = augment.autocontrast(img)
    assert (ac.min(axis=(0, 1)) == 0).all() and (ac.max(axis=(0, 1)) == 255).all()
    shifted = augment.translate_x(img, 5)
    np.testing.assert_array_equal(shifted[:, 5:], img[:, :-5])
    assert (shifted[:, :5] == 128).all()
    eq = augment.equalize(img)
    assert abs(np.histogram(eq[..., 0], 4, (0, 256))[0] - eq[..., 0].size / 4).max() < 0.1 * eq[..., 0].size


def test_randaugment_is_deterministic_from_the_seed_and_validates():
    img = _photo(1)
    runs = [augment.randaugment(img, 2, 15, np.random.default_rng(s)) for s in (3, 3, 4)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    with pytest.raises(ValueError, match=r"pp.randaug_layers 2.5 is not an integer in \[0, 10\]"):
        augment.randaugment(img, 2.5, 15, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"pp.randaug_magnitude 31 is not a number in \[0, 30\]"):
        preprocess.TrainPreprocess(16, randaug_layers=2, randaug_magnitude=31)
    # Through grain: the same seed gives the same augmented uint8 batches; resuming from a state repeats them.
    src = sources.DigitsSource("test")
    tp = preprocess.TrainPreprocess(16, "inception", value_range=None, randaug_layers=2, randaug_magnitude=15)
    a, b = pipeline.train_iterator(src, tp, 8, seed=5), pipeline.train_iterator(src, tp, 8, seed=5)
    first = next(a)
    assert first["image"].dtype == np.uint8 and first["image"].shape == (8, 16, 16, 3)
    np.testing.assert_array_equal(first["image"], next(b)["image"])
    state = a.get_state()
    expected = next(a)["image"]
    c = pipeline.train_iterator(src, tp, 8, seed=5)
    c.set_state(state)
    np.testing.assert_array_equal(next(c)["image"], expected)


@pytest.mark.parametrize("alpha,cutmix_alpha", [(0.5, 0.0), (0.0, 1.0), (0.5, 1.0)])
def test_mixup_cutmix_targets_sum_to_one_and_are_deterministic(alpha, cutmix_alpha):
    key = jax.random.key(0)
    x = jax.random.uniform(jax.random.key(1), (8, 16, 16, 3))
    y = jnp.arange(8) % 5
    fn = jax.jit(lambda k: mixup.mix_batch(k, x, y, 5, alpha, cutmix_alpha))
    seen_lams = set()
    for s in range(6):
        xm, t = fn(jax.random.fold_in(key, s))
        assert xm.shape == x.shape and t.shape == (8, 5)
        np.testing.assert_allclose(t.sum(-1), 1.0, atol=1e-6)
        lam = float(t[0, int(y[0])])  # weight of example 0's own class (its partner, example 7, has class 2)
        np.testing.assert_allclose(t[0, int(y[7])], 1 - lam, atol=1e-6)
        if cutmix_alpha and not alpha:  # the box: pixels equal to the partner's make up a fraction 1 - λ
            np.testing.assert_allclose(float((xm[0] == x[7]).all(-1).mean()), 1 - lam, atol=1e-6)
        if alpha and not cutmix_alpha:
            np.testing.assert_allclose(xm[0], lam * x[0] + (1 - lam) * x[7], atol=1e-5)
        seen_lams.add(round(lam, 4))
        again = fn(jax.random.fold_in(key, s))
        np.testing.assert_array_equal(np.asarray(again[0]), np.asarray(xm))
        np.testing.assert_array_equal(np.asarray(again[1]), np.asarray(t))
    assert len(seen_lams) >= 5  # a new λ per step
    _, t = mixup.mix_batch(key, x, y, 5, alpha, cutmix_alpha, prob=0.0)
    np.testing.assert_array_equal(np.asarray(t), np.asarray(jax.nn.one_hot(y, 5)))


def test_mixup_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"mixup.alpha -0.1 must be a number ≥ 0"):
        mixup.check_config({"alpha": -0.1})
    with pytest.raises(ValueError, match=r"mixup.prob 1.5 is not a probability in \[0, 1\]"):
        trainer.build(tiny_config(**{"mixup.prob": 1.5}))
    with pytest.raises(ValueError, match=r"aug='heavy' is not one of"):
        common.set_augmentation(common.base(), "heavy")


@pytest.mark.parametrize("kind", ["softmax_xent", "sigmoid_xent"])
def test_soft_targets_loss_matches_hand_computed(kind):
    logits = jnp.asarray([[2.0, -1.0, 0.5], [0.0, 1.0, -2.0]])
    soft = jnp.asarray([[0.7, 0.3, 0.0], [0.0, 0.25, 0.75]])
    got = optim.classification_loss(logits, soft, 3, kind)
    if kind == "softmax_xent":
        want = -(soft * jax.nn.log_softmax(logits)).sum(-1)
    else:
        want = optax.sigmoid_binary_cross_entropy(logits, soft).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    hard = optim.classification_loss(logits, jnp.asarray([0, 2]), 3, kind, label_smoothing=0.1)
    onehot = optim.classification_loss(logits, jax.nn.one_hot(jnp.asarray([0, 2]), 3), 3, kind, label_smoothing=0.1)
    np.testing.assert_allclose(hard, onehot, rtol=1e-6)
    with pytest.raises(ValueError, match=r"do not have num_classes=4 columns"):
        optim.classification_loss(logits, soft, 4, kind)


def test_uint8_batches_give_the_float_pipelines_logits():
    c = tiny_config()
    src = sources.DigitsSource("test")
    model = get_model(c.model, 10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 8, 8, 3)))
    vr = (-1.0, 1.0)
    ep_float = preprocess.EvalPreprocess(8, 1.0, vr)
    ep_uint8 = preprocess.from_config(c.pp, 8)[1]
    bf = next(pipeline.eval_batches(src, ep_float, 16))
    bu = next(pipeline.eval_batches(src, ep_uint8, 16))
    assert bu["image"].dtype == np.uint8 and bf["image"].dtype == np.float32
    assert bu["image"].nbytes * 4 == bf["image"].nbytes  # 4x less to send
    scaled = jax.jit(lambda x: preprocess.to_value_range(x, vr, jnp))(bu["image"])
    np.testing.assert_allclose(np.asarray(scaled), bf["image"], atol=1e-6)
    lf, _ = model.apply(params, bf["image"])
    lu, _ = jax.jit(lambda p, x: model.apply(p, preprocess.to_value_range(x, vr, jnp)))(params, bu["image"])
    np.testing.assert_allclose(np.asarray(lu), np.asarray(lf), rtol=1e-5, atol=1e-5)


def test_training_with_randaugment_and_mixup_resumes_bitwise(tmp_path):
    over = {"pp.randaug_layers": 2, "pp.randaug_magnitude": 15, "mixup.alpha": 0.5, "mixup.cutmix_alpha": 1.0,
            "pp.train_crop": "inception", "total_steps": 4, "checkpoint_every_steps": 2, "eval_every_steps": 0}
    full, _ = trainer.train_and_evaluate(tiny_config(**over), str(tmp_path / "full"))
    trainer.train_and_evaluate(tiny_config(**{**over, "total_steps": 2}), str(tmp_path / "resumed"))
    resumed, _ = trainer.train_and_evaluate(tiny_config(**over), str(tmp_path / "resumed"))
    for a, b in zip(jax.tree.leaves(full["params"]), jax.tree.leaves(resumed["params"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
