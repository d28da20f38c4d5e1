"""BiT ResNet-v2 (Kolesnikov et al. 2020, "Big Transfer (BiT): General Visual Representation Learning", ECCV;
arXiv 1912.11370) and a loader for its published `.npz` checkpoints.

Architecture (BiT §3.1 and §4.1; He et al. 2016b "Identity Mappings in Deep Residual Networks" for the pre-activation
unit): every convolution is weight-standardised (Qiao et al. 2019, "Weight Standardization"; the kernel is shifted
and scaled to zero mean, unit variance per output channel over `[kh, kw, C_in]`), every normalisation is GroupNorm
with 32 groups (Wu & He 2018), no batch statistics anywhere.

    root_block   7x7/2 StdConv (width 64·k, zero padding 3) -> zero padding 1 -> 3x3/2 max-pool (no norm, no ReLU)
    block{s}     stage s = 1..4, units [3, 4, 6, 3] (R50), [3, 4, 23, 3] (R101), [3, 8, 36, 3] (R152); each unit a
      unit{u:02d}  pre-activation bottleneck with output width 256·k·2^(s−1) and middle width a quarter of it:
                   a: x' = ReLU(GN(x)); shortcut = proj(x') (1x1/stride StdConv, first unit of a stage) else x;
                      y = 1x1 StdConv(x')
                   b: y = 3x3/stride StdConv(ReLU(GN(y)))  (stride 2 in the first unit of stages 2-4; padding 1)
                   c: y = 1x1 StdConv(ReLU(GN(y)));  unit output = y + shortcut
    group_norm   ReLU(GN(x)) after the last unit, then global average pooling
    head         1x1 conv = Dense to the classes

The parameter tree mirrors the published layout, so names map one to one:

    published BiT .npz (BiT-M-R50x1.npz, ...)                    ResNetV2 params
    resnet/root_block/standardized_conv2d/kernel [7, 7, 3, 64k]  root_block/standardized_conv2d/kernel
    resnet/block{s}/unit{u:02d}/{a,b,c}/group_norm/{gamma,beta}  block{s}/unit{u:02d}/{a,b,c}/group_norm/{scale,bias}
    resnet/block{s}/unit{u:02d}/{a,b,c}/standardized_conv2d/kernel          same (without `resnet/`)
    resnet/block{s}/unit01/a/proj/standardized_conv2d/kernel                same
    resnet/group_norm/{gamma,beta}                                group_norm/{scale,bias}
    resnet/head/conv2d/kernel [1, 1, C, K], .../bias [K]         head/kernel [C, K], head/bias [K]

These are the names timm's `resnetv2._load_weights` reads (timm 1.0; checked against its source) and the keys of
the files at https://storage.googleapis.com/bit_models/ (BiT-S/BiT-M, e.g. `BiT-M-R50x1.npz`,
`BiT-M-R152x2-ILSVRC2012.npz`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax_struct.models import official

Dtype = Any
DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
PREFIX = "resnet/"
DEFAULT_REINIT = r"^head/"


class StdConv(nn.Module):
    """Weight-standardised convolution without bias (Qiao et al. 2019, Eq. 5; BiT §4.1): the kernel
    `[kh, kw, C_in, C_out]` becomes `(W − mean) / sqrt(var + eps)` over its first three axes before the conv.

    Call: `x [B, H, W, C_in] -> [B, H', W', C_out]`; explicit symmetric `padding` pixels (BiT's fixed padding, not
    "SAME", which pads a stride-2 conv asymmetrically). The kernel is stored float32; the conv runs in `dtype`.
    """

    features: int
    kernel_size: int
    strides: int = 1
    padding: int = 0
    eps: float = 1e-10
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        k = self.kernel_size
        w = self.param("kernel", nn.initializers.he_normal(), (k, k, x.shape[-1], self.features), jnp.float32)
        mean = jnp.mean(w, axis=(0, 1, 2), keepdims=True)
        var = jnp.var(w, axis=(0, 1, 2), keepdims=True)
        w = (w - mean) / jnp.sqrt(var + self.eps)
        p = self.padding
        return jax.lax.conv_general_dilated(
            x.astype(self.dtype), w.astype(self.dtype), (self.strides, self.strides), [(p, p), (p, p)],
            dimension_numbers=("NHWC", "HWIO", "NHWC"))


class _Proj(nn.Module):
    """The shortcut projection of a stage's first unit (`proj/standardized_conv2d`, 1x1/stride)."""

    features: int
    strides: int
    eps: float
    dtype: Dtype

    @nn.compact
    def __call__(self, x):
        return StdConv(self.features, 1, self.strides, 0, self.eps, self.dtype, name="standardized_conv2d")(x)


class _PreActConv(nn.Module):
    """`ReLU(GroupNorm(x))` then a StdConv (one of a/b/c of a unit); part `a` also returns the projected shortcut.

    Call: `x [B, H, W, C] -> (y [B, H', W', features], shortcut or None)`.
    """

    features: int
    kernel_size: int
    strides: int
    num_groups: int
    eps: float
    dtype: Dtype
    proj_features: int = 0
    proj_strides: int = 1

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.GroupNorm(num_groups=self.num_groups, epsilon=1e-5, dtype=self.dtype, name="group_norm")(x))
        shortcut = _Proj(self.proj_features, self.proj_strides, self.eps, self.dtype, name="proj")(x) \
            if self.proj_features else None
        y = StdConv(self.features, self.kernel_size, self.strides, self.kernel_size // 2, self.eps, self.dtype,
                    name="standardized_conv2d")(x)
        return y, shortcut


class PreActBottleneck(nn.Module):
    """Pre-activation bottleneck unit (He et al. 2016b Fig. 4e; BiT): `x [B, H, W, C] -> [B, H/s, W/s, out]`.

    The shortcut is `x` itself, or a 1x1/stride StdConv of the pre-activated `x` when the width or the resolution
    changes (the first unit of each stage).
    """

    out_features: int
    strides: int
    num_groups: int = 32
    eps: float = 1e-10
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        mid = self.out_features // 4
        needs_proj = self.strides != 1 or x.shape[-1] != self.out_features
        kw = dict(num_groups=self.num_groups, eps=self.eps, dtype=self.dtype)
        y, shortcut = _PreActConv(mid, 1, 1, proj_features=self.out_features if needs_proj else 0,
                                  proj_strides=self.strides, name="a", **kw)(x)
        y, _ = _PreActConv(mid, 3, self.strides, name="b", **kw)(y)
        y, _ = _PreActConv(self.out_features, 1, 1, name="c", **kw)(y)
        return y + (x.astype(y.dtype) if shortcut is None else shortcut)


class _Stage(nn.Module):
    units: int
    out_features: int
    strides: int
    num_groups: int
    eps: float
    dtype: Dtype

    @nn.compact
    def __call__(self, x, out: dict, first_index: int):
        for u in range(self.units):
            x = PreActBottleneck(self.out_features, self.strides if u == 0 else 1, self.num_groups, self.eps,
                                 self.dtype, name=f"unit{u + 1:02d}")(x)
            out[f"block{first_index + u:02d}"] = x
        return x


class _Root(nn.Module):
    width: int
    eps: float
    dtype: Dtype

    @nn.compact
    def __call__(self, x):
        x = StdConv(self.width, 7, 2, 3, self.eps, self.dtype, name="standardized_conv2d")(x)
        x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))  # zeros, as BiT ("fixed" padding), not −inf
        return nn.max_pool(x, (3, 3), (2, 2), padding="VALID")


class ResNetV2(nn.Module):
    """BiT ResNet-v2 with the project's model API (see the module docstring for the architecture and names).

    `(images [B, H, W, 3] float (BiT: values in [−1, 1]), train, return_attention) -> (logits [B, K] float32, out)`.
    `out`: `stem` (after the max-pool, `[B, H/4, W/4, 64k]`), `block00`, `block01`, … one per unit in forward order
    (`[B, h, w, C]`, the residual stream after the unit; `unit_names()` gives each one's `block{s}/unit{u}`), `encoded`
    (after the final GroupNorm + ReLU), `pre_logits` (`[B, C]`, global average pool) and `logits`.
    `train` and `return_attention` change nothing (no dropout, no batch statistics, no attention).

    Fields:
      num_classes: head size; 0/None: no head (logits = pre_logits).
      depth: 50, 101 or 152 (units per stage from `DEPTHS`), unless `units` is given.
      units: units per stage, e.g. `(1, 1, 1, 1)` for a tiny model; overrides `depth`.
      width_factor: k of ResNet-50x`k` (1, 2, 3, 4 in BiT): multiplies every width.
      width: stem width before the factor (64 in BiT); stage s outputs `4 · width · k · 2^(s−1)` channels.
      num_groups: GroupNorm groups (32 in BiT); every width must be divisible by it.
      ws_eps: epsilon of the weight standardisation (1e-10 in the original BiT code; timm uses 1e-8).
      dtype: compute dtype (parameters stay float32).

    Raises:
      ValueError: unknown depth, or widths not divisible by `num_groups`.
    """

    num_classes: int | None
    depth: int = 50
    units: Any = None
    width_factor: int = 1
    width: int = 64
    num_groups: int = 32
    ws_eps: float = 1e-10
    dtype: Dtype = jnp.float32

    def stage_units(self) -> tuple:
        if self.units:
            return tuple(int(u) for u in self.units)
        if self.depth not in DEPTHS:
            raise ValueError(f"model.depth {self.depth} is not one of {sorted(DEPTHS)} for a ResNetV2 "
                             "(or give model.units, e.g. (1, 1, 1, 1))")
        return DEPTHS[self.depth]

    def unit_names(self) -> dict:
        """`{"block00": "block1/unit01", …}`: the published name of each `out` entry."""
        names, i = {}, 0
        for s, n in enumerate(self.stage_units()):
            for u in range(n):
                names[f"block{i:02d}"] = f"block{s + 1}/unit{u + 1:02d}"
                i += 1
        return names

    @nn.compact
    def __call__(self, images, *, train: bool = False, return_attention: bool = False):
        del train, return_attention
        stages = self.stage_units()
        w = self.width * self.width_factor
        if w % self.num_groups:  # the narrowest GroupNorm input is stage 1's middle width, w
            raise ValueError(f"model width {self.width} x width_factor {self.width_factor} = {w} is not divisible "
                             f"by num_groups {self.num_groups}")
        x = _Root(w, self.ws_eps, self.dtype, name="root_block")(images.astype(self.dtype))
        out = {"stem": x}
        i = 0
        for s, n in enumerate(stages):
            x = _Stage(n, 4 * w * 2 ** s, 1 if s == 0 else 2, self.num_groups, self.ws_eps, self.dtype,
                       name=f"block{s + 1}")(x, out, i)
            i += n
        x = nn.relu(nn.GroupNorm(num_groups=self.num_groups, epsilon=1e-5, dtype=self.dtype, name="group_norm")(x))
        out["encoded"] = x
        x = jnp.mean(x, axis=(1, 2))
        out["pre_logits"] = x
        if self.num_classes:
            x = nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=nn.initializers.zeros, name="head")(x)
        out["logits"] = x.astype(jnp.float32)
        return out["logits"], out


# --- the published .npz layout -----------------------------------------------------------------------------------

_LEAF_RENAMES = {"gamma": "scale", "beta": "bias"}
_HEAD = re.compile(r"^head/conv2d/(kernel|bias)$")


def canonical_layout(flat: Mapping[str, Any]) -> dict:
    """Published BiT names (`resnet/…/group_norm/gamma`, `resnet/head/conv2d/kernel [1, 1, C, K]`) -> our parameter
    names (`…/group_norm/scale`, `head/kernel [C, K]`); see the module docstring. Keys without the `resnet/`
    prefix are accepted as well (files re-saved from our own parameters, see `to_bit_layout`).

    Raises:
      ValueError: names that collide after renaming.
    """
    flat = dict(flat)
    if any(k.startswith(PREFIX) for k in flat):
        flat = {(k[len(PREFIX):] if k.startswith(PREFIX) else k): v for k, v in flat.items()}
    out = {}
    for key, value in flat.items():
        *path, leaf = key.split("/")
        m, v = _HEAD.match(key), value
        if m:
            k = f"head/{m.group(1)}"
            if m.group(1) == "kernel" and np.ndim(v) == 4 and np.shape(v)[:2] == (1, 1):
                v = np.asarray(v)[0, 0]  # the 1x1-conv head is a Dense
        else:
            k = "/".join([*path, _LEAF_RENAMES.get(leaf, leaf)]) if path and path[-1] == "group_norm" else key
        if k in out:
            raise ValueError(f"checkpoint entries collide at {k!r} after renaming to the ResNetV2 layout")
        out[k] = v
    return out


def to_bit_layout(params: Mapping) -> dict[str, np.ndarray]:
    """Our ResNetV2 params -> flat published BiT names (`resnet/…`, `gamma`/`beta`, 1x1-conv head), for export and
    tests (the inverse of `canonical_layout`)."""
    out = {}
    for k, value in official.flatten(params).items():
        v = np.asarray(value)
        *path, leaf = k.split("/")
        if k == "head/kernel":
            out[PREFIX + "head/conv2d/kernel"] = v[None, None]
        elif k == "head/bias":
            out[PREFIX + "head/conv2d/bias"] = v
        elif path and path[-1] == "group_norm":
            out[PREFIX + "/".join([*path, {"scale": "gamma", "bias": "beta"}[leaf]])] = v
        else:
            out[PREFIX + k] = v
    return out


def is_bit_checkpoint(flat: Mapping) -> bool:
    """True if a flat checkpoint has BiT's names (a root block and `standardized_conv2d` kernels)."""
    return any("root_block/standardized_conv2d/kernel" in k for k in flat)


def load(checkpoint, init_params: Mapping, *, reinit: str | None = DEFAULT_REINIT) -> dict:
    """Loads a published BiT checkpoint into exactly the tree of `ResNetV2` parameters `init_params`.

    Args:
      checkpoint: an `.npz` path or URL (read through `etils.epath`, see `official.read_npz`) or a dict already
        read (flat '/'-keys or nested), in the published layout (module docstring).
      init_params: the model's `params`, initialised arrays (they supply re-initialised entries) or
        `jax.ShapeDtypeStruct`s (then nothing may need re-initialising).
      reinit: regex (`re.search`) on our '/'-joined parameter paths kept at their `init_params` value; matching
        checkpoint entries are dropped. Default `^head/`: a new head (the published heads have 21,843 or 1,000
        classes). None or "": load everything (shapes must match, the head included).

    Returns:
      nested dict with the tree of `init_params` (numpy arrays in its dtypes; re-initialised leaves as given).

    Raises:
      FileNotFoundError: the file cannot be read.
      ValueError: listing, after renaming, every checkpoint entry the model lacks, every model parameter the
        checkpoint lacks and every shape mismatch (both shapes), in one message; re-initialised entries without
        init values.
    """
    raw = official.flatten(checkpoint) if isinstance(checkpoint, Mapping) else official.read_npz(checkpoint)
    flat = canonical_layout(raw)
    out = official.match_params(flat, official.flatten(init_params), reinit, what="ResNetV2 (BiT)")
    return official.unflatten(out)


def random_params(model: ResNetV2, image_size: int, seed: int = 0) -> dict:
    """Random-valued parameters (no compilation) of `model`: kernels N(0, 1) (standardised anyway), GroupNorm scales
    1 + N(0, 0.1²), biases N(0, 0.1²), head N(0, 0.02²). For fixtures and tests only."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, image_size, image_size, 3))))
    rng = np.random.default_rng(seed)

    def draw(path, s):
        name = "/".join(str(getattr(p, "key", p)) for p in path)
        if name.startswith("head/"):
            return (0.02 * rng.standard_normal(s.shape)).astype(np.float32)
        if name.endswith("group_norm/scale"):
            return (1.0 + 0.1 * rng.standard_normal(s.shape)).astype(np.float32)
        if name.endswith("bias"):
            return (0.1 * rng.standard_normal(s.shape)).astype(np.float32)
        return rng.standard_normal(s.shape).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes["params"])

