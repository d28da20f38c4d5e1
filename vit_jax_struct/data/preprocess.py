"""Per-example image preprocessing (numpy + Pillow), run in grain's reader threads.

Train: a crop (`inception`: random area/aspect crop, Szegedy et al. 2015 §6 as in TF's
`sample_distorted_bounding_box`; `pad`: zero-pad then random crop, the CIFAR standard of He et al. 2016;
`none`), resize to `image_size`, random horizontal flip, optional RandAugment (`augment.randaugment`), then scale to
`value_range` — or, as the trainer does (`from_config`), stay uint8: batches then travel to the devices as uint8
[B, S, S, 3] (4x less host -> device traffic than float32) and `to_value_range` scales them inside the jitted step.
Eval: resize so the central crop of `eval_crop_fraction` of the shorter side becomes `image_size`, center crop.
Outputs are `{"image": float32 [S, S, 3] (or uint8 with value_range=None), "label": int32}`.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from vit_jax_struct.data import augment
from vit_jax_struct.data.sources import to_rgb

TRAIN_CROPS = ("inception", "pad", "none")


def _resize(image: np.ndarray, size: int, box=None) -> np.ndarray:
    """Bilinear resize of uint8 `[H, W, 3]` (optionally its `box` = (x0, y0, x1, y1) region) to `[size, size, 3]`."""
    return np.asarray(Image.fromarray(image).resize((size, size), Image.BILINEAR, box=box), np.uint8)


def inception_crop_box(h: int, w: int, rng: np.random.Generator, area_range=(0.05, 1.0),
                       aspect_range=(3 / 4, 4 / 3), attempts: int = 10):
    """Samples a crop box `(x0, y0, x1, y1)` in pixels covering `area_range` of the image with a log-uniform aspect.

    Falls back to the whole image (TF's behaviour) when no sample fits in `attempts` tries.
    """
    area = h * w
    log_ratio = (math.log(aspect_range[0]), math.log(aspect_range[1]))
    for _ in range(attempts):
        target = area * rng.uniform(*area_range)
        ratio = math.exp(rng.uniform(*log_ratio))
        cw = round(math.sqrt(target * ratio))
        ch = round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x0 = int(rng.integers(0, w - cw + 1))
            y0 = int(rng.integers(0, h - ch + 1))
            return (x0, y0, x0 + cw, y0 + ch)
    return (0, 0, w, h)


def to_value_range(images, value_range, xp=np):
    """uint8 pixels (any shape, e.g. `[B, H, W, 3]`) -> float32 `x * (hi - lo) / 255 + lo` in `value_range`.

    `xp` is `numpy` (host) or `jax.numpy` (inside the jitted step, where the trainer scales uint8 batches); both give
    the same float32 values up to one rounding of the multiply-add. Float inputs are returned unchanged (already
    scaled), so float batches still work.
    """
    if images.dtype != xp.uint8:
        return images
    lo, hi = (float(v) for v in value_range)
    return images.astype(xp.float32) * xp.float32((hi - lo) / 255.0) + xp.float32(lo)


def check_value_range(value_range) -> tuple:
    """`(lo, hi)` floats with lo < hi. Raises ValueError naming `pp.value_range` otherwise."""
    try:
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise ValueError(f"pp.value_range {value_range!r} is not a pair (low, high) of numbers") from None
    if not lo < hi:
        raise ValueError(f"pp.value_range {value_range!r} needs low < high")
    return lo, hi


def _scale(image: np.ndarray, value_range) -> np.ndarray:
    return image if value_range is None else to_value_range(image, value_range)


def _passthrough(record, out):
    """Keeps the `skipped` flag of `sources.SkipUnreadable` records (the trainer counts it)."""
    if "skipped" in record:
        out["skipped"] = np.int32(record["skipped"])
    return out


class TrainPreprocess:
    """Random train transform; `(record, rng: np.random.Generator) -> {"image": float32 [S,S,3], "label": int32}`.

    All randomness comes from `rng` (grain's per-example generator), in the order crop, flip, RandAugment.

    Args:
      image_size: output side S in pixels.
      crop: one of `TRAIN_CROPS`.
      crop_area_min: smallest crop area fraction for `inception` (0.05 in the ViT/big_vision recipe).
      pad: padding in pixels (at output resolution) for the `pad` crop.
      flip: random horizontal flip with probability 0.5.
      value_range: (low, high) of the output pixel values; None: uint8 [S, S, 3] output, unscaled.
      randaug_layers, randaug_magnitude: RandAugment after the flip (AugReg's `randaug(2, 15)` is 2, 15); 0 layers:
        none. See `augment.randaugment`.

    Raises:
      ValueError: unknown crop, crop_area_min outside (0, 1], bad value_range or RandAugment settings.
    """

    def __init__(self, image_size: int, crop: str = "inception", crop_area_min: float = 0.05, pad: int = 4,
                 flip: bool = True, value_range=(-1.0, 1.0), randaug_layers: int = 0,
                 randaug_magnitude: float = 10):
        if crop not in TRAIN_CROPS:
            raise ValueError(f"pp.train_crop {crop!r} is not one of {TRAIN_CROPS}")
        if not 0.0 < crop_area_min <= 1.0:
            raise ValueError(f"pp.crop_area_min {crop_area_min} is not in (0, 1]")
        self.image_size, self.crop, self.crop_area_min = int(image_size), crop, float(crop_area_min)
        augment.check_randaugment(randaug_layers, randaug_magnitude)
        self.pad, self.flip = int(pad), bool(flip)
        self.value_range = None if value_range is None else check_value_range(value_range)
        self.randaug_layers, self.randaug_magnitude = int(randaug_layers), float(randaug_magnitude)

    def __call__(self, record, rng: np.random.Generator):
        image = to_rgb(record["image"])
        s = self.image_size
        if self.crop == "inception":
            box = inception_crop_box(*image.shape[:2], rng, area_range=(self.crop_area_min, 1.0))
            image = _resize(image, s, box)
        else:
            if image.shape[:2] != (s, s):
                image = _resize(image, s)
            if self.crop == "pad" and self.pad > 0:
                p = self.pad
                image = np.pad(image, ((p, p), (p, p), (0, 0)))
                y0, x0 = rng.integers(0, 2 * p + 1, size=2)
                image = image[y0:y0 + s, x0:x0 + s]
        if self.flip and rng.uniform() < 0.5:
            image = image[:, ::-1]
        if self.randaug_layers:
            image = augment.randaugment(np.ascontiguousarray(image), self.randaug_layers, self.randaug_magnitude,
                                        rng)
        return _passthrough(record, {"image": _scale(np.ascontiguousarray(image), self.value_range),
                                     "label": np.int32(record["label"])})


class EvalPreprocess:
    """Deterministic eval transform: resize (shorter side to S / crop_fraction), center crop S x S, scale.

    `crop_fraction=1.0` resizes the central square of the image to S x S (use it for 32-px CIFAR and digits).
    `value_range=None`: uint8 [S, S, 3] output, unscaled.

    Raises:
      ValueError: crop_fraction outside (0, 1].
    """

    def __init__(self, image_size: int, crop_fraction: float = 0.875, value_range=(-1.0, 1.0)):
        if not 0.0 < crop_fraction <= 1.0:
            raise ValueError(f"pp.eval_crop_fraction {crop_fraction} is not in (0, 1]")
        self.image_size, self.crop_fraction = int(image_size), float(crop_fraction)
        self.value_range = None if value_range is None else check_value_range(value_range)

    def __call__(self, record):
        image = to_rgb(record["image"])
        h, w = image.shape[:2]
        side = min(h, w) * self.crop_fraction  # Region (in input pixels) that becomes the S x S output.
        x0, y0 = (w - side) / 2, (h - side) / 2
        if (h, w) != (self.image_size, self.image_size) or self.crop_fraction != 1.0:
            image = _resize(image, self.image_size, (x0, y0, x0 + side, y0 + side))
        return _passthrough(record, {"image": _scale(image, self.value_range), "label": np.int32(record["label"])})


def from_config(pp_config, image_size: int):
    """`(TrainPreprocess, EvalPreprocess)` from `config.pp` (keys: train_crop, crop_area_min, pad, flip,
    eval_crop_fraction, value_range, randaug_layers, randaug_magnitude), both with uint8 `[S, S, 3]` output: the
    trainer scales to `pp.value_range` on the device (`to_value_range`).

    Raises:
      ValueError: a bad `pp.*` value, naming the key.
    """
    check_value_range(pp_config.get("value_range", (-1.0, 1.0)))
    train = TrainPreprocess(image_size, pp_config.get("train_crop", "inception"),
                            pp_config.get("crop_area_min", 0.05), pp_config.get("pad", 4),
                            pp_config.get("flip", True), None, pp_config.get("randaug_layers", 0),
                            pp_config.get("randaug_magnitude", 10))
    return train, EvalPreprocess(image_size, pp_config.get("eval_crop_fraction", 0.875), None)
