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

import io
import math

import numpy as np
from PIL import Image

from vit_jax_struct.data import augment
from vit_jax_struct.data.sources import JPEG_DECODERS, decode_image, decode_jpeg_simplejpeg, image_to_array, to_rgb

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


# `pp.normalize`: the per-channel input normalisation of published PyTorch-trained models, `(mean, std)` in RGB order
# on pixels in [0, 1] (`(uint8 / 255 - mean) / std`); the constants of timm's `timm.data.constants`.
NORMALIZATIONS = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # torchvision's: DeiT, DeiT III, DINOv2, BEiT
    "clip": ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),  # OpenAI / OpenCLIP
}


def input_scaling(pp) -> tuple:
    """How a run's uint8 pixels become the model's input: `pp.value_range` as `(low, high)` floats, or, when
    `pp.normalize` names one of `NORMALIZATIONS`, its per-channel `((mean_r, mean_g, mean_b), (std_r, std_g, std_b))`.
    `pp`: `config.pp` (a ConfigDict or a plain dict, e.g. a run's config.json).

    Raises:
      ValueError: `pp.normalize` is not "" or a name of `NORMALIZATIONS`, or `pp.value_range` is not a pair
        low < high.
    """
    name = pp.get("normalize", "") or ""
    if name:
        if name not in NORMALIZATIONS:
            raise ValueError(f"pp.normalize {name!r} is not one of '', {', '.join(map(repr, NORMALIZATIONS))}")
        return NORMALIZATIONS[name]
    return check_value_range(pp.get("value_range", (-1.0, 1.0)))


def _per_channel(value_range) -> bool:
    return np.ndim(value_range[0]) > 0


def to_value_range(images, value_range, xp=np):
    """uint8 pixels (any shape ending in channels, e.g. `[B, H, W, 3]`) -> float32 model input.

    `value_range`: `(lo, hi)` gives `x * (hi - lo) / 255 + lo`; per-channel `(mean, std)` triples (`input_scaling`
    of `pp.normalize`) give `(x / 255 - mean) / std`, computed as one multiply-add per channel.
    `xp` is `numpy` (host) or `jax.numpy` (inside the jitted step, where the trainer scales uint8 batches); both give
    the same float32 values up to one rounding of the multiply-add. Float inputs are returned unchanged (already
    scaled), so float batches still work.
    """
    if images.dtype != xp.uint8:
        return images
    if _per_channel(value_range):
        mean, std = (np.asarray(v, np.float64) for v in value_range)
        scale, shift = (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)
        return images.astype(xp.float32) * xp.asarray(scale) + xp.asarray(shift)
    lo, hi = (float(v) for v in value_range)
    return images.astype(xp.float32) * xp.float32((hi - lo) / 255.0) + xp.float32(lo)


def check_value_range(value_range) -> tuple:
    """`(lo, hi)` floats with lo < hi, or per-channel `(mean, std)` triples with std > 0 (`input_scaling`), as tuples.

    Raises:
      ValueError: naming `pp.value_range` otherwise.
    """
    try:
        if len(value_range) == 2 and _per_channel(value_range):
            mean, std = (tuple(float(x) for x in v) for v in value_range)
            if len(mean) == len(std) == 3 and min(std) > 0:
                return mean, std
            raise ValueError
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise ValueError(f"pp.value_range {value_range!r} is not a pair (low, high) of numbers (or a per-channel "
                         "(mean, std) pair of triples with std > 0)") from None
    if not lo < hi:
        raise ValueError(f"pp.value_range {value_range!r} needs low < high")
    return lo, hi


def _scale(image: np.ndarray, value_range) -> np.ndarray:
    return image if value_range is None else to_value_range(image, value_range)


def _record_image(record, jpeg_decoder: str = "pillow") -> np.ndarray:
    """uint8 `[H, W, 3]` of a record: its `"image"`, or its `"encoded"` file decoded at full size (lazy sources)."""
    if "encoded" in record:
        return decode_image(record["encoded"], record.get("path", "image"), jpeg_decoder)
    return to_rgb(record["image"])


def _draft_crop(record, image_size: int, rng, area_min: float, draft: bool, jpeg_decoder: str = "pillow"):
    """Inception crop of a lazy record `{"encoded": bytes, "path": str}` -> uint8 `[S, S, 3]`.

    The crop box is sampled in full-resolution coordinates from the header's size (`Image.open` reads only the
    header), with the same rng draws as the decoded path. With `draft` and a JPEG whose crop is ≥ 2x the output side
    in both directions, `Image.draft` makes libjpeg decode at 1/2, 1/4 or 1/8 scale (the largest reduction that keeps
    the cropped region ≥ S px on both sides); the box is scaled to the reduced image before the bilinear resize.
    `jpeg_decoder="simplejpeg"` decodes JPEGs with libjpeg-turbo's TurboJPEG API instead (the same pixels at full
    size; reduced decoding then picks among all of libjpeg-turbo's M/8 scaling factors, again only when the crop is
    ≥ 2x the output side), falling back to Pillow for files it cannot decode.
    """
    name = record.get("path", "image")
    try:
        img = Image.open(io.BytesIO(record["encoded"]))
    except Exception as e:  # PIL raises several types; one clear error naming the file.
        raise ValueError(f"cannot decode image file {name!r}: {type(e).__name__}: {e}") from e
    w, h = img.size
    box = inception_crop_box(h, w, rng, area_range=(area_min, 1.0))
    cw, ch = box[2] - box[0], box[3] - box[1]
    if jpeg_decoder == "simplejpeg" and img.format == "JPEG":
        reduce = draft and min(cw, ch) >= 2 * image_size
        image = decode_jpeg_simplejpeg(record["encoded"], math.ceil(w * image_size / cw) if reduce else 0,
                                       math.ceil(h * image_size / ch) if reduce else 0)
        if image is not None:
            fx, fy = image.shape[1] / w, image.shape[0] / h
            return _resize(image, image_size, (box[0] * fx, box[1] * fy, box[2] * fx, box[3] * fy))
    if draft and img.format == "JPEG" and min(cw, ch) >= 2 * image_size:
        # draft picks scale 1/k with k <= min(w // req_w, h // req_h): the reduced crop is >= S on both sides.
        img.draft("RGB", (math.ceil(w * image_size / cw), math.ceil(h * image_size / ch)))
    if img.mode not in ("RGB", "L", "CMYK", "YCbCr"):  # high-bit or alpha modes: the decoder's conversions
        image = image_to_array(img, name)
        rw, rh = image.shape[1], image.shape[0]
    else:  # resize the decoded Pillow image directly (no numpy round trip; the same pixels as decode_image's)
        try:
            img.load()
            img = img if img.mode == "RGB" else img.convert("RGB")
        except Exception as e:  # PIL raises several types; one clear error naming the file.
            raise ValueError(f"cannot decode image file {name!r}: {type(e).__name__}: {e}") from e
        image, (rw, rh) = None, img.size
    if (rw, rh) != (w, h):
        fx, fy = rw / w, rh / h
        box = (box[0] * fx, box[1] * fy, box[2] * fx, box[3] * fy)
    if image is not None:
        return _resize(image, image_size, box)
    return np.asarray(img.resize((image_size, image_size), Image.BILINEAR, box=box), np.uint8)


def _check_decoder(jpeg_decoder: str) -> str:
    if jpeg_decoder not in JPEG_DECODERS:
        raise ValueError(f"pp.jpeg_decoder {jpeg_decoder!r} is not one of {JPEG_DECODERS}")
    return jpeg_decoder


def _passthrough(record, out):
    """Keeps the `skipped` flag of `sources.SkipUnreadable` records (the trainer counts it)."""
    if "skipped" in record:
        out["skipped"] = np.int32(record["skipped"])
    return out


class TrainPreprocess:
    """Random train transform; `(record, rng: np.random.Generator) -> {"image": float32 [S,S,3], "label": int32}`.

    All randomness comes from `rng` (grain's per-example generator), in the order crop, flip, RandAugment.

    Records are decoded `{"image": uint8 [H, W, C], "label"}` or lazy `{"encoded": bytes, "path", "label"}`
    (`sources.ImageFolderSource(lazy=True)`). A lazy JPEG with the inception crop and `jpeg_draft` is decoded at
    reduced size (`Image.draft`, libjpeg's DCT-domain 1/2, 1/4, 1/8 scaling) when the crop box is at least twice
    the output side: this is what makes it fast on large photos (a 2000x1500 photo cropped to 30 % of its area,
    ≈ 950 px, and resized to 224 decodes at 1/4 scale, a sixteenth of the pixels); ImageNet-size photos (≈ 500x375)
    rarely have a crop that large (3 % of the crops), so there it changes little. Drafted pixels differ from the
    full-size decode + bilinear resize by less than 1 uint8 level on average (0.3 on the test's photos; up to 2.9
    for the worst of 103 ImageNet photos, docs/input_pipeline.md): the reduced decode averages 2x2 / 4x4 / 8x8
    blocks in the DCT domain, i.e. it is an antialiased downscale, and Pillow's bilinear resize of a large crop
    also antialiases, with another filter; both are valid views of the same crop. The crop box, flip and
    RandAugment draws are the same as without the draft, so a run is still a deterministic function of the seed;
    `jpeg_draft=False` reproduces the decoded path bit for bit (tested in tests/data/test_jpeg_draft.py).

    Args:
      image_size: output side S in pixels.
      crop: one of `TRAIN_CROPS`.
      crop_area_min: smallest crop area fraction for `inception` (0.05 in the ViT/big_vision recipe).
      pad: padding in pixels (at output resolution) for the `pad` crop.
      flip: random horizontal flip with probability 0.5.
      value_range: (low, high) of the output pixel values; None: uint8 [S, S, 3] output, unscaled.
      randaug_layers, randaug_magnitude: RandAugment after the flip (AugReg's `randaug(2, 15)` is 2, 15); 0 layers:
        none. See `augment.randaugment`.
      jpeg_draft: reduced-size JPEG decoding of lazy records (above); `pp.jpeg_draft`.
      jpeg_decoder: "pillow" (default) or "simplejpeg" (libjpeg-turbo's TurboJPEG API: Pillow's pixels at full
        size), for JPEG records; `pp.jpeg_decoder`.

    Raises:
      ValueError: a lazy record that cannot be decoded (naming its path); unknown crop, crop_area_min outside
        (0, 1], bad value_range or RandAugment settings.
    """

    def __init__(self, image_size: int, crop: str = "inception", crop_area_min: float = 0.05, pad: int = 4,
                 flip: bool = True, value_range=(-1.0, 1.0), randaug_layers: int = 0,
                 randaug_magnitude: float = 10, jpeg_draft: bool = True, jpeg_decoder: str = "pillow"):
        if crop not in TRAIN_CROPS:
            raise ValueError(f"pp.train_crop {crop!r} is not one of {TRAIN_CROPS}")
        if not 0.0 < crop_area_min <= 1.0:
            raise ValueError(f"pp.crop_area_min {crop_area_min} is not in (0, 1]")
        self.image_size, self.crop, self.crop_area_min = int(image_size), crop, float(crop_area_min)
        augment.check_randaugment(randaug_layers, randaug_magnitude)
        self.pad, self.flip = int(pad), bool(flip)
        self.value_range = None if value_range is None else check_value_range(value_range)
        self.randaug_layers, self.randaug_magnitude = int(randaug_layers), float(randaug_magnitude)
        self.jpeg_draft = bool(jpeg_draft)
        self.jpeg_decoder = _check_decoder(jpeg_decoder)

    def __call__(self, record, rng: np.random.Generator):
        s = self.image_size
        if self.crop == "inception" and "encoded" in record:
            image = _draft_crop(record, s, rng, self.crop_area_min, self.jpeg_draft, self.jpeg_decoder)
        elif self.crop == "inception":
            image = to_rgb(record["image"])
            box = inception_crop_box(*image.shape[:2], rng, area_range=(self.crop_area_min, 1.0))
            image = _resize(image, s, box)
        else:
            image = _record_image(record, self.jpeg_decoder)
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

    def __init__(self, image_size: int, crop_fraction: float = 0.875, value_range=(-1.0, 1.0),
                 jpeg_decoder: str = "pillow"):
        if not 0.0 < crop_fraction <= 1.0:
            raise ValueError(f"pp.eval_crop_fraction {crop_fraction} is not in (0, 1]")
        self.image_size, self.crop_fraction = int(image_size), float(crop_fraction)
        self.jpeg_decoder = _check_decoder(jpeg_decoder)
        self.value_range = None if value_range is None else check_value_range(value_range)

    def __call__(self, record):
        image = _record_image(record, self.jpeg_decoder)
        h, w = image.shape[:2]
        side = min(h, w) * self.crop_fraction  # Region (in input pixels) that becomes the S x S output.
        x0, y0 = (w - side) / 2, (h - side) / 2
        if (h, w) != (self.image_size, self.image_size) or self.crop_fraction != 1.0:
            image = _resize(image, self.image_size, (x0, y0, x0 + side, y0 + side))
        return _passthrough(record, {"image": _scale(image, self.value_range), "label": np.int32(record["label"])})


def from_config(pp_config, image_size: int):
    """`(TrainPreprocess, EvalPreprocess)` from `config.pp` (keys: train_crop, crop_area_min, pad, flip,
    eval_crop_fraction, value_range, randaug_layers, randaug_magnitude, jpeg_draft, jpeg_decoder), both with uint8
    `[S, S, 3]`
    output: the trainer scales to `pp.value_range` on the device (`to_value_range`).

    Raises:
      ValueError: a bad `pp.*` value, naming the key.
    """
    check_value_range(pp_config.get("value_range", (-1.0, 1.0)))
    train = TrainPreprocess(image_size, pp_config.get("train_crop", "inception"),
                            pp_config.get("crop_area_min", 0.05), pp_config.get("pad", 4),
                            pp_config.get("flip", True), None, pp_config.get("randaug_layers", 0),
                            pp_config.get("randaug_magnitude", 10), pp_config.get("jpeg_draft", True),
                            pp_config.get("jpeg_decoder", "pillow"))
    return train, EvalPreprocess(image_size, pp_config.get("eval_crop_fraction", 0.875), None,
                                 pp_config.get("jpeg_decoder", "pillow"))
