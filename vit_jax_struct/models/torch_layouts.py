"""ViT weights in the PyTorch layouts of timm and Hugging Face transformers, as numpy arrays (no torch needed).

Both libraries store a ViT as a flat state dict of `.`-joined names, usually in a `.safetensors` file (read and
written here through `safetensors.numpy`). This module renames and re-lays out those tensors to and from our
parameters in the vit_jax layout (`models/vit.py`, `models/official.py`); it never imports torch, timm or
transformers. The names were taken from the libraries' own state dicts (timm 1.0 `VisionTransformer`, transformers
`ViTForImageClassification` / `ViTModel`, recorded in tests/fixtures/make_torch_reference.py):

    ours (vit_jax)                                timm                       Hugging Face (classic names)
    embedding/kernel [p, p, 3, D] (HWIO)          patch_embed.proj.weight    vit.embeddings.patch_embeddings.
                                                    [D, 3, p, p] (OIHW)        projection.weight (OIHW)
    cls [1, 1, D]                                 cls_token                  vit.embeddings.cls_token
    registers [1, R, D]                           reg_token                  (none)
    Transformer/posembed_input/pos_embedding      pos_embed                  vit.embeddings.position_embeddings
    Transformer/norm_pre                          norm_pre                   (none)
    …/encoderblock_{i}/LayerNorm_0                blocks.{i}.norm1           vit.encoder.layer.{i}.layernorm_before
    …/MultiHeadDotProductAttention_1/query|key|value  blocks.{i}.attn.qkv      …attention.attention.query|key|value
      kernel [D, heads, d_head]                     [3 D, D] (q, k, v fused)   [D, D] each
    …/MultiHeadDotProductAttention_1/out          blocks.{i}.attn.proj       …attention.output.dense
      kernel [heads, d_head, D]
    …/ls1 [D]                                     blocks.{i}.ls1.gamma       (none)
    …/LayerNorm_2                                 blocks.{i}.norm2           …layernorm_after
    …/MlpBlock_3/Dense_0 | Dense_1                blocks.{i}.mlp.fc1 | fc2   …intermediate.dense | …output.dense
    …/ls2 [D]                                     blocks.{i}.ls2.gamma       (none)
    Transformer/encoder_norm                      norm                       vit.layernorm
    pre_logits (Dense + tanh on the CLS token)    (none)                     pooler.dense (`ViTModel` only)
    head                                          head                       classifier

Dense kernels are `[in, out]` here and `weight [out, in]` there; LayerNorm `scale` is `weight`. Heads are laid
out head-major in all three (feature `h * d_head + j`), so the attention kernels are plain reshapes. transformers
5 renamed the modules inside `ViTModel` (`layers.{i}.attention.q_proj`, `…o_proj`, `mlp.fc1`, `mlp.fc2`) and
reads the classic names (those of the Hub files, e.g. google/vit-base-patch16-224) through its conversion
mapping; export writes the classic names, import reads both.

timm's `pos_embed` holds a CLS entry in front of the grid exactly when the model has a class token and
`no_embed_class=False` (its default); the weights do not record that flag, so a timm file with `cls_token` whose
posemb length is a square number (a grid only) is read as `no_embed_class=True`. Register tokens (`reg_token`)
never have a posemb entry here: our ViT adds them after the posemb (DINOv2's order), which timm computes with
`no_embed_class=True`, so a model with registers and a class token is written with the class token's posemb entry
folded into `cls_token` (`fold_cls_posemb`; logits equal, parameters not). Hugging Face's
`position_embeddings` always has the CLS entry.

Families of timm's `VisionTransformer` read here (`timm_features` tells them apart by their names; the activation
and the LayerNorm epsilon are not in the weights and must be set on our model):

    DeiT (Touvron et al. 2021; timm `deit_*`)       the plain layout; erf GELU (`model.gelu='erf'`). The distilled
                                                    `deit_*_distilled_*` (`dist_token`, `head_dist`) is refused.
    DeiT III (Touvron et al. 2022; `deit3_*`)       + LayerScale `blocks.{i}.ls1.gamma`, `ls2.gamma`
                                                    (`model.layerscale`), `no_embed_class=True` (posemb without a
                                                    class entry); erf GELU.
    DINOv2 (Oquab et al. 2023; `vit_*_dinov2`)      + LayerScale, patch 14, posemb with a class entry; `*_reg4_*`
                                                    (Darcet et al. 2024) + `reg_token` and `no_embed_class=True`; erf
                                                    GELU. The original repository's names load too (`register_tokens`
                                                    with a class posemb entry; `mask_token`, used only by its
                                                    masked-image pre-training, is dropped by `official.load`). The
                                                    SwiGLU MLP of the giant model is refused.
    CLIP vision towers (Radford et al. 2021;        + `norm_pre` (CLIP's `ln_pre`, `model.norm_pre`), LayerNorm eps
      `vit_*_clip_*`, OpenCLIP)                     1e-5 (`model.layer_norm_eps`); QuickGELU for the OpenAI weights
                                                    (timm `vit_*_clip_quickgelu_*`, `model.gelu='quick'`), erf GELU in
                                                    timm's `vit_*_clip_*` entry points.

A SwiGLU MLP is refused by `to_vit_jax` in one line naming the key and what is supported; other timm features this
ViT does not have (`UNSUPPORTED_TIMM`: QK-norm, `fc_norm`, attention pooling, …) are named, with what is
supported, at the end of `official.load`'s one-line listing of every unused, missing and mis-shaped entry.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

import numpy as np

from vit_jax_struct import storage

TIMM, HF = "timm", "hf"
LAYOUTS = (TIMM, HF)
POSEMB = "Transformer/posembed_input/pos_embedding"
# safetensors header metadata: transformers refuses a file without `format` ("pt", "tf", "flax", "mlx").
SAFETENSORS_METADATA = {"format": "pt"}

# One row per module of an encoder block: our path, timm's, Hugging Face's (classic), and how the kernel maps:
# "ln" (scale/bias <-> weight/bias) or the number of leading input axes of our Dense kernel (DenseGeneral: query
# [D, heads, d_head] has 1, out [heads, d_head, D] has 2). `#q|#k|#v` mark timm's thirds of the fused qkv.
_BLOCK_ROWS = (
    ("LayerNorm_0", "norm1", "layernorm_before", "ln"),
    ("ls1", "ls1.gamma", None, "param"),  # LayerScale (DeiT III, DINOv2): timm only
    ("ls2", "ls2.gamma", None, "param"),
    ("MultiHeadDotProductAttention_1/query", "attn.qkv#q", "attention.attention.query", 1),
    ("MultiHeadDotProductAttention_1/key", "attn.qkv#k", "attention.attention.key", 1),
    ("MultiHeadDotProductAttention_1/value", "attn.qkv#v", "attention.attention.value", 1),
    ("MultiHeadDotProductAttention_1/out", "attn.proj", "attention.output.dense", 2),
    ("LayerNorm_2", "norm2", "layernorm_after", "ln"),
    ("MlpBlock_3/Dense_0", "mlp.fc1", "intermediate.dense", 1),
    ("MlpBlock_3/Dense_1", "mlp.fc2", "output.dense", 1),
)
_TOP_ROWS = (  # Hugging Face names without the `vit.` prefix of ViTForImageClassification's backbone.
    ("embedding", "patch_embed.proj", "embeddings.patch_embeddings.projection", "conv"),
    ("cls", "cls_token", "embeddings.cls_token", "param"),
    ("registers", "reg_token", None, "param"),  # register tokens: timm `reg_token`; transformers' ViT has none
    (POSEMB, "pos_embed", "embeddings.position_embeddings", "param"),
    ("Transformer/norm_pre", "norm_pre", None, "ln"),  # CLIP's ln_pre (timm pre_norm=True): timm only
    ("Transformer/encoder_norm", "norm", "layernorm", "ln"),
    ("pre_logits", None, "pooler.dense", 1),
    ("head", "head", "classifier", 1),
)
_BLOCK_PREFIX = {TIMM: "blocks.{i}.", HF: "encoder.layer.{i}."}
_BLOCK_INDEX = {TIMM: re.compile(r"^blocks\.(\d+)\."), HF: re.compile(r"^encoder\.layer\.(\d+)\.")}
_QKV = ("q", "k", "v")
# transformers 5 module names inside ViTModel -> the classic names of the Hub files.
_HF_V5_NAMES = ((re.compile(r"^layers\.(\d+)\."), r"encoder.layer.\1."),
                (re.compile(r"\.attention\.q_proj\."), ".attention.attention.query."),
                (re.compile(r"\.attention\.k_proj\."), ".attention.attention.key."),
                (re.compile(r"\.attention\.v_proj\."), ".attention.attention.value."),
                (re.compile(r"\.attention\.o_proj\."), ".attention.output.dense."),
                (re.compile(r"\.mlp\.fc1\."), ".intermediate.dense."),
                (re.compile(r"\.mlp\.fc2\."), ".output.dense."))


def detect_layout(keys) -> str | None:
    """`'timm'`, `'hf'` or None (not a PyTorch ViT layout) from a state dict's names.

    timm: a `patch_embed.proj.weight`; Hugging Face: an `embeddings.patch_embeddings.projection.weight`, with or
    without the `vit.` prefix.
    """
    keys = set(keys)
    if "patch_embed.proj.weight" in keys:
        return TIMM
    if any(k.endswith("embeddings.patch_embeddings.projection.weight") for k in keys):
        return HF
    return None


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Reads a `.safetensors` file (local or a URL `storage` can open) into `{name: numpy array}`.

    Raises:
      FileNotFoundError: no such file, or it cannot be read (with how to copy it locally).
      ValueError: the file is not a safetensors file (the header does not parse).
    """
    from safetensors import SafetensorError
    from safetensors import numpy as stnp

    path = str(path)
    try:
        if storage.is_url(path):
            return stnp.load(storage.read_bytes(path))
        return stnp.load_file(str(storage.path(path)))
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {path!r}: no such .safetensors file") from None
    except SafetensorError as e:
        raise ValueError(f"checkpoint {path!r} is not a readable safetensors file ({e})") from e
    except storage.StorageError as e:
        raise FileNotFoundError(f"checkpoint {path!r} could not be read ({e}); copy it to a local file first") from e


def _read_header(path) -> dict:
    """The JSON header of a `.safetensors` file: 8 bytes of header length, then JSON (tensor names and metadata)."""
    path = str(path)
    try:
        if storage.is_url(path):
            head = storage.read_bytes(path)
        else:
            with open(storage.path(path), "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                head = n.to_bytes(8, "little") + f.read(min(n, 100_000_000))
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {path!r}: no such .safetensors file") from None
    n = int.from_bytes(head[:8], "little")
    try:
        return json.loads(head[8:8 + n])
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"checkpoint {path!r} is not a readable safetensors file (header: {e})") from e


def read_safetensors_metadata(path) -> dict[str, str]:
    """The `__metadata__` of a `.safetensors` header (`{}` when there is none): 8 bytes of header length, then JSON.

    Raises:
      FileNotFoundError: no such file. ValueError: the header does not parse.
    """
    return dict(_read_header(path).get("__metadata__") or {})


def read_safetensors_names(path) -> list[str]:
    """The tensor names of a `.safetensors` file, sorted, from its header only (no tensor is read).

    Raises:
      FileNotFoundError: no such file. ValueError: the header does not parse.
    """
    return sorted(k for k in _read_header(path) if k != "__metadata__")


def write_safetensors(path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Writes `{name: array}` as one `.safetensors` file (local or URL, replaced whole; `storage.write_bytes`).

    Arrays are written C-contiguous in their own dtype; `metadata` (str -> str) goes into the header, default
    `SAFETENSORS_METADATA` (which transformers requires).

    Raises:
      storage.StorageError: the file cannot be written (naming it).
    """
    from safetensors import numpy as stnp

    data = stnp.save({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                     metadata=dict(SAFETENSORS_METADATA if metadata is None else metadata))
    storage.write_bytes(path, data)


def _rows(layout: str, depth: int):
    """`(ours, theirs, kind)` for every module of a `depth`-block ViT in `layout`."""
    col = 1 if layout == TIMM else 2
    rows = [(r[0], r[col], r[3]) for r in _TOP_ROWS if r[col] is not None]
    for i in range(depth):
        pre = _BLOCK_PREFIX[layout].format(i=i)
        rows += [(f"Transformer/encoderblock_{i}/{r[0]}", pre + r[col], r[3]) for r in _BLOCK_ROWS
                 if r[col] is not None]
    return rows


def _leaves(kind) -> tuple[tuple[str, str], ...]:
    """(our leaf, their leaf) pairs of a module kind; ("", "") for a bare parameter."""
    if kind == "param":
        return (("", ""),)
    return (("scale", "weight"), ("bias", "bias")) if kind == "ln" else (("kernel", "weight"), ("bias", "bias"))


def _to_torch(kind, leaf: str, x: np.ndarray) -> np.ndarray:
    if kind == "conv" and leaf == "kernel":
        return np.transpose(x, (3, 2, 0, 1))  # HWIO -> OIHW
    if isinstance(kind, int):
        if leaf == "kernel":
            return x.reshape(math.prod(x.shape[:kind]), -1).T  # [in…, out…] -> [out, in]
        return x.reshape(-1)
    return x


def _from_torch(kind, leaf: str, x: np.ndarray, shape: tuple | None) -> np.ndarray:
    if kind == "conv" and leaf == "kernel" and x.ndim == 4:
        return np.transpose(x, (2, 3, 1, 0))  # OIHW -> HWIO
    if isinstance(kind, int):
        if leaf == "kernel" and x.ndim == 2:
            x = x.T
        if shape is not None and math.prod(shape) == x.size:  # DenseGeneral's heads axis, e.g. [D, D] -> [D, H, dh]
            return x.reshape(shape)
    return x


def fold_cls_posemb(flat: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our flat parameters with `cls` + posemb row 0 as the class token and the posemb cut to the grid `[1, h·w, D]`
    (timm's `no_embed_class=True` layout, which adds the posemb to the patch tokens only). The sum the first block
    sees is the same, so the logits are; a model without `cls` comes back unchanged."""
    flat = dict(flat)
    if "cls" in flat and np.ndim(flat.get(POSEMB)) == 3:
        pe = np.asarray(flat[POSEMB])
        flat["cls"] = (np.asarray(flat["cls"]) + pe[:, :1]).astype(pe.dtype)
        flat[POSEMB] = pe[:, 1:]
    return flat


def fold_patch_bias(flat: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our flat parameters with the patch embedding's bias `embedding/bias` `[D]` added to the posemb's grid entries
    and removed (timm builds the patch embedding of a `pre_norm=True` model, CLIP's, without a bias). Every patch
    token gets the same sum, so the logits are equal; a CLS entry (posemb `[1, 1 + h·w, D]` with `cls`) is left as
    it is. Parameters without `embedding/bias` or a learned posemb come back unchanged."""
    flat = dict(flat)
    if "embedding/bias" in flat and np.ndim(flat.get(POSEMB)) == 3:
        pe, n_cls = np.array(flat[POSEMB]), int("cls" in flat)
        pe[:, n_cls:] += np.asarray(flat.pop("embedding/bias")).astype(pe.dtype)
        flat[POSEMB] = pe
    return flat


def depth_of(flat: Mapping) -> int:
    """Number of encoder blocks of our flat (unscanned) parameters."""
    blocks = {int(m.group(1)) for k in flat if (m := re.match(r"^Transformer/encoderblock_(\d+)/", k))}
    return max(blocks) + 1 if blocks else 0


# timm features this ViT does not have: (regex on a timm name, what it is). A SwiGLU MLP is refused outright
# (`check_timm_supported`); the others are named beside the listing of every difference (`unsupported_hint`).
SWIGLU_TIMM = (r"^blocks\.\d+\.mlp\.(w12|w3|fc1_g|fc1_x)\.",
               "a SwiGLU MLP (DINOv2 giant `w12`/`w3`, timm SwiGLU `fc1_g`/`fc1_x`)")
UNSUPPORTED_TIMM = (
    (r"^blocks\.\d+\.attn\.(q_norm|k_norm)\.", "QK-norm (timm qk_norm=True)"),
    (r"^blocks\.\d+\.attn\.norm\.", "a LayerNorm inside the attention (timm scale_attn_norm=True)"),
    (r"^blocks\.\d+\.mlp\.norm\.", "a LayerNorm inside the MLP (timm scale_mlp_norm=True)"),
    (r"^blocks\.\d+\.attn\.(q_bias|v_bias)$", "separate q/v biases (the BEiT / EVA layout)"),
    (r"^fc_norm\.", "a LayerNorm after the pooling (timm fc_norm, global_pool='avg')"),
    (r"^attn_pool\.", "an attention-pooling head (timm global_pool='map')"),
)
SUPPORTED_TIMM = ("class token or global average pooling, register tokens (reg_token), LayerScale (ls1/ls2.gamma), "
                  "norm_pre, a Dense-GELU-Dense MLP (mlp.fc1/fc2; GELU tanh, erf or quick), a linear head")
LAYERSCALE_INIT = 1e-5  # model.layerscale for a checkpoint with LayerScale (DINOv2's init; the loaded values win)


def check_timm_supported(state_dict: Mapping[str, np.ndarray]) -> None:
    """Refuses, in one line, a timm state dict with a SwiGLU MLP, which this ViT does not have.

    By name (`SWIGLU_TIMM`: the DINOv2 repository's `mlp.w12`/`w3`, timm's `SwiGLU` `fc1_g`/`fc1_x`) and by shape:
    timm's `SwiGLUPacked` (DINOv2 giant, `mlp_layer=SwiGLUPacked`) keeps the names `mlp.fc1` / `mlp.fc2`, but `fc1`
    `[2 H, D]` holds the gate and the value, twice the `H` inputs of `fc2` `[D, H]`.

    Raises:
      ValueError: naming the first offending key, what it is, and `SUPPORTED_TIMM`.
    """
    rx, what = SWIGLU_TIMM
    for key in sorted(state_dict):
        if re.search(rx, key):
            raise ValueError(f"checkpoint key {key!r} is {what}, which this ViT does not have; supported timm "
                             f"features: {SUPPORTED_TIMM}")
    for key in sorted(k for k in state_dict if re.match(r"^blocks\.\d+\.mlp\.fc1\.weight$", k)):
        fc2 = state_dict.get(key.replace("fc1", "fc2"))
        fc1 = state_dict[key]
        if fc2 is not None and np.ndim(fc1) == 2 and np.ndim(fc2) == 2 and np.shape(fc1)[0] == 2 * np.shape(fc2)[1]:
            raise ValueError(f"checkpoint key {key!r} {tuple(np.shape(fc1))} is twice the inputs of "
                             f"{key.replace('fc1', 'fc2')!r} {tuple(np.shape(fc2))}: a packed SwiGLU MLP (timm "
                             "SwiGLUPacked, DINOv2 giant), which this ViT does not have; supported timm features: "
                             f"{SUPPORTED_TIMM}")


def unsupported_hint(state_dict: Mapping[str, np.ndarray]) -> str:
    """`""`, or one sentence naming the first key of each timm feature in `UNSUPPORTED_TIMM` that `state_dict`
    has, and `SUPPORTED_TIMM` (appended by `official.load` to its listing of every difference)."""
    found = []
    for rx, what in UNSUPPORTED_TIMM:
        keys = sorted(k for k in state_dict if re.search(rx, k))
        if keys:
            found.append(f"{keys[0]!r} is {what}")
    if not found:
        return ""
    return f"timm features this ViT does not have: {'; '.join(found)}; supported timm features: {SUPPORTED_TIMM}."


def timm_features(state_dict: Mapping[str, np.ndarray]) -> dict:
    """Our model fields that a timm state dict determines, read from its names and shapes.

    Args:
      state_dict: `{timm name: array}` (`read_safetensors`), timm's `VisionTransformer` layout.

    Returns:
      dict of `VisionTransformer` fields: `width`, `depth`, `mlp_dim`, `patch_size` (ints), `classifier`
      (`'token'` with a `cls_token`, else `'gap'`), `num_registers` (`reg_token` / `register_tokens` count),
      `layerscale` (`LAYERSCALE_INIT` with `blocks.0.ls1.gamma`, else None), `norm_pre` (bool: a `norm_pre`), and
      `num_classes` (rows of `head.weight`; 0 headless). Not in the weights, so not returned: `num_heads` (the fused
      qkv hides it), `gelu` and `layer_norm_eps` (see the module docstring per family).

    Raises:
      ValueError: not a timm layout (no `patch_embed.proj.weight`).
    """
    if detect_layout(state_dict) != TIMM:
        raise ValueError("not a timm ViT state dict (no patch_embed.proj.weight)")
    proj = np.shape(state_dict["patch_embed.proj.weight"])  # [D, 3, p, p]
    depth = 1 + max((int(m.group(1)) for k in state_dict if (m := _BLOCK_INDEX[TIMM].match(k))), default=-1)
    regs = state_dict.get("reg_token", state_dict.get("register_tokens"))
    return dict(width=int(proj[0]), depth=depth, patch_size=int(proj[-1]),
                mlp_dim=int(np.shape(state_dict["blocks.0.mlp.fc1.weight"])[0]) if depth else 0,
                classifier="token" if "cls_token" in state_dict else "gap",
                num_registers=int(np.shape(regs)[1]) if regs is not None else 0,
                layerscale=LAYERSCALE_INIT if "blocks.0.ls1.gamma" in state_dict else None,
                norm_pre="norm_pre.weight" in state_dict,
                num_classes=int(np.shape(state_dict["head.weight"])[0]) if "head.weight" in state_dict else 0)


def from_vit_jax(flat: Mapping[str, np.ndarray], layout: str) -> dict[str, np.ndarray]:
    """Our flat parameters (vit_jax names, encoder unscanned, `'/'`-joined) -> a timm or Hugging Face state dict.

    Args:
      flat: `{path: array}` of a standard ViT (learned posemb; `pre_logits` only for Hugging Face's `ViTModel`
        names, which `ViTForImageClassification` does not have).
      layout: `'timm'` or `'hf'` (`ViTForImageClassification` names: `vit.` prefix, `classifier`).

    Returns:
      `{name: float32 array}` with the library's names and shapes (see the module docstring); timm's q, k, v fused
      into `attn.qkv` `[3 D, D]`. Values are copied exactly (transposes and reshapes only).

    Raises:
      ValueError: an unknown layout, or parameters the layout has no name for (listed).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    out, used = {}, set()
    for ours, theirs, kind in _rows(layout, depth_of(flat)):
        for our_leaf, their_leaf in _leaves(kind):
            key = f"{ours}/{our_leaf}" if our_leaf else ours
            if key in flat:
                out[f"{theirs}.{their_leaf}" if their_leaf else theirs] = _to_torch(kind, our_leaf,
                                                                                   np.asarray(flat[key]))
                used.add(key)
    left = sorted(set(flat) - used)
    if left:
        raise ValueError(f"parameters {left} have no equivalent in the {layout} ViT layout")
    if layout == TIMM:
        for name in [k for k in out if "#q." in k]:
            parts = [out.pop(name.replace("#q.", f"#{c}.")) for c in _QKV]
            out[name.replace("#q.", ".")] = np.concatenate(parts, axis=0)
    else:
        out = {(k if k.startswith(("classifier.", "pooler.")) else "vit." + k): v for k, v in out.items()}
    return out


def to_vit_jax(state_dict: Mapping[str, np.ndarray], layout: str,
               shapes: Mapping[str, tuple] | None = None, source_grid: tuple | None = None) -> tuple[dict, bool]:
    """A timm or Hugging Face ViT state dict -> our flat parameter names (vit_jax layout, unscanned).

    Args:
      state_dict: `{name: array}` as read from the `.safetensors` file.
      layout: `'timm'` or `'hf'` (`detect_layout`); Hugging Face names with or without `vit.`, classic or
        transformers-5 module names.
      shapes: our model's flat parameter shapes, if known: Dense kernels whose size matches are reshaped to them
        (the attention kernels' heads axis, which the PyTorch layouts do not store).
      source_grid: the checkpoint's patch grid `(h, w)`, if known (`config.init_posemb_grid`): a timm posemb with a
        class token holds a CLS entry exactly when its length is h·w + 1. Without it a timm posemb of length N
        holds one when N − 1 is a square or N is not (197 = 14² + 1: yes; 196: no, DeiT-III's `no_embed_class`);
        a non-square grid whose N is a square (3×5 + 1 = 16) needs the grid.

    Returns:
      `(flat, posemb_has_cls)`: entries under our names (names without an equivalent, e.g. timm's `fc_norm` or
      `reg_token`, are kept under their own names so the caller lists them), and whether the posemb has a CLS
      entry in front of the grid.

    timm files of DeiT, DeiT III, DINOv2 (with or without registers; the original repository's `register_tokens`
    is read as `reg_token`) and CLIP towers load (module docstring); LayerScale gammas become `…/ls1`, `…/ls2` and
    `norm_pre` `Transformer/norm_pre`.

    Raises:
      ValueError: an unknown layout; a SwiGLU MLP (`check_timm_supported`, one line).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    shapes = shapes or {}
    sd = {k: np.asarray(v) for k, v in state_dict.items()}
    if layout == TIMM:
        check_timm_supported(sd)
        if "register_tokens" in sd and "reg_token" not in sd:  # the DINOv2 repository's name
            sd["reg_token"] = sd.pop("register_tokens")
    if layout == HF:
        sd = {k[len("vit."):] if k.startswith("vit.") else k: v for k, v in sd.items()}
        for rx, repl in _HF_V5_NAMES:
            sd = {rx.sub(repl, k): v for k, v in sd.items()}
    depth = 1 + max((int(m.group(1)) for k in sd if (m := _BLOCK_INDEX[layout].match(k))), default=-1)
    if layout == TIMM:
        for i in range(depth):
            for leaf in ("weight", "bias"):
                fused = sd.get(f"blocks.{i}.attn.qkv.{leaf}")
                if fused is not None and fused.shape[0] % 3 == 0:
                    del sd[f"blocks.{i}.attn.qkv.{leaf}"]
                    for c, part in zip(_QKV, np.split(fused, 3, axis=0), strict=True):
                        sd[f"blocks.{i}.attn.qkv#{c}.{leaf}"] = part
    out = {}
    for ours, theirs, kind in _rows(layout, depth):
        for our_leaf, their_leaf in _leaves(kind):
            name = f"{theirs}.{their_leaf}" if their_leaf else theirs
            if name in sd:
                key = f"{ours}/{our_leaf}" if our_leaf else ours
                out[key] = _from_torch(kind, our_leaf, sd.pop(name), shapes.get(key))
    out.update(sd)  # no equivalent here: reported by the caller under the library's own name
    n = np.shape(out[POSEMB])[1] if np.ndim(out.get(POSEMB)) == 3 else 0
    if "cls" not in out or not n:
        has_cls = False
    elif layout == HF:  # Hugging Face's position embeddings always hold the class token's entry
        has_cls = True
    elif source_grid:
        has_cls = n == source_grid[0] * source_grid[1] + 1
    else:
        has_cls = math.isqrt(n - 1) ** 2 == n - 1 or math.isqrt(n) ** 2 != n
    return out, has_cls
