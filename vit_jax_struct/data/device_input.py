"""Input on the device for train data held in memory: the host gathers uint8 batches by index, the jitted train step
crops, flips and permutes them.

For a small dataset held in memory (the digits; CIFAR/SVHN with `data.in_memory=True`) the per-example Python work
of the host pipeline (grain's per-record hand-off, `np.pad`, slicing, a flip, one record at a time) costs more than
the train step of a small ViT: the embedded default waited for data 47 % of its wall time. Here the host does one
numpy fancy-indexing gather per batch (`InMemoryBatches`: `images[idx]`, microseconds), and `augment` runs the
random crop and flip on the whole batch inside the jitted step, keyed by `fold_in(fold_in(key(seed), 3), step)`.

Order and randomness are a function of `(seed, step)` alone: epoch e visits the examples in the permutation
`np.random.default_rng([seed, e]).permutation(N)`; global batch s holds the stream positions `s·B … s·B + B − 1`
(host p of P takes every P-th of them), and the crop offsets and flips of step s come from the step's key. The
iterator's state is the step, so a resumed run repeats the uninterrupted one bitwise.

What runs where (`placement`): pad + random crop, resize-free crops (`none`), the inception (random-resized) crop,
the horizontal flip and the patch permutation run on the device; RandAugment stays per example on the host, so a
config with RandAugment keeps the host pipeline (`pipeline.train_iterator`), as does any dataset read from its files.
The distribution matches the host transform (`preprocess.TrainPreprocess`): the pad crop picks each offset in
`0 … 2·pad` uniformly and the flip has probability 1/2, both bit-exact in their pixels; the inception crop samples the
area fraction uniformly in `[crop_area_min, 1]` and the log aspect ratio uniformly in `[log 3/4, log 4/3]` with 10
attempts and the whole image as fallback (Szegedy et al. 2015, §6), then resizes with an antialiased bilinear filter
(`jax.image.scale_and_translate`), which differs from Pillow's bilinear box filter by rounding-size amounts.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax_struct.data import permute as permute_lib

DEVICE_CROPS = ("pad", "none", "inception")
STATE_KEY = "device_input"  # the key of this iterator's checkpointed state (grain's own states never have it)


def unsupported_reason(config, train_source) -> str | None:
    """None when `config`'s train batches of `train_source` can be augmented on the device, else why not (one
    phrase, for the log). `data.device_augment=False` turns it off."""
    if not config.data.get("device_augment", True):
        return "data.device_augment=False"
    if not getattr(train_source, "in_memory", False):
        return "the train data is read from its files (data.in_memory=False)"
    if config.pp.get("randaug_layers", 0):
        return "RandAugment runs per example on the host"
    if config.pp.get("train_crop", "inception") not in DEVICE_CROPS:
        return f"pp.train_crop {config.pp.get('train_crop')!r} has no device version"
    return None


def placement(config, on_device: bool) -> str:
    """Which augmentations run where, e.g. `on the device: pad 2 + random crop; on the host: gather by index`."""
    if not on_device:
        return "on the host: every train transform, per example (grain)"
    pp = config.pp
    done = {"pad": f"pad {pp.get('pad', 4)} + random crop", "none": "no crop",
            "inception": "inception crop"}[pp.get("train_crop", "inception")]
    done += ", flip" if pp.get("flip", True) else ""
    done += ", patch permutation" if config.data.get("permute_patches") else ""
    return f"on the device: {done}, scaling; on the host: a gather of uint8 images by index"


def host_arrays(source, image_size: int, crop: str) -> tuple[np.ndarray, np.ndarray]:
    """`(images uint8 [N, H, W, 3], labels int32 [N])` of an in-memory source, ready for `augment`.

    For the `pad` and `none` crops every image is resized to `image_size` once here, with the host transform's own
    resize (`preprocess._resize`, Pillow bilinear), so the device sees the host path's pixels; the inception crop
    resizes its crop box on the device, from the stored size.

    Raises:
      ValueError: a source whose records are not decoded images of one size.
    """
    from vit_jax_struct.data import preprocess
    from vit_jax_struct.data.sources import to_rgb

    images, labels = getattr(source, "images", None), getattr(source, "labels", None)
    if images is None or labels is None or len(images) != len(source):
        records = [source[i] for i in range(len(source))]
        if any("image" not in r for r in records[:1]):
            raise ValueError("input on the device needs decoded records; this source hands out undecoded files")
        images = np.stack([to_rgb(np.asarray(r["image"])) for r in records])
        labels = np.asarray([r["label"] for r in records])
    images, labels = np.asarray(images), np.asarray(labels, np.int32)
    if images.ndim == 3:
        images = np.repeat(images[..., None], 3, axis=-1)
    if crop != "inception" and images.shape[1:3] != (image_size, image_size):
        images = np.stack([preprocess._resize(np.ascontiguousarray(im), image_size) for im in images])
    return np.ascontiguousarray(images, np.uint8), labels


class InMemoryBatches:
    """Infinite iterator of host-local train batches `{"image": uint8 [b, H, W, 3], "label": int32 [b]}` gathered
    from arrays in memory; b = global batch / process count.

    Batch s holds the global stream positions `s·B + j` (host p takes `j = p, p + P, …`); position g is example
    `perm_e[g mod N]` of epoch `e = g div N`, `perm_e = np.random.default_rng([seed, e]).permutation(N)`. The state
    (`get_state`, JSON bytes, saved in the checkpoint by `grain.checkpoint.CheckpointSave`) is the next batch's
    index, so a resumed run reads the batches the uninterrupted one would have read.

    Args:
      images: uint8 `[N, H, W, 3]`; labels: int `[N]`.
      global_batch: B, examples per step over all hosts.
      seed: order seed (`config.seed`).
      process_index, process_count: this host's share of every batch.

    Raises:
      ValueError: B not divisible by process_count, or an empty dataset.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, global_batch: int, seed: int,
                 process_index: int = 0, process_count: int = 1):
        if global_batch % process_count:
            raise ValueError(f"global batch {global_batch} is not divisible by {process_count} processes")
        if not len(labels):
            raise ValueError("the train split is empty")
        self.images, self.labels = images, np.asarray(labels, np.int32)
        self.global_batch, self.seed = int(global_batch), int(seed)
        self.process_index, self.process_count = int(process_index), int(process_count)
        self.step = 0
        self._perms: dict[int, np.ndarray] = {}

    def __len__(self):
        return len(self.labels)

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) > 2:
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(len(self.labels))
        return self._perms[epoch]

    def indices(self, step: int) -> np.ndarray:
        """Example indices (int64 `[b]`) of this host's part of batch `step`."""
        n = len(self.labels)
        pos = step * self.global_batch + np.arange(self.process_index, self.global_batch, self.process_count)
        epochs, within = np.divmod(pos, n)
        out = np.empty(len(pos), np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self._perm(int(e))[within[sel]]
        return out

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        idx = self.indices(self.step)
        self.step += 1
        return {"image": self.images[idx], "label": self.labels[idx]}

    def get_state(self) -> bytes:
        return json.dumps({STATE_KEY: {"step": self.step, "examples": len(self.labels),
                                       "global_batch": self.global_batch, "seed": self.seed}}).encode()

    def state_problem(self, saved: dict) -> str | None:
        """Why a checkpointed data state `saved` (parsed JSON) cannot continue this iterator's stream, or None: a
        state of the host pipeline (grain), or one of another dataset size, global batch or seed."""
        if STATE_KEY not in saved:
            return ("its data state was written by the host input pipeline (grain), this run takes its input on the "
                    "device: resume with --config.data.device_augment=False (or train in a new workdir)")
        s = saved[STATE_KEY]
        mine = {"examples": len(self.labels), "global_batch": self.global_batch, "seed": self.seed}
        diff = [f"{k} {s.get(k)} in the checkpoint, {v} now" for k, v in mine.items() if s.get(k) != v]
        if diff:
            return "its data state does not continue this run's example stream: " + ", ".join(diff)
        return None

    def set_state(self, state) -> None:
        """Rewinds to a state of `get_state` (JSON bytes or str, or the parsed dict).

        Raises:
          ValueError: `state_problem` names a problem.
        """
        s = json.loads(state) if isinstance(state, (bytes, str)) else state
        problem = self.state_problem(s)
        if problem:
            raise ValueError(problem)
        self.step = int(s[STATE_KEY]["step"])

    def start_prefetch(self) -> None:
        """(grain's restore calls it; nothing is prefetched: a gather takes microseconds.)"""


def _pad_crop(key, images, pad: int, size: int):
    """Zero-pad by `pad` then a random `size` crop per example, offsets uniform in `0 … 2·pad`: uint8 in, out."""
    b = images.shape[0]
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    offsets = jax.random.randint(key, (b, 2), 0, 2 * pad + 1)
    return jax.vmap(lambda im, o: jax.lax.dynamic_slice(im, (o[0], o[1], 0), (size, size, im.shape[-1])))(
        padded, offsets)


def inception_boxes(key, b: int, h: int, w: int, area_min: float, attempts: int = 10):
    """Crop boxes `(y0, x0, ch, cw)`, each int32 `[b]`, as `preprocess.inception_crop_box` samples them: area
    fraction uniform in `[area_min, 1]`, log aspect ratio uniform in `[log 3/4, log 4/3]`, the first of `attempts`
    samples that fits, else the whole image; the offset uniform among the positions that fit."""
    ka, kr, ky, kx = jax.random.split(key, 4)
    target = h * w * jax.random.uniform(ka, (b, attempts), minval=area_min, maxval=1.0)
    ratio = jnp.exp(jax.random.uniform(kr, (b, attempts), minval=math.log(3 / 4), maxval=math.log(4 / 3)))
    cw = jnp.round(jnp.sqrt(target * ratio)).astype(jnp.int32)
    ch = jnp.round(jnp.sqrt(target / ratio)).astype(jnp.int32)
    fits = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = jnp.argmax(fits, axis=1)
    any_fit = fits.any(axis=1)
    cw = jnp.where(any_fit, jnp.take_along_axis(cw, first[:, None], 1)[:, 0], w)
    ch = jnp.where(any_fit, jnp.take_along_axis(ch, first[:, None], 1)[:, 0], h)
    y0 = jnp.floor(jax.random.uniform(ky, (b,)) * (h - ch + 1)).astype(jnp.int32)
    x0 = jnp.floor(jax.random.uniform(kx, (b,)) * (w - cw + 1)).astype(jnp.int32)
    return y0, x0, ch, cw


def _inception_crop(key, images, size: int, area_min: float):
    """Random-resized crop per example, resized to `size` (antialiased bilinear): uint8 in, uint8 out."""
    b, h, w, c = images.shape
    y0, x0, ch, cw = inception_boxes(key, b, h, w, area_min)

    def one(im, y, x, hh, ww):
        scale = jnp.stack([size / hh, size / ww]).astype(jnp.float32)
        shift = -jnp.stack([y, x]).astype(jnp.float32) * scale
        out = jax.image.scale_and_translate(im.astype(jnp.float32), (size, size, c), (0, 1), scale, shift,
                                            method="linear", antialias=True)
        return jnp.clip(jnp.round(out), 0, 255).astype(jnp.uint8)

    return jax.vmap(one)(images, y0, x0, ch, cw)


def make_augment(config, image_size: int, perm: np.ndarray | None = None, patch: int = 0):
    """`(images uint8 [B, H, W, 3], step) -> uint8 [B, S, S, 3]`: the random train transform of `config.pp` on a
    batch, inside the jitted step (S = `image_size`); randomness from `fold_in(fold_in(key(config.seed), 3), step)`.

    `perm`/`patch`: the fixed patch permutation of `data.permute_patches` (applied after crop and flip, as
    `permute.PermutePatches` does on the host).

    Raises:
      ValueError: a crop without a device version (see `DEVICE_CROPS`).
    """
    pp = config.pp
    crop = pp.get("train_crop", "inception")
    if crop not in DEVICE_CROPS:
        raise ValueError(f"pp.train_crop {crop!r} has no device version; allowed: {DEVICE_CROPS}")
    pad, flip, area_min = int(pp.get("pad", 4)), bool(pp.get("flip", True)), float(pp.get("crop_area_min", 0.05))
    root = jax.random.fold_in(jax.random.key(config.seed), 3)

    def augment(images, step):
        k_crop, k_flip = jax.random.split(jax.random.fold_in(root, step))
        if crop == "inception":
            images = _inception_crop(k_crop, images, image_size, area_min)
        elif crop == "pad" and pad > 0:
            images = _pad_crop(k_crop, images, pad, image_size)
        if flip:
            flips = jax.random.bernoulli(k_flip, 0.5, (images.shape[0],))
            images = jnp.where(flips[:, None, None, None], images[:, :, ::-1], images)
        if perm is not None:
            images = permute_lib.permute_patches(images, perm, patch, jnp)
        return images

    return augment
