"""Batch augmentations inside the jitted train step: uint8 -> value_range scaling, mixup and CutMix.

Mixup (Zhang et al. 2018, "mixup: Beyond empirical risk minimization", §2): `x = λ x_i + (1 - λ) x_j`,
`y = λ y_i + (1 - λ) y_j`, λ ~ Beta(α, α). CutMix (Yun et al. 2019, "CutMix", §3.1, Eq. 1–2): a box of area
fraction `1 - λ` (λ ~ Beta(α, α)), centred uniformly, is pasted from x_j; λ is then corrected to the box's clipped
area. As in big_vision's `utils.mixup` (which AugReg used, with p = α), one λ is drawn per batch and the partner of
example i is example i - 1 (`jnp.roll` over the global batch). With both α > 0, each batch uses CutMix with
probability `switch_prob`, else mixup (timm's convention); `prob` is the probability that a batch is mixed at all.

Why in the step, not on the host: batches travel to the devices as uint8 (4x less traffic than float32), and a
mixup blend is no longer uint8; on the device it costs one elementwise pass. The key is
`fold_in(fold_in(key(config.seed), 2), step)` (streams 0 and 1 are init and dropout, see `train/trainer.py`), so the
mixing is a function of (seed, step) alone: nothing to checkpoint, and a resumed run mixes exactly as the
uninterrupted one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from vit_jax_struct.data import preprocess


def check_config(mixup_config) -> None:
    """Validates `config.mixup` (None or missing keys: off).

    Raises:
      ValueError: alpha or cutmix_alpha negative, or prob / switch_prob outside [0, 1], naming the key and value.
    """
    m = dict(mixup_config or {})
    for key in ("alpha", "cutmix_alpha"):
        v = m.get(key, 0.0)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"mixup.{key} {v!r} must be a number ≥ 0 (0: off; AugReg's mixup uses 0.2, 0.5, 0.8)")
    for key in ("prob", "switch_prob"):
        v = m.get(key, 1.0 if key == "prob" else 0.5)
        if not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
            raise ValueError(f"mixup.{key} {v!r} is not a probability in [0, 1]")


def cutmix_mask(key, height: int, width: int, lam):
    """Box mask `[H, W]` bool (True: take the partner's pixel) of area ≈ `(1 - lam) H W`, and the exact kept fraction.

    The box has sides `round(H sqrt(1 - lam))` x `round(W sqrt(1 - lam))`, centre uniform over the pixels, clipped at
    the borders (Yun et al. 2019, Eq. 2); the returned λ is `1 - box area / (H W)` after clipping.
    """
    ky, kx = jax.random.split(key)
    r = jnp.sqrt(1.0 - lam)
    ch, cw = jnp.round(height * r).astype(jnp.int32), jnp.round(width * r).astype(jnp.int32)
    cy, cx = jax.random.randint(ky, (), 0, height), jax.random.randint(kx, (), 0, width)
    y0, y1 = jnp.clip(cy - ch // 2, 0, height), jnp.clip(cy + ch - ch // 2, 0, height)
    x0, x1 = jnp.clip(cx - cw // 2, 0, width), jnp.clip(cx + cw - cw // 2, 0, width)
    yy, xx = jnp.arange(height)[:, None], jnp.arange(width)[None, :]
    mask = (yy >= y0) & (yy < y1) & (xx >= x0) & (xx < x1)
    return mask, 1.0 - ((y1 - y0) * (x1 - x0)).astype(jnp.float32) / (height * width)


def mix_batch(key, images, labels, num_classes: int, alpha: float = 0.0, cutmix_alpha: float = 0.0,
              prob: float = 1.0, switch_prob: float = 0.5):
    """Mixup / CutMix of a batch (jit-compatible).

    Args:
      key: a JAX PRNG key (one draw per batch).
      images: float `[B, H, W, C]`.
      labels: int `[B]` class indices, or float `[B, K]` targets.
      num_classes: K.
      alpha, cutmix_alpha: Beta parameters of mixup and CutMix (0: that one off).
      prob: probability that the batch is mixed; switch_prob: with both on, probability of CutMix.

    Returns:
      `(images [B, H, W, C] same dtype, targets [B, K] float32)`; every targets row sums to 1 (for one-hot inputs).
    """
    targets = labels.astype(jnp.float32) if labels.ndim == 2 else jax.nn.one_hot(labels, num_classes)
    if not (alpha > 0 or cutmix_alpha > 0) or prob <= 0:
        return images, targets
    k_apply, k_switch, k_mix, k_cut, k_box = jax.random.split(key, 5)
    partner_x, partner_y = jnp.roll(images, 1, axis=0), jnp.roll(targets, 1, axis=0)
    h, w = images.shape[1:3]
    lam_mix = jax.random.beta(k_mix, alpha, alpha) if alpha > 0 else jnp.float32(1.0)
    mixed = lam_mix.astype(images.dtype) * images + (1 - lam_mix).astype(images.dtype) * partner_x
    if cutmix_alpha > 0:
        mask, lam_cut = cutmix_mask(k_box, h, w, jax.random.beta(k_cut, cutmix_alpha, cutmix_alpha))
        cut = jnp.where(mask[None, :, :, None], partner_x, images)
        use_cut = (jax.random.uniform(k_switch) < switch_prob) if alpha > 0 else jnp.bool_(True)
        mixed = jnp.where(use_cut, cut, mixed)
        lam = jnp.where(use_cut, lam_cut, lam_mix)
    else:
        lam = lam_mix
    apply = jax.random.uniform(k_apply) < prob
    lam = jnp.where(apply, lam, 1.0).astype(jnp.float32)
    out = jnp.where(apply, mixed, images)
    return out, lam * targets + (1.0 - lam) * partner_y


def make_batch_transform(config, num_classes: int):
    """`(batch, step) -> batch` for the jitted train step: scales uint8 images to `config.pp.value_range`
    (`preprocess.to_value_range`) and, when `config.mixup` is on, mixes them; `"label"` then becomes float
    targets `[B, K]` (`optim.classification_loss` takes either).

    Raises:
      ValueError: a bad `config.mixup` value (`check_config`).
    """
    m = dict(config.get("mixup") or {})
    check_config(m)
    alpha, cutmix_alpha = float(m.get("alpha", 0.0)), float(m.get("cutmix_alpha", 0.0))
    prob, switch_prob = float(m.get("prob", 1.0)), float(m.get("switch_prob", 0.5))
    value_range = preprocess.input_scaling(config.pp)
    root = jax.random.fold_in(jax.random.key(config.seed), 2)
    on = (alpha > 0 or cutmix_alpha > 0) and prob > 0

    def transform(batch, step):
        images = preprocess.to_value_range(batch["image"], value_range, jnp)
        if not on:
            return {**batch, "image": images}
        images, targets = mix_batch(jax.random.fold_in(root, step), images, batch["label"], num_classes, alpha,
                                    cutmix_alpha, prob, switch_prob)
        return {**batch, "image": images, "label": targets}

    return transform
