"""RandAugment on uint8 images with numpy + Pillow, per example, randomness from grain's per-example generator.

RandAugment (Cubuk et al. 2020, "RandAugment: Practical automated data augmentation with a reduced search space",
§3): `num_layers` times, pick one of the ops below uniformly at random and apply it at the fixed `magnitude`.
The op list and the magnitude -> argument maps are those of TensorFlow's `autoaugment.distort_image_with_randaugment`
(tensorflow/tpu EfficientNet code), which big_vision's `randaug(2, 15)` and therefore AugReg (Steiner et al. 2022,
"How to train your ViT?", §3.3, App. A) use; written here from those definitions, not copied. Magnitudes are on
TF's scale, where 10 is `_MAX_LEVEL` and AugReg uses 10, 15 and 20. As in TF:

  * every selected op is applied (no per-op probability),
  * `Solarize`'s threshold is `magnitude / 10 * 256`, so above magnitude 10 it changes nothing, and `Posterize`
    keeps `int(magnitude / 10 * 4)` bits, so a larger magnitude posterizes *less* (both are TF's behaviour, kept
    so that `randaug(2, 15)` means what it means in AugReg),
  * geometric ops use nearest-neighbour sampling and fill uncovered pixels with grey 128.

One deliberate difference: TF's constants (translation 100 px, cutout half-size 40 px) are for 224-px images; here
they scale with the image side (`side / 224`), identical at 224 px and still sensible for 32-px CIFAR.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

_MAX_LEVEL = 10.0
_FILL = (128, 128, 128)
OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color", "Contrast", "Brightness",
       "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout", "SolarizeAdd")


def _blend(degenerate, image: np.ndarray, factor: float) -> np.ndarray:
    """`degenerate + factor * (image - degenerate)`, clipped to [0, 255], truncated to uint8 (TF's `blend`)."""
    d = np.asarray(degenerate, np.float32)
    return np.clip(d + factor * (image.astype(np.float32) - d), 0.0, 255.0).astype(np.uint8)


def _grey(image: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma (TF's `rgb_to_grayscale` weights) `[H, W]` float32."""
    return image.astype(np.float32) @ np.asarray([0.2989, 0.5870, 0.1140], np.float32)


def autocontrast(image):
    """Per channel, stretch [min, max] to [0, 255] (channels with max == min are kept)."""
    x = image.astype(np.float32)
    lo, hi = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    scale = np.where(hi > lo, 255.0 / np.maximum(hi - lo, 1e-6), 1.0)
    out = np.where(hi > lo, (x - lo) * scale, x)
    return np.clip(out, 0, 255).astype(np.uint8)


def equalize(image):
    """Per-channel histogram equalization (PIL's / TF's lookup table: cumulative histogram, step excludes the last
    non-empty bin)."""
    out = np.empty_like(image)
    for c in range(3):
        ch = image[..., c]
        hist = np.bincount(ch.ravel(), minlength=256)
        nonzero = hist[hist > 0]
        step = (nonzero.sum() - nonzero[-1]) // 255
        if step == 0:
            out[..., c] = ch
            continue
        lut = (np.cumsum(hist) + step // 2) // step
        lut = np.clip(np.concatenate([[0], lut[:-1]]), 0, 255).astype(np.uint8)
        out[..., c] = lut[ch]
    return out


def invert(image):
    return 255 - image


def posterize(image, bits: int):
    """Keep the top `bits` bits of each value."""
    shift = 8 - int(np.clip(bits, 0, 8))
    return ((image >> shift) << shift).astype(np.uint8)


def solarize(image, threshold: int):
    """Invert values ≥ `threshold`."""
    return np.where(image < threshold, image, 255 - image).astype(np.uint8)


def solarize_add(image, addition: int, threshold: int = 128):
    """Add `addition` (clipped to 255) to values < `threshold`."""
    added = np.clip(image.astype(np.int32) + addition, 0, 255).astype(np.uint8)
    return np.where(image < threshold, added, image)


def color(image, factor: float):
    """Saturation: blend with the grey image (0: grey, 1: unchanged)."""
    return _blend(np.repeat(_grey(image).astype(np.uint8)[..., None], 3, -1), image, factor)


def contrast(image, factor: float):
    """Blend with a constant image of the mean grey level (0: flat, 1: unchanged)."""
    return _blend(np.float32(_grey(image).astype(np.uint8).mean()), image, factor)


def brightness(image, factor: float):
    """Blend with black (0: black, 1: unchanged)."""
    return _blend(np.float32(0.0), image, factor)


def sharpness(image, factor: float):
    """Blend with the image smoothed by [[1,1,1],[1,5,1],[1,1,1]]/13 on its interior (border pixels unchanged)."""
    x = image.astype(np.float32)
    if min(image.shape[:2]) < 3:
        return image
    k = np.asarray([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / 13.0
    h, w = image.shape[:2]
    smooth = sum(k[i, j] * x[i:h - 2 + i, j:w - 2 + j] for i in range(3) for j in range(3))
    degenerate = x.copy()
    degenerate[1:-1, 1:-1] = np.clip(np.round(smooth), 0, 255)
    return _blend(degenerate.astype(np.uint8), image, factor)


def _affine(image, coeffs):
    """Output pixel (x, y) takes input pixel (a x + b y + c, d x + e y + f); nearest, grey fill."""
    img = Image.fromarray(image)
    return np.asarray(img.transform(img.size, Image.AFFINE, coeffs, resample=Image.NEAREST, fillcolor=_FILL))


def rotate(image, degrees: float):
    """Rotate counter-clockwise by `degrees` about the centre; nearest, grey fill."""
    return np.asarray(Image.fromarray(image).rotate(degrees, resample=Image.NEAREST, fillcolor=_FILL))


def shear_x(image, level: float):
    return _affine(image, (1.0, level, 0.0, 0.0, 1.0, 0.0))


def shear_y(image, level: float):
    return _affine(image, (1.0, 0.0, 0.0, level, 1.0, 0.0))


def translate_x(image, pixels: float):
    return _affine(image, (1.0, 0.0, -pixels, 0.0, 1.0, 0.0))


def translate_y(image, pixels: float):
    return _affine(image, (1.0, 0.0, 0.0, 0.0, 1.0, -pixels))


def cutout(image, half: int, rng: np.random.Generator):
    """Fill a (2 half)² square centred at a uniform random pixel (clipped at the borders) with grey 128."""
    h, w = image.shape[:2]
    cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
    out = image.copy()
    out[max(cy - half, 0):min(cy + half, h), max(cx - half, 0):min(cx + half, w)] = _FILL
    return out


def apply_op(name: str, image: np.ndarray, magnitude: float, rng: np.random.Generator) -> np.ndarray:
    """Applies RandAugment op `name` (one of `OPS`) at `magnitude` to uint8 `[H, W, 3]`; returns uint8 `[H, W, 3]`.

    Signed ops (Rotate, Shear*, Translate*) draw their sign from `rng` (probability 1/2), Cutout its centre.

    Raises:
      ValueError: unknown op name.
    """
    m = magnitude / _MAX_LEVEL
    scale = min(image.shape[:2]) / 224.0

    def sign():
        return -1.0 if rng.uniform() < 0.5 else 1.0

    if name == "AutoContrast":
        return autocontrast(image)
    if name == "Equalize":
        return equalize(image)
    if name == "Invert":
        return invert(image)
    if name == "Rotate":
        return rotate(image, sign() * m * 30.0)
    if name == "Posterize":
        return posterize(image, int(m * 4))
    if name == "Solarize":
        return solarize(image, int(m * 256))
    if name == "SolarizeAdd":
        return solarize_add(image, int(m * 110))
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        fn = {"Color": color, "Contrast": contrast, "Brightness": brightness, "Sharpness": sharpness}[name]
        return fn(image, m * 1.8 + 0.1)
    if name == "ShearX":
        return shear_x(image, sign() * m * 0.3)
    if name == "ShearY":
        return shear_y(image, sign() * m * 0.3)
    if name == "TranslateX":
        return translate_x(image, sign() * m * 100.0 * scale)
    if name == "TranslateY":
        return translate_y(image, sign() * m * 100.0 * scale)
    if name == "Cutout":
        return cutout(image, int(m * 40.0 * scale), rng)
    raise ValueError(f"RandAugment op {name!r} is not one of {OPS}")


def check_randaugment(num_layers, magnitude) -> None:
    """Raises ValueError naming `pp.randaug_layers` / `pp.randaug_magnitude` unless 0 ≤ layers ≤ 10 (an int) and
    0 ≤ magnitude ≤ 30."""
    if int(num_layers) != num_layers or not 0 <= num_layers <= 10:
        raise ValueError(f"pp.randaug_layers {num_layers!r} is not an integer in [0, 10] (0: no RandAugment; "
                         "AugReg uses 2)")
    if not (isinstance(magnitude, (int, float)) and 0 <= magnitude <= 30 and math.isfinite(magnitude)):
        raise ValueError(f"pp.randaug_magnitude {magnitude!r} is not a number in [0, 30] (TF scale, 10 = max "
                         "level; AugReg uses 10, 15 or 20)")


def randaugment(image: np.ndarray, num_layers: int, magnitude: float, rng: np.random.Generator) -> np.ndarray:
    """RandAugment(num_layers, magnitude) of uint8 `[H, W, 3]` -> uint8 `[H, W, 3]` (Cubuk et al. 2020 §3).

    Deterministic given the state of `rng` (grain's per-example generator, derived from `config.seed` and the
    example's position in the stream), so a resumed run sees the same augmented images.

    Raises:
      ValueError: num_layers or magnitude out of range (see `check_randaugment`).
    """
    check_randaugment(num_layers, magnitude)
    for _ in range(int(num_layers)):
        image = apply_op(OPS[int(rng.integers(len(OPS)))], image, float(magnitude), rng)
    return np.ascontiguousarray(image, np.uint8)
