"""CIFAR-10 / CIFAR-100 from the official python archives into the image-folder layout the sweeps read.

    python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-10-python.tar.gz --out=data/cifar10
    python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-100-python.tar.gz --out=data/cifar100 [--labels=coarse]

The archives are the ones the dataset's home page offers (Krizhevsky, 2009, https://www.cs.toronto.edu/~kriz/cifar.html):
`cifar-10-python.tar.gz` holds `cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}`,
`cifar-100-python.tar.gz` holds `cifar-100-python/{train, test, meta}`; each batch is a pickled dict with `data`
(uint8 `[N, 3072]`: the red, green and blue 32x32 planes, row-major), the labels (`labels`; CIFAR-100: `fine_labels`
and `coarse_labels`) and `filenames`. The pickles are read with an unpickler that only builds numpy arrays and plain
Python values (no code from the archive runs).

Written: `out/{train,test}/<class name>/<index>_<file name>.png` (PNG: lossless, so every pixel is the archive's;
the index keeps the archive's order and makes names unique), class folders named by the label names (in the label
order, which is alphabetical for both datasets, so the folder order gives the same label numbers), and
`out/prepared.json` (source archive, sha256, counts, label names). Every image is decoded again after encoding and
compared with the archive's pixels before it is written. The folder is written as `out.partial` and renamed when
complete, so an interrupted run leaves no half dataset under `out`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import tarfile
import time

import numpy as np
from PIL import Image

LABEL_SETS = ("fine", "coarse")

# member name (relative to the archive's folder) -> split, per dataset
_LAYOUTS = {
    "cifar10": {"folder": "cifar-10-batches-py", "meta": "batches.meta", "names_key": {"fine": "label_names"},
                "labels_key": {"fine": "labels"},
                "splits": {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
                "counts": {"train": 50_000, "test": 10_000}, "classes": {"fine": 10}},
    "cifar100": {"folder": "cifar-100-python", "meta": "meta",
                 "names_key": {"fine": "fine_label_names", "coarse": "coarse_label_names"},
                 "labels_key": {"fine": "fine_labels", "coarse": "coarse_labels"},
                 "splits": {"train": ["train"], "test": ["test"]},
                 "counts": {"train": 50_000, "test": 10_000}, "classes": {"fine": 100, "coarse": 20}},
}


class _ArraysOnly(pickle.Unpickler):
    """Unpickles numpy arrays and builtins only; anything else in the stream raises `pickle.UnpicklingError`."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}  # bytes in protocol-2 pickles

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"the archive's pickle asks for {module}.{name}; a CIFAR batch holds only "
                                     "numpy arrays, lists and strings")


def _load(tar: tarfile.TarFile, member: str) -> dict:
    f = tar.extractfile(member)
    if f is None:
        raise ValueError(f"{member} in the archive is not a file")
    raw = _ArraysOnly(io.BytesIO(f.read()), encoding="bytes").load()
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def dataset_of(archive: str) -> str:
    """'cifar10' or 'cifar100' from the archive's members.

    Raises:
      FileNotFoundError: `archive` does not exist.
      ValueError: it is not a tar archive, or holds neither `cifar-10-batches-py/` nor `cifar-100-python/`.
    """
    if not os.path.isfile(archive):
        raise FileNotFoundError(f"--cifar {archive!r} does not exist; expected cifar-10-python.tar.gz or "
                                "cifar-100-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html")
    try:
        with tarfile.open(archive) as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ValueError(f"--cifar {archive!r} is not a readable tar archive ({type(e).__name__}: {e}); expected "
                         "the python version of CIFAR-10/100 (cifar-10-python.tar.gz, cifar-100-python.tar.gz)") from e
    for name, layout in _LAYOUTS.items():
        if f"{layout['folder']}/{layout['meta']}" in names:
            return name
    raise ValueError(f"--cifar {archive!r} holds neither cifar-10-batches-py/batches.meta nor cifar-100-python/meta: "
                     "not the python version of CIFAR-10/100 (the binary and MATLAB versions are not read)")


def read_archive(archive: str, labels: str = "fine") -> dict:
    """Reads a CIFAR python archive into arrays.

    Args:
      archive: path of `cifar-10-python.tar.gz` or `cifar-100-python.tar.gz`.
      labels: 'fine' (CIFAR-10's only labels; CIFAR-100's 100 classes) or 'coarse' (CIFAR-100's 20 superclasses).

    Returns:
      `{"dataset": 'cifar10'|'cifar100', "class_names": [str], "splits": {split: {"images": uint8 [N, 32, 32, 3],
      "labels": int64 [N], "filenames": [str]}}}`.

    Raises:
      FileNotFoundError, ValueError: see `dataset_of`; `labels` not allowed for the dataset; a batch with another
        shape, label range or count than the dataset's.
    """
    dataset = dataset_of(archive)
    layout = _LAYOUTS[dataset]
    if labels not in layout["labels_key"]:
        raise ValueError(f"--labels {labels!r} is not one of {sorted(layout['labels_key'])} for {dataset}")
    folder = layout["folder"]
    with tarfile.open(archive) as tar:
        meta = _load(tar, f"{folder}/{layout['meta']}")
        class_names = [_text(n) for n in meta[layout["names_key"][labels]]]
        splits = {}
        for split, members in layout["splits"].items():
            images, ys, files = [], [], []
            for m in members:
                batch = _load(tar, f"{folder}/{m}")
                data = np.asarray(batch["data"], np.uint8)
                if data.ndim != 2 or data.shape[1] != 3072:
                    raise ValueError(f"{folder}/{m}: data has shape {data.shape}, expected [N, 3072]")
                images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
                ys.append(np.asarray(batch[layout["labels_key"][labels]], np.int64))
                files += [_text(f) for f in batch["filenames"]]
            splits[split] = {"images": np.concatenate(images), "labels": np.concatenate(ys), "filenames": files}
            n, y = len(splits[split]["images"]), splits[split]["labels"]
            if len(y) != n or len(files) != n:
                raise ValueError(f"{archive}: split {split} has {n} images, {len(y)} labels, {len(files)} file names")
            if y.min() < 0 or y.max() >= len(class_names):
                raise ValueError(f"{archive}: split {split} has labels outside 0..{len(class_names) - 1}")
    return {"dataset": dataset, "class_names": class_names, "splits": splits}


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare(archive: str, out: str, labels: str = "fine", overwrite: bool = False, log=print) -> dict:
    """Writes the image folder of a CIFAR python archive (see the module docstring); returns `prepared.json`'s dict.

    Raises:
      FileExistsError: `out` exists and is not an earlier complete output of the same archive and labels (use
        `overwrite`); an earlier complete one is kept and its record returned.
      FileNotFoundError, ValueError: see `read_archive`.
      RuntimeError: an image decoded after encoding differs from the archive's pixels.
    """
    out = os.path.abspath(os.path.expanduser(out))
    dataset = dataset_of(archive)
    record_path = os.path.join(out, "prepared.json")
    if os.path.exists(out) and not overwrite:
        try:
            with open(record_path) as f:
                done = json.load(f)
        except (OSError, ValueError):
            done = None
        if done and done.get("archive_sha256") == _sha256(archive) and done.get("labels") == labels:
            log(f"{out} already holds {dataset} ({labels} labels) from this archive; nothing to do")
            return done
        raise FileExistsError(f"--out {out!r} exists and is not this archive's prepared folder; choose another --out "
                              "or pass --overwrite")
    t0 = time.time()
    data = read_archive(archive, labels)
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    counts = {}
    for split, d in data["splits"].items():
        for name in data["class_names"]:
            os.makedirs(os.path.join(partial, split, name), exist_ok=True)
        for i, (image, y, fname) in enumerate(zip(d["images"], d["labels"], d["filenames"], strict=True)):
            encoded = _png(image)
            if not np.array_equal(np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB")), image):
                raise RuntimeError(f"{split} image {i} ({fname}) does not decode to the archive's pixels")
            stem = os.path.splitext(os.path.basename(fname))[0]
            with open(os.path.join(partial, split, data["class_names"][y], f"{i:05d}_{stem}.png"), "wb") as f:
                f.write(encoded)
        counts[split] = {name: int((d["labels"] == k).sum()) for k, name in enumerate(data["class_names"])}
        log(f"{split}: {len(d['images']):,} images in {len(data['class_names'])} class folders")
    record = {"dataset": dataset, "labels": labels, "archive": os.path.abspath(archive),
              "archive_sha256": _sha256(archive), "class_names": data["class_names"], "counts": counts,
              "layout": "{split}/{class name}/{index:05d}_{file name}.png"}
    with open(os.path.join(partial, "prepared.json"), "w") as f:
        json.dump(record, f, indent=1)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    os.replace(partial, out)
    log(f"wrote {out} in {time.time() - t0:.0f} s (every image checked against the archive's pixels)")
    return record
