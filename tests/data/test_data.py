"""Data sources, preprocessing and the grain pipelines."""

import os

import numpy as np
import pytest
from PIL import Image

from tests.conftest import write_image_folder
from vit_jax_struct.data import pipeline, preprocess, sources


def test_digits_split_is_fixed_stratified_and_disjoint():
    tr, te = sources.DigitsSource("train"), sources.DigitsSource("test")
    assert (len(tr), len(te)) == (1437, 360)
    assert tr[0]["image"].shape == (8, 8, 3) and tr[0]["image"].dtype == np.uint8
    assert np.bincount(te.labels).min() >= 35  # stratified: 36 ± 1 per class
    train_set = {tr.images[i].tobytes() for i in range(len(tr))}
    assert sum(te.images[i].tobytes() in train_set for i in range(len(te))) < 5  # only true duplicates
    np.testing.assert_array_equal(sources.DigitsSource("test").labels, te.labels)


def test_image_folder_labels_and_colour_modes(tmp_path):
    root = write_image_folder(tmp_path, splits=("train",), classes=("b", "a"), per_class=2)
    Image.fromarray(np.full((5, 7), 200, np.uint8), "L").save(os.path.join(root, "train", "a", "grey.png"))
    Image.fromarray(np.full((5, 7, 4), 9, np.uint8), "RGBA").save(os.path.join(root, "train", "b", "rgba.png"))
    src = sources.ImageFolderSource(root, "train")
    assert src.class_names == ["a", "b"] and src.num_classes == 2
    assert list(src.labels) == [0, 0, 0, 1, 1, 1]
    grey = src[src.paths.index(os.path.join(root, "train", "a", "grey.png"))]
    assert grey["image"].shape == (5, 7, 3) and (grey["image"] == 200).all() and grey["label"] == 0
    rgba = src[src.paths.index(os.path.join(root, "train", "b", "rgba.png"))]
    assert rgba["image"].shape == (5, 7, 3) and (rgba["image"] == 9).all()


def test_image_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.root '.*nowhere' does not exist"):
        sources.ImageFolderSource(str(tmp_path / "nowhere"), "train")
    root = write_image_folder(tmp_path / "f", splits=("train", "test"), classes=("a", "b"), per_class=1)
    os.makedirs(os.path.join(root, "train", "empty"))
    with pytest.raises(ValueError, match=r"class folder '.*train/empty' has no images"):
        sources.ImageFolderSource(root, "train")
    os.rmdir(os.path.join(root, "train", "empty"))
    with pytest.raises(ValueError, match=r"missing \['c'\], extra \[\]"):
        sources.ImageFolderSource(root, "test", class_names=["a", "b", "c"])
    bad = os.path.join(root, "train", "a", "corrupt.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8 this is not a jpeg")
    src = sources.ImageFolderSource(root, "train")
    with pytest.raises(ValueError, match=r"cannot decode image file '.*corrupt.jpg'"):
        src[src.paths.index(bad)]


def test_eval_preprocess_value_range_and_center_crop():
    img = np.zeros((4, 6, 3), np.uint8)
    img[:, 1:5] = 255  # the central 4x4 square is white, the side columns black
    out = preprocess.EvalPreprocess(4, crop_fraction=1.0)({"image": img, "label": 3})
    np.testing.assert_array_equal(out["image"], 1.0)
    assert out["label"] == 3
    same = preprocess.EvalPreprocess(6, 1.0)({"image": np.full((6, 6, 3), 0, np.uint8), "label": 0})
    np.testing.assert_array_equal(same["image"], -1.0)


def test_per_channel_normalisation_is_torchvisions_on_the_host_and_in_jit():
    """`pp.normalize=imagenet`: `(uint8 / 255 - mean) / std` per channel (torchvision's Normalize after ToTensor),
    computed in float64 here as the independent reference; numpy and jitted jnp agree with it to float32 rounding."""
    import jax
    import jax.numpy as jnp

    scaling = preprocess.input_scaling({"normalize": "imagenet", "value_range": (-1.0, 1.0)})
    assert scaling == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    x = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, -1)
    x[..., 1] = 255 - x[..., 1]
    want = (x.astype(np.float64) / 255 - np.array(scaling[0])) / np.array(scaling[1])
    for got in (preprocess.to_value_range(x, scaling),
                jax.jit(lambda b: preprocess.to_value_range(b, scaling, jnp))(x)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=2e-6)
    assert np.asarray(want[0, 0, 0]) == pytest.approx([-0.485 / 0.229, (1 - 0.456) / 0.224, -0.406 / 0.225])
    assert preprocess.input_scaling({"value_range": (0, 1)}) == (0.0, 1.0)  # no normalize: the value range
    with pytest.raises(ValueError, match=r"^pp.normalize 'imagenet21k' is not one of '', 'imagenet', 'clip'$"):
        preprocess.input_scaling({"normalize": "imagenet21k"})


def test_train_preprocess_crops():
    rng = np.random.default_rng(0)
    for _ in range(200):
        x0, y0, x1, y1 = preprocess.inception_crop_box(40, 60, rng, area_range=(0.3, 1.0))
        assert 0 <= x0 < x1 <= 60 and 0 <= y0 < y1 <= 40
        assert (x1 - x0) * (y1 - y0) >= 0.3 * 2400 * 0.9
    img = np.arange(16, dtype=np.uint8).reshape(4, 4, 1).repeat(3, -1) * 10
    tp = preprocess.TrainPreprocess(4, crop="pad", pad=1, flip=False, value_range=(0.0, 255.0))
    out = tp({"image": img, "label": 1}, np.random.default_rng(3))["image"][..., 0]
    # A padded random crop is a shifted copy: every non-padding value appears in img at the same offset.
    assert set(out.flatten()) <= set(img[..., 0].flatten()) | {0}
    with pytest.raises(ValueError, match=r"pp.train_crop 'random' is not one of"):
        preprocess.TrainPreprocess(4, crop="random")


def test_train_iterator_is_deterministic_and_resumes_exactly():
    src = sources.DigitsSource("train")
    tp = preprocess.TrainPreprocess(8, "pad", pad=1, flip=True)
    a = pipeline.train_iterator(src, tp, 16, seed=7)
    batches = [next(a) for _ in range(5)]
    b = pipeline.train_iterator(src, tp, 16, seed=7)
    for _ in range(2):
        next(b)
    state = b.get_state()
    c = pipeline.train_iterator(src, tp, 16, seed=7)
    c.set_state(state)
    for ref in batches[2:]:
        got = next(c)
        np.testing.assert_array_equal(got["image"], ref["image"])
        np.testing.assert_array_equal(got["label"], ref["label"])
    other = next(pipeline.train_iterator(src, tp, 16, seed=8))
    assert not np.array_equal(other["label"], batches[0]["label"])


def test_hosts_read_disjoint_shards_of_one_stream():
    src = sources.Subset(sources.DigitsSource("train"), np.arange(40))
    ident = lambda r, rng: {"image": r["image"].astype(np.float32), "label": np.int32(r["label"])}
    ids = lambda it, n: np.concatenate([next(it)["image"][:, 0, 0, 0] for _ in range(n)]).tolist()
    one = ids(pipeline.train_iterator(src, ident, 4, seed=0), 5)
    h0 = ids(pipeline.train_iterator(src, ident, 2, 0, process_index=0, process_count=2), 5)
    h1 = ids(pipeline.train_iterator(src, ident, 2, 0, process_index=1, process_count=2), 5)
    assert h0 == one[0::2] and h1 == one[1::2]


def test_eval_batches_cover_every_example_once_across_hosts():
    src = sources.DigitsSource("test")  # 360 examples
    ep = preprocess.EvalPreprocess(8, 1.0)
    seen = []
    counts = []
    for host in range(3):
        batches = list(pipeline.eval_batches(src, ep, 50, process_index=host, process_count=3))
        counts.append(len(batches))
        for b in batches:
            assert b["image"].shape == (50, 8, 8, 3)
            seen += b["label"][b["mask"] > 0].tolist()
    assert counts == [3, 3, 3]  # 120 per host -> 3 batches of 50 each, equal on every host
    assert sorted(seen) == sorted(src.labels.tolist())


def test_cached_eval_batches_preprocess_once_when_they_fit():
    src = sources.DigitsSource("test")  # 360 examples: 8 batches of 50 (the last padded)
    ep = preprocess.EvalPreprocess(8, 1.0)
    calls = []
    counting = lambda record: calls.append(1) or ep(record)
    reference = list(pipeline.eval_batches(src, ep, 50))
    cached = pipeline.CachedEvalBatches(src, counting, 50)
    for _ in range(3):
        passes = list(cached)
        assert len(passes) == len(reference) == 8
        for a, b in zip(passes, reference):
            assert all(np.array_equal(a[k], b[k]) for k in ("image", "label", "mask"))
    assert len(calls) == 360  # one preprocessing per example, for three passes
    calls.clear()
    streamed = pipeline.CachedEvalBatches(src, counting, 50, max_bytes=1000)  # 50 x 8x8x3 bytes > 1000: streamed
    for _ in range(2):
        assert len(list(streamed)) == 8
    assert len(calls) == 720 and streamed.batches is None


def test_evenly_spaced_subset():
    src = sources.DigitsSource("test")
    sub = sources.evenly_spaced(src, 4)
    assert list(sub.indices) == [0, 120, 239, 359]
    assert sources.evenly_spaced(src, 0) is src


def test_tfds_source_reads_a_prepared_dataset_and_explains_a_missing_one(tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        src = sources.TfdsSource("cifar100", "train")
        assert (len(src), src.num_classes) == (6, 100)
        r = src[0]
        assert r["image"].shape == (32, 32, 3) and r["image"].dtype == np.uint8 and 0 <= r["label"] < 100
    with pytest.raises(ValueError, match=r"TFDS dataset 'cifar10' split 'train' is not prepared as array_record"):
        sources.TfdsSource("cifar10", "train", data_dir=str(tmp_path))


def test_in_memory_source_gives_the_folder_batches_bit_for_bit(tmp_path):
    root = write_image_folder(tmp_path, splits=("train",), per_class=7, size=10)
    folder = sources.nested_subset(sources.ImageFolderSource(root, "train"), fraction=0.5, seed=3)
    mem = sources.InMemorySource(folder, num_threads=3)
    assert mem.images.shape == (len(folder), 10, 10, 3) and mem.images.dtype == np.uint8
    assert (mem.num_classes, mem.class_names) == (3, ["cat", "dog", "frog"])
    for i in range(len(folder)):
        np.testing.assert_array_equal(mem[i]["image"], folder[i]["image"])
        assert mem[i]["label"] == folder[i]["label"]
    tp = preprocess.TrainPreprocess(8, "pad", pad=2, flip=True, value_range=None)
    a, b = pipeline.train_iterator(folder, tp, 4, seed=5), pipeline.train_iterator(mem, tp, 4, seed=5)
    for _ in range(6):  # 24 examples: past the end of the 10-example subset's first epoch
        x, y = next(a), next(b)
        np.testing.assert_array_equal(x["image"], y["image"])
        np.testing.assert_array_equal(x["label"], y["label"])


def test_in_memory_source_refuses_mixed_sizes_and_undecoded_records(tmp_path):
    root = write_image_folder(tmp_path, splits=("train",), classes=("a",), per_class=2, size=10)
    Image.fromarray(np.zeros((6, 9, 3), np.uint8)).save(os.path.join(root, "train", "a", "small.png"))
    with pytest.raises(ValueError, match=r"images of one size: .*small.png is 9x6, .*0.jpg is 10x10"):
        sources.InMemorySource(sources.ImageFolderSource(root, "train"))
    with pytest.raises(ValueError, match="needs decoded records"):
        sources.InMemorySource(sources.ImageFolderSource(root, "train", lazy=True))
