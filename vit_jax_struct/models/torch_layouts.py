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
    …/encoderblock_{i}/LayerNorm_0                blocks.{i}.norm1           vit.encoder.layer.{i}.layernorm_before
    …/MultiHeadDotProductAttention_1/query|key|value  blocks.{i}.attn.qkv      …attention.attention.query|key|value
      kernel [D, heads, d_head]                     [3 D, D] (q, k, v fused)   [D, D] each
    …/MultiHeadDotProductAttention_1/out          blocks.{i}.attn.proj       …attention.output.dense
      kernel [heads, d_head, D]
    …/LayerNorm_2                                 blocks.{i}.norm2           …layernorm_after
    …/MlpBlock_3/Dense_0 | Dense_1                blocks.{i}.mlp.fc1 | fc2   …intermediate.dense | …output.dense
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


def read_safetensors_metadata(path) -> dict[str, str]:
    """The `__metadata__` of a `.safetensors` header (`{}` when there is none): 8 bytes of header length, then JSON.

    Raises:
      FileNotFoundError: no such file. ValueError: the header does not parse.
    """
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
        header = json.loads(head[8:8 + n])
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"checkpoint {path!r} is not a readable safetensors file (header: {e})") from e
    return dict(header.get("__metadata__") or {})


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
        rows += [(f"Transformer/encoderblock_{i}/{r[0]}", pre + r[col], r[3]) for r in _BLOCK_ROWS]
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


def depth_of(flat: Mapping) -> int:
    """Number of encoder blocks of our flat (unscanned) parameters."""
    blocks = {int(m.group(1)) for k in flat if (m := re.match(r"^Transformer/encoderblock_(\d+)/", k))}
    return max(blocks) + 1 if blocks else 0


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

    Raises:
      ValueError: an unknown layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    shapes = shapes or {}
    sd = {k: np.asarray(v) for k, v in state_dict.items()}
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
