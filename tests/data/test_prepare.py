"""TFRecord-prepared TFDS datasets: the TFRecord codec, the array_record conversion tool, training from its output.

The tiny dataset is built by TFDS itself (a `GeneratorBasedBuilder`, file_format='tfrecord') with TensorFlow's
TFRecord writer replaced by `vit_jax_struct.data.tfrecord.write_records` (byte-identical, checked against bytes
written by `tf.io.TFRecordWriter` below), since CI has no TensorFlow; images are given PNG-encoded, as ImageNet's
builder gives its JPEG files, so TFDS needs no TensorFlow to encode them either.
"""

import binascii
import io
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image
from tensorflow_datasets.core import file_adapters

from tests.conftest import tiny_config
from vit_jax_struct.data import prepare, sources, tfrecord
from vit_jax_struct.train import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tf.io.TFRecordWriter (TensorFlow 2.21) output for the records b"", b"a", b"hello tfrecord":
TF_WRITTEN = ("000000000000000029039807d8ea82a201000000000000000175de4161786ee4280e00000000000000c5e5693f68656c6c6f"
              "2074667265636f72649f5b7622")
NAME = "vjs_tiny_images"
SIZES = [(9, 12), (12, 9), (10, 10), (8, 14)]


def _image(i):
    h, w = SIZES[i % len(SIZES)]
    return np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)


class VjsTinyImages(tfds.core.GeneratorBasedBuilder):
    """12 random RGB images of 4 sizes in 3 classes: train 8, test 4."""

    VERSION = tfds.core.Version("1.0.0")
    __module__ = NAME  # a top-level module name: TFDS then looks for no code folder (needs importlib_resources)

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3)),
            "label": tfds.features.ClassLabel(names=["ant", "bee", "cat"])}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(range(8)), "test": self._generate_examples(range(8, 12))}

    def _generate_examples(self, ids):
        for i in ids:
            buf = io.BytesIO()
            Image.fromarray(_image(i)).save(buf, "PNG")
            buf.seek(0)
            yield i, {"image": buf, "label": i % 3}


def build_tfrecord_dataset(data_dir, monkeypatch):
    """Prepares `VjsTinyImages` as TFRecord in `data_dir` (as `tfds build` would, without TensorFlow)."""
    def write_examples(cls, path, iterator):
        tfrecord.write_records(path, (ex for _, ex in iterator))

    monkeypatch.setattr(file_adapters.TfRecordFileAdapter, "write_examples", classmethod(write_examples))
    VjsTinyImages(data_dir=str(data_dir), file_format="tfrecord").download_and_prepare()
    return str(data_dir)


def test_tfrecord_codec_matches_tensorflow_and_detects_corruption(tmp_path):
    path = tmp_path / "a.tfrecord"
    assert tfrecord.write_records(path, [b"", b"a", b"hello tfrecord"]) == 3
    assert binascii.hexlify(path.read_bytes()).decode() == TF_WRITTEN
    assert list(tfrecord.read_records(path)) == [b"", b"a", b"hello tfrecord"]
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 1  # flip a bit of the last record's data
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"corrupt record at byte 33 \(data CRC mismatch\)"):
        list(tfrecord.read_records(path))
    path.write_bytes(bytes(raw[:-3]))
    with pytest.raises(ValueError, match=r"is truncated: record at byte 33 needs 14 bytes"):
        list(tfrecord.read_records(path))


def test_tfrecord_tfds_dataset_converts_and_trains(tmp_path, monkeypatch):
    data_dir = build_tfrecord_dataset(tmp_path / "tfds", monkeypatch)
    assert os.path.exists(os.path.join(data_dir, NAME, "1.0.0", f"{NAME}-train.tfrecord-00000-of-00001"))
    with pytest.raises(ValueError, match=r"(?s)not prepared as array_record.*python -m vit_jax_struct.data.prepare"):
        sources.TfdsSource(NAME, "train", data_dir)

    out_dir = str(tmp_path / "array_record")
    version_dir = prepare.convert(NAME, data_dir, out_dir)
    assert os.fspath(version_dir) == os.path.join(out_dir, NAME, "1.0.0")
    train, test = sources.TfdsSource(NAME, "train", out_dir), sources.TfdsSource(NAME, "test", out_dir)
    assert (len(train), len(test), train.class_names) == (8, 4, ["ant", "bee", "cat"])
    got = {(r["label"], r["image"].tobytes()) for r in (train[i] for i in range(8))}
    assert got == {(i % 3, _image(i).tobytes()) for i in range(8)}  # PNG: pixel-exact round trip
    with pytest.raises(ValueError, match=r"is stored as array_record, not tfrecord"):
        prepare.convert(NAME, out_dir)

    c = tiny_config(total_steps=2, eval_every_steps=0, checkpoint_every_steps=0)
    c.data.update(source="tfds", name=NAME, root=out_dir, train_split="train", eval_split="test", num_classes=3,
                  eval_examples=0)
    c.pp.update(train_crop="inception", eval_crop_fraction=0.875)
    state, last = trainer.train_and_evaluate(c, str(tmp_path / "run"))
    assert int(state["step"]) == 2 and last["eval/accuracy"] in (0.0, 0.25, 0.5, 0.75, 1.0)


def test_prepare_command_converts_in_place(tmp_path, monkeypatch):
    data_dir = build_tfrecord_dataset(tmp_path / "tfds", monkeypatch)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-m", "vit_jax_struct.data.prepare", f"--tfds={NAME}:1.0.0",
                          f"--data_dir={data_dir}"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert f"--config.data.root={data_dir}" in out.stdout
    names = sorted(os.listdir(os.path.join(data_dir, NAME, "1.0.0")))
    assert f"{NAME}-test.array_record-00000-of-00001" in names and f"{NAME}-test.tfrecord-00000-of-00001" in names
    src = sources.TfdsSource(NAME, "test[:2]", data_dir)  # TFRecord stays the main format, array_record is read
    assert len(src) == 2 and src[1]["image"].tobytes() == _image(9).tobytes() and src[1]["label"] == 0
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([sys.executable, "-m", "vit_jax_struct.data.prepare", "--tfds=nonexistent_ds",
                        f"--data_dir={data_dir}"], cwd=ROOT, env=env, capture_output=True, check=True)
