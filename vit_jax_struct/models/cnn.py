"""CNN baselines with the ViT's API: ResNet-18 and VGG-19 (CIFAR-style, 32 px), ResNet-50 (ImageNet-style).

Every model is called as `(images [B, H, W, C], train, return_attention) -> (logits [B, classes] float32, out)`;
`out` holds `stem`, one `blockXX` entry per residual unit / conv layer in forward order (`[B, h, w, C]`),
`pre_logits` (`[B, C]`, after global average pooling) and `logits`, so CKA code treats CNNs and ViTs alike.
`return_attention` is accepted and ignored (no attention).

- ResNet: He et al. 2016 ("Deep Residual Learning", CVPR), v1 post-activation units. CIFAR-style ResNet-18: 3x3
  stem, no max-pool, BasicBlocks [2, 2, 2, 2] (11.2 M parameters with 10 classes). ImageNet-style ResNet-50: 7x7/2
  stem + 3x3/2 max-pool, bottlenecks [3, 4, 6, 3] (25.6 M with 1000 classes).
- `norm='group'` + `weight_standardization=True` is the BiT choice (Kolesnikov et al. 2020 §3.1; Qiao et al. 2019):
  GroupNorm with 32 groups and weight-standardized convolutions, no batch statistics.
- VGG-19: Simonyan & Zisserman 2015, configuration E with BatchNorm (Ioffe & Szegedy 2015), CIFAR head = one Dense
  on the 1x1x512 output (20.0 M parameters with 10 classes).

With `norm='batch'` the models keep running averages in the `batch_stats` collection (momentum 0.9); in training
the statistics are over the global batch (jit's SPMD partitioning makes the mean a cross-device reduction).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

Dtype = Any
NORMS = ("batch", "group")


class StdConv(nn.Conv):
    """Conv with weight standardization: the kernel is normalised to zero mean, unit variance per output channel."""

    def param(self, name, *args, **kwargs):
        p = super().param(name, *args, **kwargs)
        if name == "kernel":
            mean = jnp.mean(p, axis=(0, 1, 2), keepdims=True)
            var = jnp.var(p, axis=(0, 1, 2), keepdims=True)
            p = (p - mean) / jnp.sqrt(var + 1e-10)
        return p


def _norm(kind: str, train: bool, dtype, name: str, zero_init: bool = False):
    scale_init = nn.initializers.zeros if zero_init else nn.initializers.ones
    if kind == "batch":
        return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=dtype,
                            scale_init=scale_init, name=name)
    if kind == "group":
        return nn.GroupNorm(num_groups=32, epsilon=1e-5, dtype=dtype, scale_init=scale_init, name=name)
    raise ValueError(f"model.norm {kind!r} is not one of {NORMS}")


class _Unit(nn.Module):
    """Residual unit: BasicBlock (two 3x3 convs) or Bottleneck (1x1, 3x3, 1x1 with 4x expansion)."""

    width: int
    strides: int
    bottleneck: bool
    norm: str
    ws: bool
    dtype: Dtype

    @nn.compact
    def __call__(self, x, train: bool):
        conv = lambda f, k, s, name: (StdConv if self.ws else nn.Conv)(
            f, (k, k), (s, s), padding="SAME" if k > 1 else "VALID", use_bias=False, dtype=self.dtype, name=name)
        out_ch = self.width * (4 if self.bottleneck else 1)
        if self.bottleneck:
            y = nn.relu(_norm(self.norm, train, self.dtype, "norm1")(conv(self.width, 1, 1, "conv1")(x)))
            y = nn.relu(_norm(self.norm, train, self.dtype, "norm2")(conv(self.width, 3, self.strides, "conv2")(y)))
            y = _norm(self.norm, train, self.dtype, "norm3", zero_init=True)(conv(out_ch, 1, 1, "conv3")(y))
        else:
            y = nn.relu(_norm(self.norm, train, self.dtype, "norm1")(conv(self.width, 3, self.strides, "conv1")(x)))
            y = _norm(self.norm, train, self.dtype, "norm2", zero_init=True)(conv(self.width, 3, 1, "conv2")(y))
        if x.shape[-1] != out_ch or self.strides != 1:
            x = _norm(self.norm, train, self.dtype, "proj_norm")(conv(out_ch, 1, self.strides, "proj")(x))
        return nn.relu(x + y)


def _gap_head(x, out: dict, num_classes, dtype):
    """Global average pool `[B, h, w, C] -> pre_logits [B, C]`, then the `head` Dense (call inside a compact method)."""
    x = jnp.mean(x, axis=(1, 2))
    out["pre_logits"] = x
    if num_classes:
        x = nn.Dense(num_classes, dtype=dtype, name="head")(x)
    out["logits"] = x.astype(jnp.float32)
    return out["logits"], out


RESNETS = {18: ((2, 2, 2, 2), False), 34: ((3, 4, 6, 3), False), 50: ((3, 4, 6, 3), True),
           101: ((3, 4, 23, 3), True), 152: ((3, 8, 36, 3), True)}


class ResNet(nn.Module):
    """ResNet-{18,34,50,101,152}; `stem='cifar'` (3x3/1, no pool) or `'imagenet'` (7x7/2 + max-pool 3x3/2).

    Fields: `num_classes`, `depth`, `stem`, `width` (first stage channels, 64), `norm` ('batch'|'group'),
    `weight_standardization`, `dtype`.

    Raises:
      ValueError: unknown depth, stem or norm.
    """

    num_classes: int | None
    depth: int = 18
    stem: str = "cifar"
    width: int = 64
    norm: str = "batch"
    weight_standardization: bool = False
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, images, *, train: bool = False, return_attention: bool = False):
        del return_attention
        if self.depth not in RESNETS:
            raise ValueError(f"model.depth {self.depth} is not one of {sorted(RESNETS)} for a ResNet")
        if self.stem not in ("cifar", "imagenet"):
            raise ValueError(f"model.stem {self.stem!r} is not one of 'cifar', 'imagenet'")
        stages, bottleneck = RESNETS[self.depth]
        conv = StdConv if self.weight_standardization else nn.Conv
        x = images.astype(self.dtype)
        if self.stem == "cifar":
            x = conv(self.width, (3, 3), padding="SAME", use_bias=False, dtype=self.dtype, name="stem_conv")(x)
        else:
            x = conv(self.width, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], use_bias=False, dtype=self.dtype,
                     name="stem_conv")(x)
        x = nn.relu(_norm(self.norm, train, self.dtype, "stem_norm")(x))
        if self.stem == "imagenet":
            x = nn.max_pool(x, (3, 3), (2, 2), padding=[(1, 1), (1, 1)])
        out = {"stem": x}
        i = 0
        for s, n_units in enumerate(stages):
            for u in range(n_units):
                strides = 2 if s > 0 and u == 0 else 1
                x = _Unit(self.width * 2 ** s, strides, bottleneck, self.norm, self.weight_standardization,
                          self.dtype, name=f"stage{s + 1}_unit{u + 1}")(x, train)
                out[f"block{i:02d}"] = x
                i += 1
        return _gap_head(x, out, self.num_classes, self.dtype)


VGG19 = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")


class VGG(nn.Module):
    """VGG-19 with BatchNorm for 32-px images (`config E`); five 2x2 max-pools leave `[B, 1, 1, 512]`.

    Fields: `num_classes`, `layers` (channels of the standard network, "M" = max-pool), `width` (channels of the
    first stage; every layer is scaled by `width / 64`, so 64 is the standard VGG-19 and 16 a thin one for CPUs),
    `norm`, `dtype`.
    """

    num_classes: int | None
    layers: tuple = VGG19
    width: int = 64
    norm: str = "batch"
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, images, *, train: bool = False, return_attention: bool = False):
        del return_attention
        x = images.astype(self.dtype)
        out, i = {}, 0
        for layer in self.layers:
            if layer == "M":
                x = nn.max_pool(x, (2, 2), (2, 2))
                continue
            channels = max(1, int(layer) * self.width // 64)
            x = nn.Conv(channels, (3, 3), padding="SAME", dtype=self.dtype, name=f"conv{i}")(x)
            x = nn.relu(_norm(self.norm, train, self.dtype, f"norm{i}")(x))
            out["stem" if i == 0 else f"block{i - 1:02d}"] = x
            i += 1
        return _gap_head(x, out, self.num_classes, self.dtype)
