"""Input on the device (`data/device_input.py`): the batch stream, and crops/flips of the same distribution as the
host transform (`preprocess.TrainPreprocess`), exact in their pixels for the pad crop."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import tiny_config
from vit_jax_struct.data import device_input, permute, preprocess
from vit_jax_struct.data.sources import DigitsSource


def _coordinate_images(n: int, s: int) -> np.ndarray:
    """uint8 [n, s, s, 3]: channel 0 = row + 1, channel 1 = column + 1, channel 2 = example index (mod 256), so a
    crop's pixels name where they came from (0 = padding)."""
    rows, cols = np.meshgrid(np.arange(1, s + 1), np.arange(1, s + 1), indexing="ij")
    out = np.zeros((n, s, s, 3), np.uint8)
    out[..., 0], out[..., 1] = rows, cols
    out[..., 2] = (np.arange(n) % 256)[:, None, None]
    return out


def _window(image: np.ndarray, out: np.ndarray, pad: int):
    """The `(y0, x0, flipped)` whose window of the zero-padded `image` is `out`, or None."""
    s = image.shape[0]
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)))
    for y0 in range(2 * pad + 1):
        for x0 in range(2 * pad + 1):
            win = padded[y0:y0 + s, x0:x0 + s]
            if np.array_equal(win, out):
                return y0, x0, False
            if np.array_equal(win[:, ::-1], out):
                return y0, x0, True
    return None


def _offset_stats(windows, pad):
    ys = np.array([w[0] for w in windows])
    flips = np.array([w[2] for w in windows])
    return np.bincount(ys, minlength=2 * pad + 1) / len(ys), flips.mean()


def test_pad_crop_and_flip_match_the_host_transform_in_distribution():
    n, s, pad = 512, 8, 2
    images = _coordinate_images(n, s)
    cfg = tiny_config(**{"pp.pad": pad, "pp.flip": True, "data.image_size": s})
    augment = jax.jit(device_input.make_augment(cfg, s))
    dev = np.concatenate([np.asarray(augment(jnp.asarray(images), step)) for step in range(4)])
    assert dev.shape == (4 * n, s, s, 3) and dev.dtype == np.uint8
    dev_windows = [_window(images[i % n], dev[i], pad) for i in range(len(dev))]
    assert all(w is not None for w in dev_windows)  # every output is a window of the padded image, maybe flipped

    host = preprocess.TrainPreprocess(s, "pad", pad=pad, flip=True, value_range=None)
    rng = np.random.default_rng(0)
    host_windows = [_window(images[i % n], host({"image": images[i % n], "label": 0}, rng)["image"], pad)
                    for i in range(4 * n)]
    p_dev, f_dev = _offset_stats(dev_windows, pad)
    p_host, f_host = _offset_stats(host_windows, pad)
    # 2048 draws: a proportion's s.d. is <= 0.011; both uniform over the 5 offsets and fair flips, within 4 s.d.
    np.testing.assert_allclose(p_dev, 1 / (2 * pad + 1), atol=0.045)
    np.testing.assert_allclose(p_host, 1 / (2 * pad + 1), atol=0.045)
    assert abs(f_dev - 0.5) < 0.045 and abs(f_host - 0.5) < 0.045
    # Different steps give different draws; the same step the same pixels.
    assert not np.array_equal(dev[:n], dev[n:2 * n])
    np.testing.assert_array_equal(np.asarray(augment(jnp.asarray(images), 2)), dev[2 * n:3 * n])


def test_pad_crop_off_and_no_flip_is_the_identity():
    images = _coordinate_images(16, 8)
    cfg = tiny_config(**{"pp.pad": 0, "pp.flip": False, "data.image_size": 8})
    out = jax.jit(device_input.make_augment(cfg, 8))(jnp.asarray(images), 7)
    np.testing.assert_array_equal(np.asarray(out), images)


def test_inception_boxes_lie_inside_the_image_with_the_host_area_distribution():
    h, w, b, area_min = 24, 32, 4096, 0.3
    y0, x0, ch, cw = (np.asarray(a) for a in jax.jit(device_input.inception_boxes, static_argnums=(1, 2, 3, 4))(
        jax.random.key(0), b, h, w, area_min))
    assert (y0 >= 0).all() and (x0 >= 0).all() and (y0 + ch <= h).all() and (x0 + cw <= w).all()
    assert (ch > 0).all() and (cw > 0).all()
    area = ch * cw / (h * w)
    rng = np.random.default_rng(0)
    host = np.array([preprocess.inception_crop_box(h, w, rng, (area_min, 1.0)) for _ in range(b)])
    host_area = (host[:, 2] - host[:, 0]) * (host[:, 3] - host[:, 1]) / (h * w)
    # Same sampler: mean area and the share of whole-image fallbacks agree within 4 s.d. of the difference.
    sd = np.sqrt(area.var() / b + host_area.var() / b)
    assert abs(area.mean() - host_area.mean()) < 4 * sd
    assert area.min() >= area_min - 0.1 and area.max() <= 1.0
    x_mid, host_mid = (x0 + cw / 2) / w, (host[:, 0] + host[:, 2]) / 2 / w
    assert abs(x_mid.mean() - 0.5) < 0.02 and abs(host_mid.mean() - 0.5) < 0.02  # centred on average, both


def test_inception_crop_keeps_values_in_range_and_constant_images_constant():
    images = np.full((8, 20, 20, 3), 200, np.uint8)
    images[4:] = 0
    images[4:, :, :, 1] = 255
    cfg = tiny_config(**{"pp.train_crop": "inception", "pp.crop_area_min": 0.2, "pp.flip": True,
                         "data.image_size": 12})
    out = np.asarray(jax.jit(device_input.make_augment(cfg, 12))(jnp.asarray(images), 0))
    assert out.shape == (8, 12, 12, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[:4], 200)  # a resize of a constant region is that constant
    np.testing.assert_array_equal(out[4:, ..., 1], 255)
    np.testing.assert_array_equal(out[4:, ..., 0], 0)


def test_patch_permutation_on_the_device_is_the_host_permutation():
    images = _coordinate_images(4, 8)
    perm = permute.patch_permutation(4, seed=3)
    cfg = tiny_config(**{"pp.pad": 0, "pp.flip": False, "data.image_size": 8})
    out = jax.jit(device_input.make_augment(cfg, 8, perm, 4))(jnp.asarray(images), 0)
    np.testing.assert_array_equal(np.asarray(out), permute.permute_patches(images, perm, 4))


def test_batches_visit_every_example_once_per_epoch_and_hosts_split_the_global_batch():
    n, batch = 40, 8
    images = _coordinate_images(n, 4)
    labels = np.arange(n)
    one = device_input.InMemoryBatches(images, labels, batch, seed=1)
    epoch = np.concatenate([next(one)["label"] for _ in range(n // batch)])
    assert sorted(epoch.tolist()) == list(range(n))
    second = np.concatenate([next(one)["label"] for _ in range(n // batch)])
    assert sorted(second.tolist()) == list(range(n)) and not np.array_equal(epoch, second)
    hosts = [device_input.InMemoryBatches(images, labels, batch, seed=1, process_index=p, process_count=2)
             for p in range(2)]
    for step in range(7):  # every step, across an epoch boundary too (40 is not a multiple of 3·8)
        parts = [h.indices(step) for h in hosts]
        whole = one.indices(step)
        assert sorted(np.concatenate(parts).tolist()) == sorted(whole.tolist())
    b = next(device_input.InMemoryBatches(images, labels, batch, seed=1))
    np.testing.assert_array_equal(b["image"], images[b["label"]])  # images travel with their labels


def test_iterator_state_round_trips_and_refuses_another_stream():
    images, labels = _coordinate_images(30, 4), np.arange(30)
    a = device_input.InMemoryBatches(images, labels, 6, seed=2)
    for _ in range(7):
        next(a)
    state = a.get_state()
    b = device_input.InMemoryBatches(images, labels, 6, seed=2)
    b.set_state(state)
    np.testing.assert_array_equal(next(a)["label"], next(b)["label"])
    assert "host input pipeline" in b.state_problem({"next_index": 12})
    other = device_input.InMemoryBatches(images, labels, 6, seed=3)
    with pytest.raises(ValueError, match=r"seed 2 in the checkpoint, 3 now"):
        other.set_state(state)
    assert json.loads(state)["device_input"]["step"] == 7


def test_digits_take_the_device_path_and_randaugment_the_host_path():
    from vit_jax_struct.train import trainer

    assert trainer.build(tiny_config())["device_input"] is True
    parts = trainer.build(tiny_config(**{"pp.randaug_layers": 1}))
    assert parts["device_input"] is False and "RandAugment" in parts["no_device_input"]
    assert trainer.build(tiny_config(**{"data.device_augment": False}))["device_input"] is False
    # The digits are 8x8: resized once on the host to the configured size with the host transform's resize.
    images, labels = device_input.host_arrays(DigitsSource("train"), 16, "pad")
    assert images.shape == (1437, 16, 16, 3) and images.dtype == np.uint8 and labels.shape == (1437,)
    np.testing.assert_array_equal(images[5], preprocess._resize(DigitsSource("train").images[5], 16))
