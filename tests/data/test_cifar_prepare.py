"""CIFAR from the official python archives (`python -m vit_jax_struct.data.prepare --cifar=…`): tiny archives of the
same format, written as the image folder the sweeps read, checked pixel for pixel and label for label."""

import io
import os
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from PIL import Image

from vit_jax_struct.data import cifar, sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _add(tar, name, obj):
    raw = pickle.dumps(obj, protocol=2)  # the official batches are Python 2 pickles with bytes keys
    info = tarfile.TarInfo(name)
    info.size = len(raw)
    tar.addfile(info, io.BytesIO(raw))


def _batch(rng, n, labels_key_values):
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    out = {b"data": data, b"filenames": [f"img_{rng.integers(1e6)}_{i}.png".encode() for i in range(n)]}
    out.update(labels_key_values)
    return out


def make_cifar10(path, per_batch=10, seed=0):
    """A cifar-10-python.tar.gz of 5 train batches and a test batch with `per_batch` images each; returns the
    batches (train then test) as written."""
    rng = np.random.default_rng(seed)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    batches = {}
    with tarfile.open(path, "w:gz") as tar:
        _add(tar, "cifar-10-batches-py/batches.meta", {b"label_names": names, b"num_vis": 3072})
        for m in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            labels = [int(x) for x in rng.permutation(np.arange(per_batch) % 10)]  # every class in every split
            batches[m] = _batch(rng, per_batch, {b"labels": labels})
            _add(tar, f"cifar-10-batches-py/{m}", batches[m])
    return batches


def make_cifar100(path, n=100, seed=1):
    rng = np.random.default_rng(seed)
    fine = [f"f{i:03d}".encode() for i in range(100)]
    coarse = [f"c{i:02d}".encode() for i in range(20)]
    batches = {}
    with tarfile.open(path, "w:gz") as tar:
        _add(tar, "cifar-100-python/meta", {b"fine_label_names": fine, b"coarse_label_names": coarse})
        for m in ("train", "test"):
            fine_labels = [int(x) for x in rng.permutation(np.arange(n) % 100)]
            batches[m] = _batch(rng, n, {b"fine_labels": fine_labels,
                                         b"coarse_labels": [f // 5 for f in fine_labels]})
            _add(tar, f"cifar-100-python/{m}", batches[m])
    return batches


def _expected(batches, members, key):
    images = np.concatenate([batches[m][b"data"] for m in members]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, sum((batches[m][key] for m in members), [])


def test_cifar10_archive_becomes_the_image_folder_pixel_for_pixel_and_the_folder_source_reads_its_labels(tmp_path):
    batches = make_cifar10(tmp_path / "cifar-10-python.tar.gz")
    out = tmp_path / "data" / "cifar10"
    record = cifar.prepare(str(tmp_path / "cifar-10-python.tar.gz"), str(out), log=lambda *_: None)
    assert record["dataset"] == "cifar10" and record["class_names"][0] == "airplane"
    for split, members in (("train", [f"data_batch_{i}" for i in range(1, 6)]), ("test", ["test_batch"])):
        images, labels = _expected(batches, members, b"labels")
        src = sources.ImageFolderSource(str(out), split)
        assert src.class_names == record["class_names"] and len(src) == len(images)
        got = {}
        for i in range(len(src)):  # file names start with the archive index
            index = int(os.path.basename(src.paths[i]).split("_")[0])
            ex = src[i]
            got[index] = (ex["image"], ex["label"])
        assert sorted(got) == list(range(len(images)))
        for index, (image, label) in got.items():
            np.testing.assert_array_equal(image, images[index])
            assert label == labels[index]
    assert not os.path.exists(str(out) + ".partial")


def test_cifar100_fine_and_coarse_labels(tmp_path):
    batches = make_cifar100(tmp_path / "c100.tar.gz")
    for labels, key, n in (("fine", b"fine_labels", 100), ("coarse", b"coarse_labels", 20)):
        out = tmp_path / labels
        cifar.prepare(str(tmp_path / "c100.tar.gz"), str(out), labels=labels, log=lambda *_: None)
        src = sources.ImageFolderSource(str(out), "test")
        assert src.num_classes == n
        _, y = _expected(batches, ["test"], key)
        by_index = {int(os.path.basename(p).split("_")[0]): int(lab) for p, lab in zip(src.paths, src.labels,
                                                                                     strict=True)}
        assert [by_index[i] for i in range(len(y))] == y


def test_rerun_is_a_no_op_and_a_foreign_folder_is_refused(tmp_path):
    make_cifar10(tmp_path / "a.tar.gz")
    out = tmp_path / "out"
    first = cifar.prepare(str(tmp_path / "a.tar.gz"), str(out), log=lambda *_: None)
    said = []
    assert cifar.prepare(str(tmp_path / "a.tar.gz"), str(out), log=said.append) == first
    assert said and "nothing to do" in said[0]
    make_cifar10(tmp_path / "b.tar.gz", seed=5)
    with pytest.raises(FileExistsError, match="exists and is not this archive's prepared folder"):
        cifar.prepare(str(tmp_path / "b.tar.gz"), str(out), log=lambda *_: None)
    with pytest.raises(ValueError, match="'coarse' is not one of"):
        cifar.prepare(str(tmp_path / "a.tar.gz"), str(tmp_path / "o2"), labels="coarse", log=lambda *_: None)


def test_an_archive_that_runs_code_when_unpickled_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with tarfile.open(tmp_path / "evil.tar.gz", "w:gz") as tar:
        _add(tar, "cifar-10-batches-py/batches.meta", {b"label_names": Evil()})
    with pytest.raises(pickle.UnpicklingError, match="asks for posix.system"):
        cifar.read_archive(str(tmp_path / "evil.tar.gz"))


def test_cli_bad_inputs_are_one_line_exit_2_and_write_nothing(tmp_path):
    (tmp_path / "not.tar.gz").write_bytes(b"<html>")
    Image.new("RGB", (4, 4)).save(tmp_path / "x.png")
    with tarfile.open(tmp_path / "other.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "x.png", "x.png")
    cases = {"missing.tar.gz": "does not exist", "not.tar.gz": "is not a readable tar archive",
             "other.tar.gz": "holds neither cifar-10-batches-py/batches.meta nor cifar-100-python/meta"}
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for name, message in cases.items():
        r = subprocess.run([sys.executable, "-m", "vit_jax_struct.data.prepare", f"--cifar={tmp_path / name}",
                            f"--out={tmp_path / 'out'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120, check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --cifar ") and message in lines[0], \
            r.stderr
        assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
