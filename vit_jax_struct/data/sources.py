"""Random-access data sources for grain: scikit-learn digits, image folders, prepared TFDS datasets.

Every source has `__len__`, `__getitem__(i) -> {"image": uint8 [H, W, 3], "label": int}`, `num_classes` and
`class_names`; grain reads them from several threads, so `__getitem__` is stateless.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence

import numpy as np
from absl import logging

from vit_jax_struct import storage

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
JPEG_DECODERS = ("simplejpeg", "pillow")  # `pp.jpeg_decoder`: who decodes JPEG files (others always go to Pillow)
SOURCES = ("digits", "folder", "tfds", "sample_photos")


def to_rgb(image: np.ndarray) -> np.ndarray:
    """`[H, W]`, `[H, W, 1]`, `[H, W, 3]` or `[H, W, 4]` uint8 -> `[H, W, 3]` uint8 (grey is repeated, alpha dropped).

    Raises:
      ValueError: for any other shape.
    """
    if image.ndim == 2:
        image = image[..., None]
    if image.ndim != 3 or image.shape[-1] not in (1, 3, 4):
        raise ValueError(f"image of shape {image.shape} is not [H, W] or [H, W, 1|3|4]")
    if image.shape[-1] == 1:
        return np.repeat(image, 3, axis=-1)
    return image[..., :3]


# Pillow modes with more than 8 bits per sample, and the value that maps to 255.
_HIGH_BIT_MODES = {"I;16": 65535, "I;16B": 65535, "I;16L": 65535, "I;16N": 65535, "I": 65535, "F": 1.0}


def decode_jpeg_simplejpeg(data: bytes, min_width: int = 0, min_height: int = 0) -> np.ndarray | None:
    """A JPEG file -> uint8 `[H, W, 3]` RGB through simplejpeg (libjpeg-turbo's TurboJPEG API), or None when it
    cannot be decoded that way (not a JPEG, CMYK or YCCK, corrupt or truncated: the caller falls back to Pillow, which
    converts what it can and names the file in its error).

    At full size the pixels are the same as Pillow's `Image.open(...).convert("RGB")` (both are libjpeg-turbo with
    the same IDCT and upsampling; every photo of the ImageNet sample compared equal), at the same cost per image
    on this CPU (docs/input_pipeline.md). Neither
    applies EXIF orientation. Images above Pillow's `Image.MAX_IMAGE_PIXELS` are left to Pillow's bomb check.
    `min_width`/`min_height` > 0 decode at the smallest of libjpeg-turbo's DCT scaling factors (M/8) whose output
    is still at least that size.
    """
    if data[:2] != b"\xff\xd8":  # JPEG start-of-image marker
        return None
    import simplejpeg
    from PIL import Image

    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if colorspace not in ("YCbCr", "Gray", "RGB"):
            return None  # CMYK / YCCK: TurboJPEG converts them otherwise than Pillow (Adobe's inverted CMYK)
        if Image.MAX_IMAGE_PIXELS and h * w > Image.MAX_IMAGE_PIXELS:
            return None  # let Pillow apply its decompression-bomb limits (a warning, or an error above 2x)
        return simplejpeg.decode_jpeg(data, colorspace="RGB", min_width=int(min_width), min_height=int(min_height))
    except ValueError:
        return None


def decode_image(data: bytes, name: str = "image", jpeg_decoder: str = "pillow") -> np.ndarray:
    """Encoded image bytes (JPEG, PNG, …; Pillow) -> uint8 `[H, W, 3]`.

    Grey, palette and RGBA images become RGB. High-bit-depth modes are scaled to 8 bits, not clipped: 16-bit grey
    (`I;16*`, and 32-bit integer `I`, which Pillow uses for 16-bit PNG/TIFF data) maps 0..65535 to 0..255, float
    (`F`) maps 0..1 to 0..255; values outside the range are clipped. `jpeg_decoder="simplejpeg"` decodes JPEG files
    with `decode_jpeg_simplejpeg` (the same pixels, faster), falling back to Pillow for what it cannot decode.

    Raises:
      ValueError: the bytes cannot be decoded, naming `name`.
    """
    from PIL import Image

    if jpeg_decoder not in JPEG_DECODERS:
        raise ValueError(f"jpeg_decoder {jpeg_decoder!r} is not one of {JPEG_DECODERS}")
    if jpeg_decoder == "simplejpeg":
        image = decode_jpeg_simplejpeg(data)
        if image is not None:
            return image

    try:
        img = Image.open(io.BytesIO(data))
    except Exception as e:  # PIL raises several types; one clear error naming the file.
        # Pillow's text names the in-memory buffer ("<_io.BytesIO object at 0x…>"), which says nothing to a user.
        why = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-fA-F]+>", "", str(e)).strip()
        raise ValueError(f"cannot decode image file {name!r}: {type(e).__name__}" + (f": {why}" if why else "")) \
            from e
    return image_to_array(img, name)


def image_to_array(img, name: str = "image") -> np.ndarray:
    """An opened (lazy) `PIL.Image` -> uint8 `[H, W, 3]`, converted as in `decode_image` (which calls it after
    `Image.open`; `preprocess.TrainPreprocess` calls it after `Image.draft` on lazy records).

    Raises:
      ValueError: the image data cannot be decoded (truncated, corrupt), naming `name`.
    """
    try:
        img.load()
        if img.mode in _HIGH_BIT_MODES:
            full = _HIGH_BIT_MODES[img.mode]
            a = np.asarray(img, np.float64)
            a = np.clip(np.round(a * (255.0 / full)), 0, 255).astype(np.uint8)
            return np.repeat(a[..., None], 3, axis=-1) if a.ndim == 2 else to_rgb(a)
        return np.asarray(img.convert("RGB"), np.uint8)
    except Exception as e:  # PIL raises several types; one clear error naming the file.
        raise ValueError(f"cannot decode image file {name!r}: {type(e).__name__}: {e}") from e


class DigitsSource:
    """scikit-learn's handwritten digits (Alpaydin & Kaynak 1998; UCI), shipped with scikit-learn, so offline.

    1,797 grey 8x8 images in 10 classes, pixel values 0..16 scaled to uint8 0..255 and repeated to 3 channels.
    The split is fixed (independent of `config.seed`) so every run is evaluated on the same held-out images:
    a stratified 80/20 split with `random_state=0` gives 1,437 `train` and 360 `test` images.

    Raises:
      ValueError: for a split other than 'train' or 'test'.
    """

    in_memory = True  # every record is a view of arrays held in memory (pipeline.eval_batches reads it unthreaded)
    SPLITS = ("train", "test")

    def __init__(self, split: str):
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        if split not in self.SPLITS:
            raise ValueError(f"digits split {split!r} is not one of {self.SPLITS}")
        d = load_digits()
        images = np.round(d.images / 16.0 * 255.0).astype(np.uint8)
        idx_train, idx_test = train_test_split(np.arange(len(images)), test_size=0.2, random_state=0,
                                               stratify=d.target)
        idx = idx_train if split == "train" else idx_test
        self.images = np.repeat(images[idx][..., None], 3, axis=-1)
        self.labels = d.target[idx].astype(np.int32)
        self.class_names = [str(i) for i in range(10)]
        self.num_classes = 10

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"image": self.images[i], "label": int(self.labels[i])}


def _list_images(folder: str) -> list[str]:
    return [storage.join(folder, f) for f in storage.listdir(folder)
            if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith(".")]


class ImageFolderSource:
    """Images in `root/<split>/<class>/*.{jpg,jpeg,png}` (local or `gs://`); labels are the class folders, sorted.

    Decoding uses Pillow (`decode_image`: grey, palette and RGBA files become RGB, 16-bit ones are scaled to 8 bits).
    Listing is eager (so a missing folder or an empty class fails at start-up); decoding is lazy, in grain's reader
    threads.

    Args:
      root: dataset folder or URL.
      split: sub-folder, e.g. 'train' or 'test' ('.': the root itself holds the class folders).
      class_names: if given (e.g. the train split's), the split must have exactly these class folders.
      lazy: True: `__getitem__` returns the file undecoded, `{"encoded": bytes, "path": str, "label": int}`, for
        `preprocess.TrainPreprocess` to decode (with JPEG draft decoding when the crop is small, `pp.jpeg_draft`);
        a file that cannot be decoded then raises (naming it) in the preprocess step, not in the source, so the
        trainer reads eagerly under `data.decode_errors='skip'`.

    Raises:
      FileNotFoundError: `root` or `root/split` does not exist.
      ValueError: no class folders, a class folder with no images, or class folders differing from
        `class_names`; a file that cannot be decoded raises ValueError naming it when it is read.
    """

    def __init__(self, root: str, split: str, class_names: Sequence[str] | None = None, lazy: bool = False,
                 jpeg_decoder: str = "pillow"):
        if jpeg_decoder not in JPEG_DECODERS:
            raise ValueError(f"pp.jpeg_decoder {jpeg_decoder!r} is not one of {JPEG_DECODERS}")
        self.lazy, self.jpeg_decoder = bool(lazy), jpeg_decoder
        root = str(root) if storage.is_url(root) else os.path.expanduser(str(root))
        folder = root if split in (".", "") else storage.join(root, split)
        if not storage.isdir(root):
            raise FileNotFoundError(f"data.root {root!r} does not exist; expected a folder laid out as "
                                    "root/{train,test}/<class>/*.jpg")
        if not storage.isdir(folder):
            raise FileNotFoundError(f"split folder {folder!r} does not exist; expected root/{split}/<class>/*.jpg")
        names = [d for d in storage.listdir(folder) if storage.isdir(storage.join(folder, d))]
        if not names:
            raise ValueError(f"split folder {folder!r} has no class folders; expected {folder}/<class>/*.jpg")
        if class_names is not None and list(class_names) != names:
            missing, extra = sorted(set(class_names) - set(names)), sorted(set(names) - set(class_names))
            raise ValueError(f"class folders of {folder!r} differ from the train split's: missing {missing}, "
                             f"extra {extra}")
        self.paths, labels = [], []
        for label, name in enumerate(names):
            files = _list_images(storage.join(folder, name))
            if not files:
                raise ValueError(f"class folder {storage.join(folder, name)!r} has no images "
                                 f"(looked for {', '.join(IMAGE_EXTENSIONS)})")
            self.paths += files
            labels += [label] * len(files)
        self.labels = np.asarray(labels, np.int32)
        self.class_names = names
        self.num_classes = len(names)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        path = self.paths[i]
        try:
            data = storage.read_bytes(path)
        except Exception as e:
            raise ValueError(f"cannot read image file {path!r}: {type(e).__name__}: {e}") from e
        if self.lazy:
            return {"encoded": data, "path": path, "label": int(self.labels[i])}
        return {"image": decode_image(data, path, self.jpeg_decoder), "label": int(self.labels[i])}

    def describe(self, i) -> str:
        return self.paths[i]


class SamplePhotosSource:
    """The two photos scikit-learn ships (`sklearn.datasets.load_sample_images`: `china.jpg`, `flower.jpg`, 427x640
    RGB, CC-BY 2.0), one class each; offline, for smoke runs of the 224-px recipes (`:runlocal`).

    Both splits hold the same two photos; there is nothing to learn or evaluate, only every code path to run.

    Raises:
      ValueError: for a split other than 'train', 'test' or '.'.
    """

    def __init__(self, split: str):
        from sklearn.datasets import load_sample_images

        if split not in ("train", "test", "."):
            raise ValueError(f"sample_photos split {split!r} is not one of 'train', 'test'")
        d = load_sample_images()
        self.images = [np.asarray(x, np.uint8) for x in d.images]
        self.class_names = [os.path.splitext(os.path.basename(f))[0] for f in d.filenames]
        self.num_classes = len(self.class_names)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {"image": self.images[i], "label": int(i)}


class SkipUnreadable:
    """`data.decode_errors='skip'`: an example that cannot be read is replaced by the next readable one.

    Example `i` that fails is replaced by `i+1`, `i+2`, … (mod the length): deterministic, so a resumed run sees the
    same replacement. Each record gets `"skipped"` (int32, 1 for a replacement), which the trainer sums into
    `data/skipped`; each replacement is logged with the file's name.

    Raises:
      ValueError: `max_tries` examples in a row cannot be read (the data is broken, not one file).
    """

    def __init__(self, source, max_tries: int = 100):
        self.source, self.max_tries = source, int(max_tries)
        self.num_classes, self.class_names = source.num_classes, source.class_names

    def __len__(self):
        return len(self.source)

    def __getitem__(self, i):
        n = len(self.source)
        errors = []
        for k in range(min(self.max_tries, n)):
            try:
                record = self.source[(int(i) + k) % n]
            except (ValueError, OSError) as e:
                logging.warning("data.decode_errors='skip': example %d unreadable, replaced: %s", (int(i) + k) % n, e)
                errors.append(str(e))
                continue
            return {**record, "skipped": np.int32(k > 0)}
        raise ValueError(f"{len(errors)} examples in a row from {int(i)} cannot be read; last: {errors[-1]}")


class TfdsSource:
    """A prepared TFDS dataset (array_record format) read with `tfds.data_source`, no TensorFlow needed.

    Args:
      name: TFDS name, e.g. 'cifar100', 'imagenet2012', 'imagenet2012:5.1.0'.
      split: TFDS split string, e.g. 'train', 'validation', 'train[:99%]'.
      data_dir: TFDS data dir (None: the TFDS default, `~/tensorflow_datasets` or $TFDS_DATA_DIR).
      image_key, label_key: feature names.

    Raises:
      ValueError: the dataset is not prepared in `data_dir`, or is not in a random-access format.
    """

    def __init__(self, name: str, split: str, data_dir: str | None = None, image_key: str = "image",
                 label_key: str = "label"):
        from vit_jax_struct.data.prepare import data_source  # tfds.data_source, also after in-place conversion

        try:
            self.source = data_source(name, split, data_dir)
        except Exception as e:  # tfds raises AssertionError/ValueError/FileNotFoundError depending on the case.
            raise ValueError(f"TFDS dataset {name!r} split {split!r} is not prepared as array_record in data_dir "
                             f"{data_dir!r} ({type(e).__name__}: {e}); a TFRecord dataset (`tfds build {name}`) "
                             f"converts with `python -m vit_jax_struct.data.prepare --tfds={name} --data_dir=DIR`, "
                             f"or prepare it with `tfds build {name} --file_format=array_record`") from e
        self.image_key, self.label_key = image_key, label_key
        feature = self.source.dataset_info.features[label_key]
        self.num_classes = int(feature.num_classes)
        self.class_names = list(feature.names)

    def __len__(self):
        return len(self.source)

    def __getitem__(self, i):
        r = self.source[i]
        return {"image": to_rgb(np.asarray(r[self.image_key], np.uint8)), "label": int(r[self.label_key])}


def get_source(data_config, split: str, class_names: Sequence[str] | None = None, lazy: bool = False,
               jpeg_decoder: str = "pillow"):
    """Builds the source named by `data_config.source` ('digits', 'folder', 'tfds') for `split`.

    `lazy`: a folder source hands out undecoded files (`ImageFolderSource(lazy=True)`); other sources ignore it.
    `jpeg_decoder`: who decodes a folder's JPEG files (`pp.jpeg_decoder`; see `decode_image`).

    Raises:
      ValueError: unknown source, or a folder/TFDS source without `data.root`/`data.name`.
    """
    kind = data_config.source
    if kind == "digits":
        return DigitsSource(split)
    if kind == "sample_photos":
        return SamplePhotosSource(split)
    if kind == "folder":
        if not data_config.get("root"):
            raise ValueError("data.source='folder' needs data.root, the folder with {train,test}/<class>/*.jpg")
        return ImageFolderSource(data_config.root, split, class_names, lazy=lazy, jpeg_decoder=jpeg_decoder)
    if kind == "tfds":
        if not data_config.get("name"):
            raise ValueError("data.source='tfds' needs data.name, e.g. 'cifar100'")
        return TfdsSource(data_config.name, split, data_config.get("root") or None)
    raise ValueError(f"data.source {kind!r} is not one of {SOURCES}")


class Subset:
    """The examples `indices` of `source`, in that order (same interface as the source)."""

    def __init__(self, source, indices):
        self.source, self.indices = source, np.asarray(indices, np.int64)
        self.num_classes, self.class_names = source.num_classes, source.class_names
        self.in_memory = getattr(source, "in_memory", False)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.source[int(self.indices[i])]


class InMemorySource:
    """`data.in_memory=True`: every example of `source` decoded once, at start-up, into one uint8 array.

    For small datasets (CIFAR, SVHN, the digits) whose decoding costs more than the train step: a 32x32 PNG takes
    ≈ 1.2 ms to read and decode here, a pad crop + flip 0.3 ms, so the folder pipeline tops out near 740 img/s on
    2 cores and the in-memory one near 1,460 (`benchmarks/in_memory_pipeline.py`). `__getitem__` returns the
    same decoded record as `source[i]` (a view of the array), so a run reads bit for bit the batches it would read
    from `source` (tested); only the time to get them changes. Each host holds the whole split.

    Args:
      source: a source whose records are decoded, `{"image": uint8 [H, W, 3], "label": int}`, all of one size.
      num_threads: decoding threads (Pillow's decoders release the GIL).
      max_fraction: refuse if the array would take more than this share of the machine's physical memory.

    Attributes:
      images: uint8 `[N, H, W, 3]`; labels: int32 `[N]`; load_seconds: the time decoding took; in_memory: True.

    Raises:
      ValueError: a record without a decoded `"image"` (a lazy one), images of different sizes (naming two), or an
        array larger than `max_fraction` of physical memory (naming both sizes).
    """

    in_memory = True

    def __init__(self, source, num_threads: int = 4, max_fraction: float = 0.5):
        import concurrent.futures
        import time

        t0 = time.perf_counter()
        self.num_classes = source.num_classes
        self.class_names = getattr(source, "class_names", None)
        n = len(source)
        first = source[0]
        if "image" not in first:
            raise ValueError("data.in_memory=True needs decoded records; this source hands out undecoded files")
        shape = to_rgb(np.asarray(first["image"])).shape
        nbytes = n * int(np.prod(shape))
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            physical = 0
        if physical and nbytes > max_fraction * physical:
            raise ValueError(f"data.in_memory=True: {n:,} images of {shape[1]}x{shape[0]} take {nbytes / 2**30:.1f} "
                             f"GiB, more than {max_fraction:.0%} of this machine's {physical / 2**30:.1f} GiB; "
                             "read this dataset from its files (data.in_memory=False)")
        self.images = np.empty((n, *shape), np.uint8)
        self.labels = np.empty((n,), np.int32)

        def load(i):
            record = first if i == 0 else source[i]
            image = to_rgb(np.asarray(record["image"]))
            if image.shape != shape:
                where = getattr(source, "describe", lambda j: f"example {j}")
                raise ValueError(f"data.in_memory=True needs images of one size: {where(i)} is "
                                 f"{image.shape[1]}x{image.shape[0]}, {where(0)} is {shape[1]}x{shape[0]}")
            self.images[i] = image
            self.labels[i] = record["label"]

        with concurrent.futures.ThreadPoolExecutor(max(1, int(num_threads))) as pool:
            for _ in pool.map(load, range(n), chunksize=256):
                pass
        self.load_seconds = time.perf_counter() - t0

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"image": self.images[i], "label": int(self.labels[i])}


def evenly_spaced(source, n: int):
    """`n` examples spread evenly over `source` (all of it if n is 0 or ≥ its length); deterministic."""
    if not n or n >= len(source):
        return source
    return Subset(source, np.linspace(0, len(source) - 1, n).round().astype(np.int64))


def nested_subset(source, fraction: float = 0.0, examples: int = 0, seed: int = 0):
    """The first k examples of one fixed random order of `source` (Raghu et al. 2021 §7 data-size subsets).

    k = `examples` if given, else `round(fraction * len)`; neither (0) gives the whole source. The order depends only
    on `seed` and the source length, so a smaller subset is always inside a larger one (3 % ⊂ 10 % ⊂ 100 %).

    Raises:
      ValueError: fraction outside (0, 1], or examples outside [1, len].
    """
    n = len(source)
    if examples:
        if not 1 <= examples <= n:
            raise ValueError(f"data.train_examples {examples} is not in [1, {n}] (the train split's size)")
        k = int(examples)
    elif fraction:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"data.train_fraction {fraction} is not in (0, 1]")
        k = max(1, round(fraction * n))
    else:
        return source
    if k == n:
        return source
    return Subset(source, np.random.default_rng(seed).permutation(n)[:k])
