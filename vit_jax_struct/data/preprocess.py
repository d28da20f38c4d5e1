"""Per-example image preprocessing (numpy + Pillow), run in grain's reader threads.

Train: a crop (`inception`: random area/aspect crop, Szegedy et al. 2015 §6 as in TF's
`sample_distorted_bounding_box`; `pad`: zero-pad then random crop, the CIFAR standard of He et al. 2016;
`none`), resize to `image_size`, random horizontal flip, scale to `value_range`.
Eval: resize so the central crop of `eval_crop_fraction` of the shorter side becomes `image_size`, center crop.
Outputs are `{"image": float32 [S, S, 3], "label": int32}`.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

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


def _scale(image: np.ndarray, value_range) -> np.ndarray:
    lo, hi = value_range
    return image.astype(np.float32) * ((hi - lo) / 255.0) + lo


def _passthrough(record, out):
    """Keeps the `skipped` flag of `sources.SkipUnreadable` records (the trainer counts it)."""
    if "skipped" in record:
        out["skipped"] = np.int32(record["skipped"])
    return out


class TrainPreprocess:
    """Random train transform; `(record, rng: np.random.Generator) -> {"image": float32 [S,S,3], "label": int32}`.

    Args:
      image_size: output side S in pixels.
      crop: one of `TRAIN_CROPS`.
      crop_area_min: smallest crop area fraction for `inception` (0.05 in the ViT/big_vision recipe).
      pad: padding in pixels (at output resolution) for the `pad` crop.
      flip: random horizontal flip with probability 0.5.
      value_range: (low, high) of the output pixel values.

    Raises:
      ValueError: unknown crop, or crop_area_min outside (0, 1].
    """

    def __init__(self, image_size: int, crop: str = "inception", crop_area_min: float = 0.05, pad: int = 4,
                 flip: bool = True, value_range=(-1.0, 1.0)):
        if crop not in TRAIN_CROPS:
            raise ValueError(f"pp.train_crop {crop!r} is not one of {TRAIN_CROPS}")
        if not 0.0 < crop_area_min <= 1.0:
            raise ValueError(f"pp.crop_area_min {crop_area_min} is not in (0, 1]")
        self.image_size, self.crop, self.crop_area_min = int(image_size), crop, float(crop_area_min)
        self.pad, self.flip, self.value_range = int(pad), bool(flip), tuple(value_range)

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
        return _passthrough(record, {"image": _scale(image, self.value_range), "label": np.int32(record["label"])})


class EvalPreprocess:
    """Deterministic eval transform: resize (shorter side to S / crop_fraction), center crop S x S, scale.

    `crop_fraction=1.0` resizes the central square of the image to S x S (use it for 32-px CIFAR and digits).

    Raises:
      ValueError: crop_fraction outside (0, 1].
    """

    def __init__(self, image_size: int, crop_fraction: float = 0.875, value_range=(-1.0, 1.0)):
        if not 0.0 < crop_fraction <= 1.0:
            raise ValueError(f"pp.eval_crop_fraction {crop_fraction} is not in (0, 1]")
        self.image_size, self.crop_fraction, self.value_range = int(image_size), float(crop_fraction), value_range

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
    eval_crop_fraction, value_range)."""
    vr = tuple(pp_config.get("value_range", (-1.0, 1.0)))
    train = TrainPreprocess(image_size, pp_config.get("train_crop", "inception"),
                            pp_config.get("crop_area_min", 0.05), pp_config.get("pad", 4),
                            pp_config.get("flip", True), vr)
    return train, EvalPreprocess(image_size, pp_config.get("eval_crop_fraction", 0.875), vr)
