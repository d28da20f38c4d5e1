"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", ICLR; arXiv 2010.11929).

Flax linen implementation that keeps the parameter layout of the original `google-research/vision_transformer`
checkpoints, so published weights map by name:

    embedding/{kernel,bias}                          patch embedding, a Conv with stride = patch size
    cls                                              [1, 1, D] class token (classifier='token' only)
    registers                                        [1, R, D] register tokens (num_registers=R > 0 only)
    Transformer/posembed_input/pos_embedding         [1, N, D] learned posemb (posemb='learn' only)
    Transformer/norm_pre                             LayerNorm before the first block (norm_pre=True only; CLIP)
    Transformer/encoderblock_{i}/LayerNorm_0         pre-MHSA LayerNorm
    Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/{query,key,value,out}
    Transformer/encoderblock_{i}/ls1                 [D] LayerScale of the MHSA branch (layerscale set only)
    Transformer/encoderblock_{i}/LayerNorm_2         pre-MLP LayerNorm
    Transformer/encoderblock_{i}/MlpBlock_3/{Dense_0,Dense_1}
    Transformer/encoderblock_{i}/ls2                 [D] LayerScale of the MLP branch (layerscale set only)
    Transformer/encoder_norm                         final LayerNorm
    pre_logits/{kernel,bias}                         optional representation layer (Dense + tanh)
    head/{kernel,bias}                               classifier, zero-initialised kernel

Every model returns `(logits, out)`: `out` holds named intermediates that analysis code reads by name
(`"stem"`, `"encoder_input"`, `"block00"` …, `"encoded"`, `"pre_logits"`, `"logits"`) and, with
`return_attention=True`, the attention weights of each block as `"attention/block00"` … `[B, heads, N, N]`.
The token entries hold the CLS token (if any) and the patch tokens only, so every analysis reads the same layout
with or without register tokens; the registers' own outputs are `"registers/block00"` … `[B, R, D]`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Dtype = Any

# Logical axis names of the activations, constrained at the encoder-block boundaries as big_vision does
# (`flax.linen.with_logical_constraint`): a no-op unless the caller maps the names onto mesh axes
# (`vit_jax_struct.train.sharding.activation_sharding`), which the train and eval steps do.
ACT_TOKENS = ("act_batch", "act_len", "act_emb")  # [B, N, D] residual stream and branch outputs
# model.gelu: flax's tanh approximation (vit_jax, big_vision), PyTorch's exact erf (timm's default), or CLIP's
# QuickGELU x·σ(1.702 x) (OpenAI CLIP towers; timm `act_layer='quick_gelu'`).
GELUS = ("tanh", "erf", "quick")
ACT_MLP = ("act_batch", "act_len", "act_mlp")     # [B, N, mlp_dim] MLP hidden layer
# width, depth, mlp_dim, num_heads (ViT paper Table 1; "mu" is big_vision's debugging size).
VARIANTS = {
    "mu": (32, 1, 128, 2),
    "Ti": (192, 12, 768, 3),
    "S": (384, 12, 1536, 6),
    "B": (768, 12, 3072, 12),
    "L": (1024, 24, 4096, 16),
    "H": (1280, 32, 5120, 16),
}


def decode_variant(variant: str) -> dict:
    """Parses a ViT variant string such as `"L/16"` or `"Ti/4"`.

    Args:
      variant: `"<size>/<patch>"` with size one of `VARIANTS` (mu, Ti, S, B, L, H) and patch a positive integer
        in pixels.

    Returns:
      dict with `width`, `depth`, `mlp_dim`, `num_heads` (ints) and `patch_size` (pixels, int).

    Raises:
      ValueError: if the size is unknown or the patch is not a positive integer, naming the bad value.
    """
    m = re.fullmatch(r"([A-Za-z]+)/(\d+)", str(variant))
    size = m.group(1) if m else str(variant).split("/")[0]
    if size not in VARIANTS:
        raise ValueError(f"model.variant {variant!r} is not one of {', '.join(VARIANTS)} "
                         "(write it as '<size>/<patch>', e.g. 'Ti/16')")
    if not m or int(m.group(2)) <= 0:
        raise ValueError(f"model.variant {variant!r} has no valid patch size; write it as '{size}/<patch pixels>', "
                         "e.g. 'Ti/16'")
    width, depth, mlp_dim, num_heads = VARIANTS[size]
    return dict(width=width, depth=depth, mlp_dim=mlp_dim, num_heads=num_heads, patch_size=int(m.group(2)))


def posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.0, dtype: Dtype = jnp.float32):
    """Fixed 2-D sine-cosine position embedding (big_vision `posemb_sincos_2d`; MoCo v3, Chen et al. 2021 §4).

    Args:
      h, w: patch-grid height and width (patches).
      width: embedding width D; must be divisible by 4 (sin/cos for each of the two axes).

    Returns:
      `[1, h*w, D]` array, row-major over the grid.

    Raises:
      ValueError: if `width % 4 != 0`.
    """
    if width % 4:
        raise ValueError(f"posemb='sincos2d' needs a width divisible by 4, got width={width}")
    y, x = np.mgrid[:h, :w]
    omega = np.arange(width // 4) / max(width // 4 - 1, 1)
    omega = 1.0 / (temperature ** omega)
    y = np.einsum("m,d->md", y.flatten(), omega)
    x = np.einsum("m,d->md", x.flatten(), omega)
    pe = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
    return jnp.asarray(pe, dtype)[None]


class AddPositionEmbs(nn.Module):
    """Learned position embedding `pos_embedding` `[1, N, D]` (original ViT name); `x -> (x + P, P)`.

    With `add=False` the tokens are returned unchanged (P is still created and returned, for positional attention).
    """

    posemb_init: Any = nn.initializers.normal(stddev=0.02)
    add: bool = True

    @nn.compact
    def __call__(self, x):
        pe = self.param("pos_embedding", self.posemb_init, (1, *x.shape[1:])).astype(x.dtype)
        return (x + pe if self.add else x), pe


class MultiHeadDotProductAttention(nn.Module):
    """Multi-head self-attention (MHSA), Vaswani et al. 2017 Eq. 1: `softmax(Q K^T / sqrt(d_head)) V`.

    Parameter names and shapes equal `flax.linen.MultiHeadDotProductAttention` (`query`/`key`/`value` kernels
    `[D, heads, d_head]`, `out` kernel `[heads, d_head, D]`), so original ViT checkpoints load unchanged; it is
    written out here so the attention weights are returned directly (analysis) and the logits can be replaced
    (positional attention).

    Call: `(x [B, N, D], deterministic, pos=None) -> (y [B, N, D], weights [B, heads, N, N] float32)`. Logits and
    softmax are computed in float32 whatever the compute dtype.

    Positional attention (Jelassi, Sander & Li 2022, §3 and the "positional attention" ViT of §6): when `pos`
    (`[1, N, D]`, the positional embeddings P, CLS row included) is given, the attention matrix of every head is
    `A = softmax((P W_q)(P W_k)^T / sqrt(d_head))`, computed from the positions only — never from the image — once
    per call and broadcast over the batch, while the values `LN(x) W_v` still come from the tokens. The paper leaves
    open whether LayerNorm is applied to P: it is not here (P enters the projections directly, as p_i in its model).
    """

    num_heads: int
    dropout_rate: float = 0.0
    dtype: Dtype = jnp.float32
    kernel_init: Any = nn.initializers.xavier_uniform()

    @nn.compact
    def __call__(self, x, deterministic: bool = True, pos=None):
        d = x.shape[-1]
        if d % self.num_heads:
            raise ValueError(f"width {d} is not divisible by num_heads {self.num_heads}")
        head_dim = d // self.num_heads
        dense = lambda name: nn.DenseGeneral((self.num_heads, head_dim), dtype=self.dtype,
                                             kernel_init=self.kernel_init, name=name)
        src = x if pos is None else pos.astype(x.dtype)  # [B or 1, N, D]
        q, k, v = dense("query")(src), dense("key")(src), dense("value")(x)  # [B or 1, N, heads, d_head]
        if pos is None and (self.dropout_rate == 0.0 or deterministic):
            # The same softmax(Q K^T / sqrt(d_head)) V with the normalisation deferred past the PV product (as flash
            # attention does): the 1/sqrt(d_head) scale goes on Q ([B, N, h, d], not the [B, h, N, N] logits) and
            # the division by the softmax denominator on the [B, N, h, d] output, so XLA:CPU materialises no
            # [B, h, N, N] broadcast of either (docs/performance.md). `weights` is the normalised matrix, as before.
            q = q * jnp.asarray(1.0 / np.sqrt(head_dim), q.dtype)
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
            e = jnp.exp(logits - jax.lax.stop_gradient(logits.max(axis=-1, keepdims=True)))
            denom = e.sum(axis=-1)  # [B, heads, N]
            weights = e / denom[..., None]
            y = jnp.einsum("bhqk,bkhd->bqhd", e.astype(self.dtype), v, preferred_element_type=jnp.float32)
            y = (y / jnp.swapaxes(denom, 1, 2)[..., None]).astype(self.dtype)
        else:
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(head_dim)
            weights = jax.nn.softmax(logits, axis=-1)  # [B or 1, heads, N, N], float32
            weights = jnp.broadcast_to(weights, (x.shape[0], *weights.shape[1:]))
            probs = weights.astype(self.dtype)
            if self.dropout_rate > 0.0 and not deterministic:
                probs = nn.Dropout(self.dropout_rate)(probs, deterministic=False)
            y = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        y = nn.DenseGeneral(d, axis=(-2, -1), dtype=self.dtype, kernel_init=self.kernel_init, name="out")(y)
        return y, weights


def gelu(x, kind: str = "tanh"):
    """The MLP activation `model.gelu` names (see `GELUS`, `MlpBlock`); same shape and dtype as `x`.

    Raises:
      ValueError: a kind not in `GELUS`.
    """
    if kind == "quick":  # QuickGELU (CLIP; timm `QuickGELU`): x * sigmoid(1.702 x)
        return x * jax.nn.sigmoid(jnp.asarray(1.702, x.dtype) * x)
    if kind not in GELUS:
        raise ValueError(f"model.gelu {kind!r} is not one of {', '.join(map(repr, GELUS))}")
    return nn.gelu(x, approximate=kind == "tanh")


class MlpBlock(nn.Module):
    """Transformer MLP block: Dense(mlp_dim) -> GELU -> dropout -> Dense(D) -> dropout; `[B, N, D] -> [B, N, D]`.

    `gelu` (Hendrycks & Gimpel 2016): `"tanh"`, the approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    (flax `nn.gelu`'s default; vit_jax, big_vision), `"erf"`, the exact x·Φ(x) (PyTorch's `nn.GELU()`, timm's
    default: DeiT, DeiT-III, DINOv2), or `"quick"`, x·σ(1.702·x) (QuickGELU of the OpenAI CLIP towers, Radford et
    al. 2021; timm `QuickGELU`, `act_layer='quick_gelu'`)."""

    mlp_dim: int
    dropout_rate: float = 0.0
    dtype: Dtype = jnp.float32
    gelu: str = "tanh"

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        kw = dict(dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(),
                  bias_init=nn.initializers.normal(stddev=1e-6))
        d = x.shape[-1]
        x = nn.Dense(self.mlp_dim, name="Dense_0", **kw)(x)
        x = nn.with_logical_constraint(x, ACT_MLP)
        x = gelu(x, self.gelu)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        x = nn.Dense(d, name="Dense_1", **kw)(x)
        return nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)


SKIP_KINDS = ("mhsa", "mlp", "both")


class Encoder1DBlock(nn.Module):
    """Pre-LN encoder block (ViT paper Eq. 2-3): `z' = MHSA(LN(z)) + z`, `z'' = MLP(LN(z')) + z'`.

    `remove_skip` (Raghu et al. 2021 §5, skip-connection removal): `'mhsa'` gives `z' = MHSA(LN(z))`, `'mlp'` gives
    `z'' = MLP(LN(z'))`, `'both'` removes both residuals. The residual streams `z`, `z'` and branch outputs
    `f(z)` are sown into the `intermediates` collection (`mhsa_residual`, `mhsa_branch`, `mlp_residual`,
    `mlp_branch`, each `[B, N, D]`) when it is mutable. `pos` (`[1, N, D]`) switches the MHSA to positional
    attention (see `MultiHeadDotProductAttention`). The block input, the MHSA output, the MLP hidden layer and the
    block output carry logical sharding constraints (`ACT_TOKENS`, `ACT_MLP`; big_vision's `act_batch`/`act_len`/
    `act_emb`), no-ops unless a caller maps them to mesh axes (`train.sharding.activation_sharding`).

    LayerScale (Touvron et al. 2021 "Going deeper with image transformers" (CaiT) §2; used by DeiT III, Touvron et
    al. 2022, and DINOv2, Oquab et al. 2023; timm `LayerScale`): with `layerscale` set, each branch output is
    multiplied by a learned per-channel vector, `ls1` (MHSA) and `ls2` (MLP), `[D]`, initialised to `layerscale`:
    `z' = z + ls1 ⊙ MHSA(LN(z))`. The sown branch outputs are the scaled ones (what is added to the stream).
    `layer_norm_eps` is the LayerNorms' epsilon (1e-6, flax's and timm's default; 1e-5 for timm's CLIP towers,
    which use `nn.LayerNorm`).

    Call: `(x [B, N, D], deterministic, pos=None) -> (x [B, N, D], attention weights [B, heads, N, N])`; with
    `scan_output=True` (the `nn.scan` body of `Encoder(scan=True)`) `-> (x, (x, weights))`: carry and per-block output.
    """

    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    dtype: Dtype = jnp.float32
    remove_skip: str | None = None
    scan_output: bool = False
    gelu: str = "tanh"
    layerscale: float | None = None
    layer_norm_eps: float = 1e-6

    def _scale(self, name: str, y):
        if self.layerscale is None:
            return y
        gamma = self.param(name, nn.initializers.constant(self.layerscale), (y.shape[-1],))
        return y * gamma.astype(y.dtype)

    @nn.compact
    def __call__(self, x, deterministic: bool = True, pos=None):
        x = nn.with_logical_constraint(x, ACT_TOKENS)
        y = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name="LayerNorm_0")(x)
        y, weights = MultiHeadDotProductAttention(
            num_heads=self.num_heads, dropout_rate=self.attention_dropout_rate, dtype=self.dtype,
            name="MultiHeadDotProductAttention_1")(y, deterministic, pos)
        y = self._scale("ls1", y)
        y = nn.with_logical_constraint(y, ACT_TOKENS)
        y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
        # Residual stream and branch output, for skip norm ratios (analysis applies with mutable "intermediates").
        self.sow("intermediates", "mhsa_residual", x)
        self.sow("intermediates", "mhsa_branch", y)
        x = y if self.remove_skip in ("mhsa", "both") else x + y
        y = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name="LayerNorm_2")(x)
        y = MlpBlock(self.mlp_dim, self.dropout_rate, self.dtype, self.gelu, name="MlpBlock_3")(y, deterministic)
        y = self._scale("ls2", y)
        self.sow("intermediates", "mlp_residual", x)
        self.sow("intermediates", "mlp_branch", y)
        x = y if self.remove_skip in ("mlp", "both") else x + y
        x = nn.with_logical_constraint(x, ACT_TOKENS)
        return (x, (x, weights)) if self.scan_output else (x, weights)


def parse_skip_ablation(spec, depth: int) -> dict[int, str]:
    """`"6:both,7:mhsa"` (or `((6, "both"), (7, "mhsa"))`) -> `{6: "both", 7: "mhsa"}`; "" / None -> `{}`.

    Raises:
      ValueError: a block index outside [0, depth) or a kind not in `SKIP_KINDS`, naming it.
    """
    if not spec:
        return {}
    items = [tuple(i.split(":")) for i in spec.split(",")] if isinstance(spec, str) else [tuple(i) for i in spec]
    out = {}
    for item in items:
        if len(item) != 2:
            raise ValueError(f"model.skip_ablation entry {item!r} is not 'block:kind', e.g. '6:both'")
        block, kind = int(item[0]), str(item[1]).strip()
        if not 0 <= block < depth:
            raise ValueError(f"model.skip_ablation block {block} is not in [0, {depth})")
        if kind not in SKIP_KINDS:
            raise ValueError(f"model.skip_ablation kind {kind!r} is not one of {SKIP_KINDS}")
        out[block] = kind
    return out


def parse_blocks(spec, depth: int) -> set[int]:
    """`None`/"" -> all blocks; `"0,1"` or `(0, 1)` -> {0, 1}. Raises ValueError for an index outside [0, depth)."""
    if spec is None or spec == "":
        return set(range(depth))
    blocks = {int(b) for b in (spec.split(",") if isinstance(spec, str) else spec)}
    bad = sorted(b for b in blocks if not 0 <= b < depth)
    if bad:
        raise ValueError(f"model.positional_attention_blocks {bad} are not in [0, {depth})")
    return blocks


# Per-block rematerialization policies (`jax.checkpoint_policies`): what the backward pass may keep from the forward
# pass of an encoder block; everything else is recomputed. "none" keeps everything (no remat).
REMAT_POLICIES = ("none", "nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
                  "everything_saveable")


def remat_policy(name: str):
    """`jax.checkpoint_policies.<name>` for a `model.remat_policy` value (None for "none").

    Raises:
      ValueError: a name not in `REMAT_POLICIES`.
    """
    if name not in REMAT_POLICIES:
        raise ValueError(f"model.remat_policy {name!r} is not one of {REMAT_POLICIES}")
    return None if name == "none" else getattr(jax.checkpoint_policies, name)


SCANNED_BLOCK = "encoderblock"  # Name of the stacked block under `Transformer` when `scan=True`.
_BLOCK_RE = re.compile(r"encoderblock_(\d+)$")


def stack_blocks(params: dict) -> dict:
    """Unscanned -> scanned parameter layout (`nn.scan` over encoder blocks).

    `Transformer/encoderblock_{i}/<leaf>` `[...]` for i = 0 … L−1 become `Transformer/encoderblock/<leaf>` `[L, ...]`
    (block i at index i); every other entry is kept. Works on any tree with the params layout (e.g. Adam moments).

    Raises:
      ValueError: the blocks are not numbered 0 … L−1, or their trees differ.
    """
    enc = dict(params["Transformer"])
    idx = sorted(int(m.group(1)) for k in enc if (m := _BLOCK_RE.match(k)))
    if not idx:
        if SCANNED_BLOCK in enc:
            return params
        raise ValueError("stack_blocks: no Transformer/encoderblock_<i> entries to stack")
    if idx != list(range(len(idx))):
        raise ValueError(f"stack_blocks: encoder blocks {idx} are not numbered 0 … {len(idx) - 1}")
    blocks = [enc.pop(f"encoderblock_{i}") for i in idx]
    if any(jax.tree.structure(b) != jax.tree.structure(blocks[0]) for b in blocks):
        raise ValueError("stack_blocks: encoder blocks have different parameter trees (e.g. positional attention "
                         "in some blocks only) and cannot be stacked")
    enc[SCANNED_BLOCK] = jax.tree.map(lambda *xs: jnp.stack(xs), *blocks)
    return {**params, "Transformer": enc}


def unstack_blocks(params: dict) -> dict:
    """Scanned -> unscanned layout, the inverse of `stack_blocks`: `encoderblock/<leaf>` `[L, ...]` ->
    `encoderblock_{i}/<leaf>` `[...]`. A tree that is already unscanned is returned unchanged."""
    enc = dict(params["Transformer"])
    if SCANNED_BLOCK not in enc:
        return params
    stacked = enc.pop(SCANNED_BLOCK)
    depth = jax.tree.leaves(stacked)[0].shape[0]
    for i in range(depth):
        enc[f"encoderblock_{i}"] = jax.tree.map(lambda x, i=i: x[i], stacked)
    return {**params, "Transformer": enc}


def is_scanned(params) -> bool:
    """True if a ViT parameter tree has the scanned layout (`Transformer/encoderblock` with a leading depth axis)."""
    return isinstance(params, dict) and SCANNED_BLOCK in params.get("Transformer", {})


def convert_layout(tree, scanned: bool):
    """Converts every parameter-shaped subtree of `tree` (params, Adam moments, a whole train state) to the scanned
    (`scanned=True`, `stack_blocks`) or unscanned layout; other leaves (step counters) are unchanged."""
    fn = stack_blocks if scanned else unstack_blocks
    has_blocks = lambda x: isinstance(x, dict) and isinstance(x.get("Transformer"), dict) and any(
        k == SCANNED_BLOCK or _BLOCK_RE.match(k) for k in x["Transformer"])
    return jax.tree.map(lambda x: fn(x) if has_blocks(x) else x, tree, is_leaf=has_blocks)



class Encoder(nn.Module):
    """Transformer encoder: posemb, `depth` encoder blocks, final LayerNorm (original name `Transformer`).

    `attention='positional'` makes the blocks in `positional_attention_blocks` (default all) use positional attention
    from the posemb P; with `posemb='sincos2d'` the CLS token's positional vector is the learned `cls_pos_embedding`
    (with learned posemb it is P's first row). `add_posemb=False` keeps P out of the tokens (positions then enter
    only through positional attention). `norm_pre=True` applies a LayerNorm `norm_pre` to the tokens (CLS and
    registers included) once the posemb is added, before the first block (CLIP's `ln_pre`; timm `norm_pre`,
    `pre_norm=True`); `encoder_input` is then its output. `layerscale` and `layer_norm_eps`: see `Encoder1DBlock`.

    Memory levers (Chen et al. 2016 "Training deep nets with sublinear memory cost"; big_vision `vit.py`):
    `remat_policy` wraps every block in `nn.remat` with that `jax.checkpoint_policies` policy; `scan=True` runs the
    blocks as one `nn.scan` (same maths; parameters stacked under `encoderblock` `[depth, ...]`, dropout keys split
    per block, so dropout masks differ from the unscanned model's); scan needs identical blocks (no skip ablation,
    positional attention in all blocks or none).

    Call: `(x [B, N, D], grid (h, w), train) -> (encoded [B, N, D], out)` where `out` has `encoder_input`,
    `block00` … and `attention/block00` … (`[B, heads, N, N]`).
    """

    depth: int
    mlp_dim: int
    num_heads: int
    posemb: str = "learn"
    has_cls: bool = True
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    dtype: Dtype = jnp.float32
    attention: str = "standard"
    positional_attention_blocks: Any = None
    add_posemb: bool = True
    skip_ablation: Any = None
    remat_policy: str = "none"
    scan: bool = False
    gelu: str = "tanh"
    layerscale: float | None = None
    norm_pre: bool = False
    layer_norm_eps: float = 1e-6

    @nn.compact
    def __call__(self, x, grid, train: bool = False, registers=None):
        if self.attention not in ("standard", "positional"):
            raise ValueError(f"model.attention {self.attention!r} is not one of 'standard', 'positional'")
        skips = parse_skip_ablation(self.skip_ablation, self.depth)
        positional = parse_blocks(self.positional_attention_blocks, self.depth) if self.attention == "positional" \
            else set()
        out = {}
        if self.posemb == "learn":
            x, pos = AddPositionEmbs(add=self.add_posemb, name="posembed_input")(x)
        elif self.posemb == "sincos2d":
            pos = posemb_sincos_2d(*grid, x.shape[-1], dtype=x.dtype)
            if self.has_cls:  # The class token gets no sin-cos position; positional attention learns one.
                cls_pos = (self.param("cls_pos_embedding", nn.initializers.normal(0.02), (1, 1, x.shape[-1]))
                           if positional else jnp.zeros((1, 1, x.shape[-1])))
                pos = jnp.concatenate([cls_pos.astype(x.dtype), pos], axis=1)
            x = x + pos if self.add_posemb else x
        else:
            raise ValueError(f"model.posemb {self.posemb!r} is not one of 'learn', 'sincos2d'")
        num_reg = 0 if registers is None else registers.shape[1]
        if num_reg and positional:
            raise ValueError(f"model.num_registers={num_reg} with model.attention='positional': register tokens "
                             "have no position to attend from; use model.num_registers=0 or attention='standard'")
        if num_reg:  # DINOv2 / Darcet et al. 2024: registers join after the posemb, carrying no position of their own
            c = int(self.has_cls)
            regs = jnp.tile(registers.astype(x.dtype), (x.shape[0], 1, 1))
            x = jnp.concatenate([x[:, :c], regs, x[:, c:]], axis=1)
        if self.norm_pre:  # CLIP's ln_pre (timm norm_pre): after the posemb, CLS and registers, before block 0
            x = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name="norm_pre")(x)
        split = functools.partial(split_registers, num_prefix=int(self.has_cls), num_registers=num_reg)
        out["encoder_input"], out["registers/encoder_input"] = split(x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        policy = remat_policy(self.remat_policy)
        block = Encoder1DBlock
        if policy is not None:  # `deterministic` (argument 2, counting self) is a Python bool: static.
            block = nn.remat(block, policy=policy, static_argnums=(2,), prevent_cse=not self.scan)
        kw = dict(mlp_dim=self.mlp_dim, num_heads=self.num_heads, dropout_rate=self.dropout_rate,
                  attention_dropout_rate=self.attention_dropout_rate, dtype=self.dtype, gelu=self.gelu,
                  layerscale=self.layerscale, layer_norm_eps=self.layer_norm_eps)
        if self.scan:
            if skips or (positional and len(positional) != self.depth):
                raise ValueError("model.scan=True needs identical encoder blocks: it cannot be combined with "
                                 f"model.skip_ablation ({self.skip_ablation!r}) or positional attention in some "
                                 f"blocks only ({self.positional_attention_blocks!r}); use model.scan=False")
            scanned = nn.scan(block, variable_axes={"params": 0, "intermediates": 0},
                              split_rngs={"params": True, "dropout": True}, in_axes=(nn.broadcast, nn.broadcast),
                              length=self.depth)
            x, (xs, ws) = scanned(scan_output=True, name=SCANNED_BLOCK, **kw)(x, not train,
                                                                              pos if positional else None)
            outputs = [(xs[i], ws[i]) for i in range(self.depth)]
        else:
            outputs = []
            for i in range(self.depth):
                x, weights = block(remove_skip=skips.get(i), name=f"encoderblock_{i}", **kw)(
                    x, not train, pos if i in positional else None)
                outputs.append((x, weights))
        for i, (xi, wi) in enumerate(outputs):
            out[f"block{i:02d}"], out[f"registers/block{i:02d}"] = split(xi)
            out[f"attention/block{i:02d}"], out[f"register_attention/block{i:02d}"] = split_register_attention(
                wi, int(self.has_cls), num_reg)
        encoded, out["registers/encoded"] = split(
            nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name="encoder_norm")(x))
        if not num_reg:
            out = {k: v for k, v in out.items() if not k.startswith(("registers/", "register_attention/"))}
        return encoded, out


def split_registers(x, num_prefix: int, num_registers: int):
    """`[B, P + R + N, D]` tokens -> (`[B, P + N, D]` prefix (CLS) and patch tokens, `[B, R, D]` registers).

    The register tokens sit between the `num_prefix` class token(s) and the patch tokens (timm's and DINOv2's
    order). With `num_registers=0` the tokens come back unchanged beside an empty `[B, 0, D]`.
    """
    p, r = num_prefix, num_registers
    if not r:
        return x, x[:, :0]
    return jnp.concatenate([x[:, :p], x[:, p + r:]], axis=1), x[:, p:p + r]


def split_register_attention(weights, num_prefix: int, num_registers: int):
    """Attention weights `[B, heads, T, T]` (T = P + R + N) -> (`[B, heads, P + N, P + N]` among the CLS and patch
    tokens, `[B, heads, P + N, R]` from them to the registers).

    The first part's rows no longer sum to 1 when registers take attention; analyses that need a distribution over
    patches renormalise (`analysis/attention.py`), and the mass given to registers is the second part's row sum.
    """
    p, r = num_prefix, num_registers
    if not r:
        return weights, weights[..., :0]
    keep = lambda a, axis: jnp.concatenate(
        [jax.lax.slice_in_dim(a, 0, p, axis=axis), jax.lax.slice_in_dim(a, p + r, a.shape[axis], axis=axis)],
        axis=axis)
    rows = keep(weights, -2)
    return keep(rows, -1), rows[..., p:p + r]


class VisionTransformer(nn.Module):
    """ViT classifier; `(images [B, H, W, C] float, train, return_attention) -> (logits [B, classes] float32, out)`.

    Fields:
      num_classes: size of the head; 0 or None gives no head (logits are the pre-logits).
      variant: `"<size>/<patch>"` (see `decode_variant`); `width`, `depth`, `mlp_dim`, `num_heads`, `patch_size`
        override single entries of it (e.g. the 7-layer, 384-wide small-data ViT of Jelassi et al. 2022 §6).
      classifier: `'token'` (prepend a learned CLS token, classify its output) or `'gap'` (no CLS token, no CLS
        posemb; classify the mean of the encoded patch tokens).
      posemb: `'learn'` (trained, `[1, N, D]`, N includes CLS) or `'sincos2d'` (fixed, no parameter).
      dropout, attention_dropout: rates used when `train=True`.
      representation_size: if set, a `pre_logits` Dense + tanh of this width before the head (ViT paper §3.1).
      head_bias_init: constant initial bias of the head (−10 with sigmoid cross-entropy, big_vision recipe).
      dtype: compute dtype; parameters stay float32.
      attention: `'standard'` MHSA or `'positional'` (Jelassi et al. 2022: attention from the posemb only) in the
        blocks `positional_attention_blocks` (None/"": all; `"0,1"`: those).
      add_posemb: add the posemb to the tokens (the standard ViT); False keeps positions out of the tokens.
      skip_ablation: residuals to remove, `"6:both,7:mlp"` (Raghu et al. 2021 §5; see `Encoder1DBlock`).
      remat_policy: per-encoder-block rematerialization (`jax.checkpoint` with a `jax.checkpoint_policies` policy,
        see `REMAT_POLICIES`; "none": off). Same values, less activation memory, more compute.
      scan: `nn.scan` over the encoder blocks (one compiled block instead of `depth`; parameters stacked under
        `Transformer/encoderblock` with a leading depth axis; `stack_blocks` / `unstack_blocks` convert).
      gelu: the MLP's GELU, `'tanh'` (approximation; vit_jax, big_vision), `'erf'` (exact; PyTorch/timm default:
        DeiT, DeiT III, DINOv2) or `'quick'` (x·σ(1.702 x), OpenAI CLIP), see `MlpBlock`; a checkpoint trained with
        one gives other logits with another (1e-4 … 1e-3 on a ViT-Ti between tanh and erf).
      layerscale: None (the original ViT) or the initial value of per-block LayerScale vectors `ls1`, `ls2` `[D]`
        (CaiT / DeiT III / DINOv2: 1e-6 … 1e-5; see `Encoder1DBlock`). A loaded checkpoint replaces the values.
      norm_pre: a LayerNorm `Transformer/norm_pre` after the posemb, before the first block (CLIP, Radford et al.
        2021: `ln_pre`; timm `pre_norm=True`).
      layer_norm_eps: epsilon of every LayerNorm (1e-6: flax's, vit_jax's and timm's default; timm's CLIP towers and
        OpenCLIP use PyTorch's 1e-5).
      num_registers: R learned register tokens `registers` `[1, R, D]` (Darcet et al. 2024, "Vision Transformers
        Need Registers", §3), inserted after the CLS token once the posemb is added (they carry no position, as in
        DINOv2), attended to by every block and discarded at the output: the classifier reads the CLS token or the
        mean of the patch tokens only. Initialised N(0, 1e-6) as DINOv2. Not with positional attention.

    `out` keys: `stem` patch embeddings `[B, N_patches, D]`; `encoder_input` tokens after CLS + posemb `[B, N, D]`;
    `block00` … outputs of each encoder block `[B, N, D]`; `encoded` after the final LayerNorm `[B, N, D]`;
    `pre_logits` `[B, D']`; `logits`; and `attention/blockXX` `[B, heads, N, N]` when `return_attention`. N counts
    the CLS and patch tokens only: with registers, `registers/encoder_input`, `registers/blockXX`,
    `registers/encoded` `[B, R, D]` hold theirs and `register_attention/blockXX` `[B, heads, N, R]` (with
    `return_attention`) the attention the CLS and patch tokens pay them.

    Raises:
      ValueError: unknown variant/classifier/posemb, an image whose size is not divisible by the patch size, a
        negative `num_registers`, or registers with positional attention.
    """

    num_classes: int | None
    variant: str = "Ti/16"
    width: int | None = None
    depth: int | None = None
    mlp_dim: int | None = None
    num_heads: int | None = None
    patch_size: int | None = None
    classifier: str = "token"
    posemb: str = "learn"
    dropout: float = 0.0
    attention_dropout: float = 0.0
    representation_size: int | None = None
    head_bias_init: float = 0.0
    dtype: Dtype = jnp.float32
    attention: str = "standard"
    positional_attention_blocks: Any = None
    add_posemb: bool = True
    skip_ablation: Any = None
    remat_policy: str = "none"
    scan: bool = False
    gelu: str = "tanh"
    num_registers: int = 0
    layerscale: float | None = None
    norm_pre: bool = False
    layer_norm_eps: float = 1e-6

    def arch(self) -> dict:
        """Resolved sizes: the variant's, with explicit fields overriding."""
        a = decode_variant(self.variant)
        for k in ("width", "depth", "mlp_dim", "num_heads", "patch_size"):
            if getattr(self, k) is not None:
                a[k] = int(getattr(self, k))
        return a

    @nn.compact
    def __call__(self, images, *, train: bool = False, return_attention: bool = False):
        a = self.arch()
        if self.classifier not in ("token", "gap"):
            raise ValueError(f"model.classifier {self.classifier!r} is not one of 'token', 'gap'")
        if self.gelu not in GELUS:
            raise ValueError(f"model.gelu {self.gelu!r} is not one of {', '.join(map(repr, GELUS))}")
        b, h, w, _ = images.shape
        p = a["patch_size"]
        if h % p or w % p:
            raise ValueError(f"image size {h}x{w} is not divisible by the patch size {p} "
                             f"(model.variant {self.variant!r}); choose data.image_size as a multiple of {p}")
        x = nn.Conv(a["width"], (p, p), strides=(p, p), padding="VALID", dtype=self.dtype, name="embedding")(
            images.astype(self.dtype))
        grid = (h // p, w // p)
        x = x.reshape(b, grid[0] * grid[1], a["width"])
        out = {"stem": x}
        if self.classifier == "token":
            cls = self.param("cls", nn.initializers.zeros, (1, 1, a["width"]))
            x = jnp.concatenate([jnp.tile(cls.astype(x.dtype), (b, 1, 1)), x], axis=1)
        if int(self.num_registers) < 0:
            raise ValueError(f"model.num_registers {self.num_registers} must be 0 (none) or a positive count")
        registers = (self.param("registers", nn.initializers.normal(1e-6), (1, int(self.num_registers), a["width"]))
                     if self.num_registers else None)
        x, enc_out = Encoder(a["depth"], a["mlp_dim"], a["num_heads"], self.posemb, self.classifier == "token",
                             self.dropout, self.attention_dropout, self.dtype, self.attention,
                             self.positional_attention_blocks, self.add_posemb, self.skip_ablation,
                             self.remat_policy, self.scan, gelu=self.gelu, layerscale=self.layerscale,
                             norm_pre=self.norm_pre, layer_norm_eps=self.layer_norm_eps, name="Transformer")(
            x, grid, train, registers)
        out.update({k: v for k, v in enc_out.items()
                    if return_attention or not k.startswith(("attention/", "register_attention/"))})
        out["encoded"] = x
        x = x[:, 0] if self.classifier == "token" else jnp.mean(x, axis=1)
        if self.representation_size:
            x = nn.tanh(nn.Dense(self.representation_size, dtype=self.dtype, name="pre_logits")(x))
        out["pre_logits"] = x
        if self.num_classes:
            x = nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=nn.initializers.zeros,
                         bias_init=nn.initializers.constant(self.head_bias_init), name="head")(x)
        logits = x.astype(jnp.float32)
        out["logits"] = logits
        return logits, out
