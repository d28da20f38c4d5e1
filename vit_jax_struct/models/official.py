"""Published ViT checkpoints (`.npz`) loaded into the parameters of `vit.VisionTransformer`.

The ViT weights of Dosovitskiy et al. 2021 ("An Image is Worth 16x16 Words", ICLR; arXiv 2010.11929) and of the
AugReg study (Steiner et al. 2022) are released as `.npz` files, one array per parameter under its '/'-joined path
(e.g. `gs://vit_models/imagenet21k/ViT-B_16.npz`, `gs://vit_models/augreg/*.npz`). The loading rules follow
google-research/vision_transformer `vit_jax/checkpoint.py` (`load`, `inspect_params`, `load_pretrained`) and
google-research/big_vision `big_vision/models/vit.py` (`load`, `fix_old_checkpoints`, `scan_to_pyloop`,
`resample_posemb`). Two layouts are read:

    vit_jax (original release; equals ours)           big_vision
    embedding/{kernel,bias}                           same
    cls                 [1, 1, D] (token only)        same (pool_type='tok' only)
    Transformer/posembed_input/pos_embedding          pos_embedding              [1, h*w, D]: never a CLS entry
                        [1, 1 + h*w, D] token / [1, h*w, D] gap
    Transformer/encoderblock_{i}/LayerNorm_0          same
    …/MultiHeadDotProductAttention_1/{query,key,value,out}   …/MultiHeadDotProductAttention_0/…
    …/LayerNorm_2                                     …/LayerNorm_1
    …/MlpBlock_3/Dense_{0,1}                          …/MlpBlock_0/Dense_{0,1}
                                                      scan=True: Transformer/encoderblock/… with a leading depth axis
    Transformer/encoder_norm                          same
    pre_logits, head                                  same; pool_type='map' adds MAPHead_0 (no equivalent here)

A leading `params/` (big_vision) or `opt/target/` (vit_jax training checkpoints) is removed, and only that subtree
is read. big_vision adds the posemb before it prepends the class token, so its CLS token carries no position; it
loads into our token model with a zero CLS posemb entry, which computes the same function.

The PyTorch layouts of timm (`.safetensors` state dict) and Hugging Face transformers (a model folder with
`model.safetensors`) are read too, recognised from their names and converted by `models/torch_layouts.py`
(`read_weights` reads any of these files; `is_weights_file` tells them from a run's checkpoint folder).

Entry point: `load(path, init_params, classifier=…)` returns parameters with exactly the model's tree, every
checkpoint entry used or explicitly dropped (`reinit` regex), the posemb grid resampled (`resize_posemb`).
The result is in the unscanned layout (`Transformer/encoderblock_{i}`); for a model with a scanned encoder
(`model.scan`) `train/checkpoint.py:load_params` loads into the unstacked tree and stacks the blocks afterwards.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from absl import logging

from vit_jax_struct import storage
from vit_jax_struct.models import torch_layouts

DEFAULT_REINIT = r"^(head|pre_logits)/"
POSEMB = "Transformer/posembed_input/pos_embedding"
POSEMB_RESIZE = ("zoom", "bilinear", "bicubic")
CLASSIFIERS = ("token", "gap")
_PREFIXES = ("params/", "opt/target/")
# big_vision (linen auto-names) -> original vit_jax (pre-linen) names inside an encoder block.
_BLOCK_RENAMES = {"MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1", "LayerNorm_1": "LayerNorm_2",
                  "MlpBlock_0": "MlpBlock_3"}
_BLOCK = re.compile(r"^Transformer/encoderblock_(\d+)/([^/]+)/(.*)$")


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested dict -> `{'a/b/c': leaf}` (the `.npz` key convention)."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def unflatten(flat: Mapping[str, Any]) -> dict:
    """`{'a/b/c': leaf}` -> nested dict (vit_jax `recover_tree`)."""
    tree: dict = {}
    for key, v in flat.items():
        node = tree
        *parents, last = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    return tree


def read_npz(path) -> dict[str, np.ndarray]:
    """Reads an `.npz` into `{'/'-joined path: array}`.

    Args:
      path: a local file, or a URL that `etils.epath` can open (gs:// needs `gcsfs` installed).

    Raises:
      FileNotFoundError: no such file, or the URL cannot be read (with how to copy it locally).
      ValueError: a local file that is not an `.npz` archive (e.g. empty), with its size.
    """
    from etils import epath

    path = str(path)
    if "://" not in path:
        path = os.path.expanduser(path)
        if not epath.Path(path).is_file():
            raise FileNotFoundError(f"checkpoint {path!r}: no such .npz file")
    try:
        # A seekable file handle: np.load reads the arrays one by one, never the whole file as one bytes object.
        with epath.Path(path).open("rb") as f, np.load(f, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as e:
        if "://" not in path:  # A local file that is there but is no .npz archive (an empty or HTML download).
            size = os.path.getsize(path)
            raise ValueError(f"checkpoint {path!r} is not an .npz archive (" + (
                "an empty file, 0 bytes" if not size else f"{size:,} bytes: {type(e).__name__}: {e}") +
                "); download it again (published files: docs/published_models.md)") from e
        # Missing file-system backend, permissions, network: all mean "copy it first".
        raise FileNotFoundError(
            f"checkpoint {path!r} could not be read ({type(e).__name__}: {e}); copy it to a local file first, "
            f"e.g. `gsutil cp {path} /tmp/`, and pass that path (gs:// needs the gcsfs package)") from e


def save_npz(path, params: Mapping) -> str:
    """Writes a params tree (ours = the vit_jax layout) or a flat dict as an `.npz` of '/'-joined keys, like the
    released files (`np.savez`, uncompressed); local or URL, replaced whole (`storage.write_bytes`).

    Raises:
      storage.StorageError: the file cannot be written (naming it).
    """
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in flatten(params).items()})
    storage.write_bytes(path, buf.getvalue())
    return str(path)


WEIGHT_SUFFIXES = (".npz", ".safetensors")
HF_WEIGHTS, HF_INDEX = "model.safetensors", "model.safetensors.index.json"


def is_weights_file(path) -> bool:
    """True if `path` names a file of weights rather than a run: an `.npz` (vit_jax, big_vision, BiT), a
    `.safetensors` (timm or Hugging Face) or a Hugging Face model folder (`model.safetensors`, or the index of a
    sharded one). Only a folder is looked into (`storage.exists`); a file name is judged by its suffix."""
    p = str(path).rstrip("/")
    if p.endswith(WEIGHT_SUFFIXES):
        return True
    return any(storage.exists(storage.join(p, name)) for name in (HF_WEIGHTS, HF_INDEX))


def read_weights(path) -> dict[str, np.ndarray]:
    """Reads a weights file (see `is_weights_file`) into `{name: array}`, names as stored ('/' or '.' joined).

    Args:
      path: an `.npz`, a `.safetensors`, or a Hugging Face model folder (local or URL); a sharded folder
        (`model.safetensors.index.json`) is read shard by shard into one dict.

    Raises:
      FileNotFoundError: no such file, or `path` is none of these (naming what is allowed).
      ValueError: a file that is not a valid safetensors file.
    """
    p = str(path).rstrip("/")
    if p.endswith(".npz"):
        return read_npz(p)
    if p.endswith(".safetensors"):
        return torch_layouts.read_safetensors(p)
    if storage.exists(storage.join(p, HF_WEIGHTS)):
        return torch_layouts.read_safetensors(storage.join(p, HF_WEIGHTS))
    if storage.exists(storage.join(p, HF_INDEX)):
        shards = sorted(set(json.loads(storage.read_text(storage.join(p, HF_INDEX)))["weight_map"].values()))
        out = {}
        for shard in shards:
            out.update(torch_layouts.read_safetensors(storage.join(p, shard)))
        return out
    raise FileNotFoundError(f"checkpoint {p!r} is not a weights file: give an .npz (vit_jax, big_vision, BiT), a "
                            f".safetensors (timm, Hugging Face) or a Hugging Face model folder holding {HF_WEIGHTS}")


# transformers' `hidden_act` -> model.gelu (ACT2FN: "gelu" is torch's exact GELU; "gelu_new", "gelu_fast" and
# "gelu_pytorch_tanh" are the tanh approximation).
HF_GELU = {"gelu": "erf", "gelu_python": "erf", "gelu_pytorch_tanh": "tanh", "gelu_new": "tanh", "gelu_fast": "tanh",
           "quick_gelu": "quick"}
GELU_KINDS = ("tanh", "erf", "quick")  # vit.GELUS


def checkpoint_gelu(path) -> tuple[str | None, str]:
    """The GELU a weights file was trained with, `(gelu, where it was read)`; gelu None when the file does not say.

    `.npz` (vit_jax, big_vision, BiT): `tanh` (flax `nn.gelu`). A Hugging Face folder: its `config.json`
    `hidden_act` (`HF_GELU`). A `.safetensors` file: the header's `gelu` (written by our export), else unknown (timm
    files record no activation; timm's default, `nn.GELU`, is erf).

    Raises:
      ValueError: a Hugging Face folder without `config.json`, or a `hidden_act` that is no GELU this ViT has.
    """
    p = str(path).rstrip("/")
    if p.endswith(".npz"):
        return "tanh", "the .npz layouts (flax nn.gelu)"
    if p.endswith(".safetensors"):
        gelu = torch_layouts.read_safetensors_metadata(p).get("gelu")
        if gelu in GELU_KINDS or not storage.exists(storage.join(storage.dirname(p), "config.json")):
            return (gelu if gelu in GELU_KINDS else None), f"the header of {p}"
        p = storage.dirname(p)  # a Hugging Face folder's model.safetensors: its config.json says
    cfg_path = storage.join(p, "config.json")
    if not storage.exists(cfg_path):
        raise ValueError(f"checkpoint {p!r}: a Hugging Face folder without config.json; its hidden_act (which GELU "
                         "the model was trained with) is needed: copy the model's config.json beside the weights")
    act = json.loads(storage.read_text(cfg_path)).get("hidden_act", "gelu")  # transformers' ViTConfig default
    if act not in HF_GELU:
        raise ValueError(f"checkpoint {p!r}: config.json hidden_act {act!r} is not supported; allowed: "
                         f"{', '.join(sorted(HF_GELU))} (model.gelu 'erf', 'tanh' or 'quick')")
    return HF_GELU[act], f"{cfg_path} (hidden_act {act!r})"


def activation_warning(path, gelu: str = "tanh", layer_norm_eps: float = 1e-6) -> str | None:
    """Checks `model.gelu` (and, for CLIP towers, `model.layer_norm_eps`) against a weights file.

    Args:
      path: the weights file (`config.init_from`; see `checkpoint_gelu`).
      gelu: our `model.gelu`; layer_norm_eps: our `model.layer_norm_eps`.

    Returns:
      None when the file records its GELU and it is ours, or when nothing suggests a mismatch; else one line to log
      as a warning: a timm file records no activation, so a `tanh` model gets the reminder that timm's default is
      erf (DeiT, DeiT III, DINOv2); a timm CLIP tower (`norm_pre` in the header's names) that is not
      `layer_norm_eps=1e-5` with `gelu` `quick` or `erf` gets what the OpenAI / timm CLIP towers use.

    Raises:
      ValueError: the file records a GELU (our export's safetensors header, a Hugging Face `config.json`) that is
        not `gelu`, naming `--config.model.gelu=…`.
    """
    recorded, where = checkpoint_gelu(path)
    if recorded is not None and recorded != gelu:
        raise ValueError(f"config.init_from {str(path)!r} was trained with the {recorded} GELU ({where}) but "
                         f"model.gelu is {gelu!r}: set --config.model.gelu={recorded} (another GELU moves the logits "
                         "by about 1e-3)")
    if recorded is not None:
        return None
    names = set()
    if str(path).endswith(".safetensors"):
        try:
            names = set(torch_layouts.read_safetensors_names(path))
        except (FileNotFoundError, ValueError):
            names = set()
    if "norm_pre.weight" in names and (gelu == "tanh" or layer_norm_eps != 1e-5):
        return (f"init_from {path} is a timm CLIP tower (norm_pre) and records no activation: OpenAI CLIP weights "
                "need --config.model.gelu=quick (QuickGELU, timm's vit_*_clip_quickgelu_*), timm's vit_*_clip_* "
                "models run erf, and every timm CLIP tower has --config.model.layer_norm_eps=1e-5; the model has "
                f"gelu={gelu!r}, layer_norm_eps={layer_norm_eps}")
    if gelu == "tanh":
        return (f"init_from {path} does not record its GELU (timm files do not; timm's default is the exact erf, "
                "which DeiT, DeiT-III and DINOv2 use; OpenAI CLIP towers use quick): model.gelu is 'tanh'; set "
                "--config.model.gelu=erf unless the model was built with act_layer='gelu_tanh'")
    return None


def _strip_prefix(flat: dict) -> dict:
    for prefix in _PREFIXES:
        if any(k.startswith(prefix) for k in flat):  # e.g. big_vision `params/…`: read that subtree only
            return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}
    return dict(flat)


def unstack_blocks(flat: dict) -> dict:
    """Scanned encoder (`Transformer/encoderblock/…` `[depth, …]`) -> `Transformer/encoderblock_{i}/…` `[…]`.

    Raises:
      ValueError: leaves of different depths, or both scanned and per-block entries.
    """
    scan = "Transformer/encoderblock/"
    stacked = {k[len(scan):]: v for k, v in flat.items() if k.startswith(scan)}
    if not stacked:
        return dict(flat)
    if any(_BLOCK.match(k) for k in flat):
        raise ValueError("checkpoint has both a scanned Transformer/encoderblock and per-block "
                         "Transformer/encoderblock_{i} entries")
    depths = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in stacked.items()}
    if len(set(depths.values())) != 1 or None in depths.values():
        raise ValueError(f"scanned Transformer/encoderblock entries disagree on the leading depth axis: {depths}")
    out = {k: v for k, v in flat.items() if not k.startswith(scan)}
    for i in range(next(iter(depths.values()))):
        out.update({f"Transformer/encoderblock_{i}/{k}": v[i] for k, v in stacked.items()})
    return out


def _rename_block(key: str, renames: Mapping[str, str]) -> str:
    m = _BLOCK.match(key)
    if m and m.group(2) in renames:
        return f"Transformer/encoderblock_{m.group(1)}/{renames[m.group(2)]}/{m.group(3)}"
    return key


def canonical_layout(flat: Mapping[str, Any], shapes: Mapping[str, tuple] | None = None,
                     source_grid: tuple | None = None) -> tuple[dict, bool]:
    """Renames a checkpoint (vit_jax, big_vision, timm or Hugging Face; see the module docstring) to our names.

    Args:
      flat: `{'/'-joined path: array}` as read from the `.npz`, or a timm / Hugging Face state dict (`.` names).
      shapes: our model's flat parameter shapes, if known (the PyTorch layouts do not store the attention heads
        axis; `torch_layouts.to_vit_jax`).
      source_grid: the checkpoint's patch grid `(h, w)`, if known: decides whether a timm posemb holds a CLS entry.

    Returns:
      `(flat, posemb_has_cls)`: the entries under our names (encoder unscanned), and whether the posemb
      `[1, N, D]` has a CLS entry in front of the grid: in the vit_jax layout exactly when the checkpoint has a
      `cls` token (the model prepends the token, then adds the posemb); never in big_vision's; always in
      Hugging Face's; in timm's see `torch_layouts`.

    Raises:
      ValueError: a big_vision MAP-head checkpoint, names that collide after renaming, or a SwiGLU MLP
        (`torch_layouts.check_timm_supported`, one line).
    """
    layout = torch_layouts.detect_layout(flat)
    if layout:
        return torch_layouts.to_vit_jax(flat, layout, shapes, source_grid)
    flat = unstack_blocks(_strip_prefix(dict(flat)))
    if any(k.startswith("MAPHead_0/") for k in flat):
        raise ValueError(
            "checkpoint has a big_vision MAPHead_0 (pool_type='map', attention pooling), which this ViT does not "
            "have (model.classifier is 'token' or 'gap'); to keep the encoder only, drop it with a re-init regex "
            r"such as config.init_reinit = r'^(head|pre_logits|MAPHead_0)/' and use model.classifier='gap'")
    out = {}
    for key, v in flat.items():
        # big_vision adds its top-level posemb before prepending the class token.
        k = POSEMB if key == "pos_embedding" else _rename_block(key, _BLOCK_RENAMES)
        if k in out:
            raise ValueError(f"checkpoint entries collide at {k!r} after renaming to the vit_jax layout")
        out[k] = v
    return out, "cls" in flat and "pos_embedding" not in flat


def to_big_vision(params: Mapping, scan: bool = False) -> dict[str, np.ndarray]:
    """Our params -> flat big_vision names (`params/…`), computing the same function (for export and tests).

    The CLS posemb entry is folded into `cls` (big_vision's class token gets no posemb); with `scan=True` the blocks
    are stacked under `params/Transformer/encoderblock` with a leading depth axis.
    """
    inverse = {v: k for k, v in _BLOCK_RENAMES.items()}
    flat = {k: np.asarray(v) for k, v in flatten(params).items()}
    out = {_rename_block(k, inverse): v for k, v in flat.items() if k != POSEMB}
    if POSEMB in flat:
        n_cls = int("cls" in flat)
        out["pos_embedding"] = flat[POSEMB][:, n_cls:]
        if n_cls:
            out["cls"] = flat["cls"] + flat[POSEMB][:, :1]
    if scan:
        blocks = sorted({int(m.group(1)) for m in map(_BLOCK.match, out) if m})
        rest = sorted({k.split("/", 2)[2] for k in out if _BLOCK.match(k)})
        stacked = {f"Transformer/encoderblock/{r}": np.stack([out.pop(f"Transformer/encoderblock_{i}/{r}")
                                                               for i in blocks]) for r in rest}
        out.update(stacked)
    return {f"params/{k}": v for k, v in out.items()}


def _square(n: int, what: str) -> tuple[int, int]:
    s = math.isqrt(n)
    if s * s != n:
        raise ValueError(f"{what} has {n} grid positions, which is not a square grid; give the grid (h, w) "
                         "explicitly (config.init_posemb_grid='h,w' for the checkpoint)")
    return s, s


def resize_posemb(posemb, new_grid, *, old_grid=None, num_prefix: int = 0, method: str = "zoom") -> np.ndarray:
    """Resamples the grid part of a position embedding ("high-res fine-tuning", ViT paper §3.2).

    Args:
      posemb: `[1, N, D]` with `N = num_prefix + h * w`, the grid in row-major order.
      new_grid: `(h', w')` patch grid to resample to.
      old_grid: `(h, w)` of `posemb`; None: a square grid (non-square grids must be given).
      num_prefix: entries in front of the grid that are kept unchanged (1 for a CLS entry, else 0); decided by
        the caller from the model's classifier, never from N.
      method: `'zoom'` (`scipy.ndimage.zoom`, order 1, corners aligned: exactly vit_jax `load_pretrained` and
        big_vision `resample_posemb`), `'bilinear'` or `'bicubic'` (`jax.image.resize`, half-pixel centres,
        antialiased when shrinking). All reproduce a constant grid.

    Returns:
      `[1, num_prefix + h' * w', D]` float32 numpy array; the prefix entries are copied exactly.

    Raises:
      ValueError: `N != num_prefix + h * w` (naming the numbers), a non-square N without `old_grid`, or an
        unknown method.
    """
    if method not in POSEMB_RESIZE:
        raise ValueError(f"posemb resize method {method!r} is not one of {POSEMB_RESIZE}")
    posemb = np.asarray(posemb)
    if posemb.ndim != 3 or posemb.shape[0] != 1:
        raise ValueError(f"pos_embedding must be [1, N, D], got shape {posemb.shape}")
    n, d = posemb.shape[1], posemb.shape[2]
    prefix, grid = posemb[:, :num_prefix], posemb[0, num_prefix:]
    h, w = old_grid if old_grid else _square(n - num_prefix, f"checkpoint pos_embedding [1, {n}, {d}] "
                                                                f"({num_prefix} CLS entries)")
    if n != num_prefix + h * w:
        raise ValueError(f"checkpoint pos_embedding has N={n} entries, but a {h}x{w} grid"
                         f"{' plus a CLS entry' if num_prefix else ''} needs {num_prefix + h * w}")
    nh, nw = (int(x) for x in new_grid)
    grid = grid.reshape(h, w, d)
    if (h, w) == (nh, nw):
        out = grid  # nothing to resample, nothing to log
    elif method == "zoom":
        import scipy.ndimage

        out = scipy.ndimage.zoom(grid.astype(np.float64), (nh / h, nw / w, 1), order=1)
        if out.shape != (nh, nw, d):  # zoom rounds the output size; guard against an off-by-one
            raise ValueError(f"scipy zoom gave grid {out.shape[:2]}, wanted {(nh, nw)}")
    else:
        out = np.asarray(jax.image.resize(grid.astype(np.float32), (nh, nw, d), method))
    if (h, w) != (nh, nw):
        logging.info("posemb: resampled grid %dx%d -> %dx%d (%s), %d CLS entries kept", h, w, nh, nw, method,
                     num_prefix)
    return np.concatenate([prefix.astype(np.float32), out.reshape(1, nh * nw, d).astype(np.float32)], axis=1)


def _listing(keys, shapes=None, limit: int = 20) -> str:
    keys = sorted(keys)
    items = [f"{k} {tuple(np.shape(shapes[k]))}" if shapes is not None else k for k in keys[:limit]]
    return "[" + ", ".join(items) + (f", … ({len(keys) - limit} more)" if len(keys) > limit else "") + "]"


def match_params(flat: Mapping[str, Any], target: Mapping[str, Any], reinit: str | None,
                 what: str = "ViT") -> dict[str, Any]:
    """Matches renamed checkpoint entries to the model's flat parameters, or lists every difference at once.

    Args:
      flat: `{'/'-joined path: array}` of the checkpoint, already in the model's names.
      target: the model's flat parameters (arrays or `jax.ShapeDtypeStruct`s).
      reinit: regex (`re.search`) of paths kept at their `target` value (and dropped from `flat`); None/"": none.
      what: the model family, for the message.

    Returns:
      `{path: value}` with exactly the keys of `target`: numpy arrays in `target`'s dtypes for loaded entries, the
      `target` leaves themselves for re-initialised ones.

    Raises:
      ValueError: naming every checkpoint entry the model lacks, every model parameter the checkpoint lacks and
        every shape mismatch (both shapes), in one message; or re-initialised entries that hold only shapes.
    """
    try:
        rx = re.compile(reinit) if reinit else None
    except re.error as e:
        raise ValueError(f"re-init regex {reinit!r} is invalid: {e}") from e
    dropped = (lambda k: bool(rx.search(k))) if rx else (lambda k: False)
    unused = [k for k in flat if k not in target and not dropped(k)]
    missing = [k for k in target if k not in flat and not dropped(k)]
    mismatched = [k for k in target if k in flat and not dropped(k)
                  and tuple(np.shape(flat[k])) != tuple(target[k].shape)]
    if unused or missing or mismatched:
        shapes = [f"{k}: checkpoint {tuple(np.shape(flat[k]))} vs model {tuple(target[k].shape)}"
                  for k in sorted(mismatched)]
        raise ValueError(
            f"checkpoint does not match the {what} model: "
            f"{len(unused)} checkpoint entries not in the model {_listing(unused, flat)}; "
            f"{len(missing)} model parameters not in the checkpoint {_listing(missing, target)}; "
            f"{len(mismatched)} shape mismatches [{', '.join(shapes[:20])}"
            f"{f', … ({len(shapes) - 20} more)' if len(shapes) > 20 else ''}]. "
            f"Entries matching the re-init regex {reinit!r} are exempt (they keep the model's init).")
    no_value = [k for k in target if dropped(k) and isinstance(target[k], jax.ShapeDtypeStruct)]
    if no_value:
        raise ValueError(f"parameters {_listing(no_value)} are re-initialised (regex {reinit!r}) but init_params "
                         "holds only shapes; pass initialised parameters")
    out = {k: (target[k] if dropped(k) else np.asarray(flat[k], dtype=target[k].dtype)) for k in target}
    logging.info("init: loaded %d parameters, re-initialised %s, dropped checkpoint entries %s",
                 sum(not dropped(k) for k in target), sorted(k for k in target if dropped(k)),
                 sorted(k for k in flat if k not in target))
    return out


def _check_features(flat: Mapping, target: Mapping) -> None:
    """One-line errors when the checkpoint and the model disagree on LayerScale or norm_pre (before the listing of
    every difference that `match_params` would give)."""
    has = lambda d, rx: any(re.match(rx, k) for k in d)
    ls = r"^Transformer/encoderblock_\d+/ls[12]$"
    if has(flat, ls) and not has(target, ls):
        raise ValueError("checkpoint has LayerScale (timm `blocks.{i}.ls1.gamma`, `ls2.gamma`: DeiT III, DINOv2) but "
                         f"the model has none: set --config.model.layerscale={torch_layouts.LAYERSCALE_INIT} (the "
                         "loaded gammas replace that initial value)")
    if has(target, ls) and not has(flat, ls):
        raise ValueError("model.layerscale is set (per-block ls1/ls2) but the checkpoint has no LayerScale "
                         "(`blocks.{i}.ls1.gamma`); set --config.model.layerscale=None")
    pre = r"^Transformer/norm_pre/"
    if has(flat, pre) and not has(target, pre):
        raise ValueError("checkpoint has norm_pre (a LayerNorm before the first block: CLIP's ln_pre, timm "
                         "pre_norm=True) but the model has none: set --config.model.norm_pre=True (timm CLIP towers "
                         "also need --config.model.layer_norm_eps=1e-5, and OpenAI weights --config.model.gelu=quick)")
    if has(target, pre) and not has(flat, pre):
        raise ValueError("model.norm_pre is True but the checkpoint has no norm_pre (timm `norm_pre.weight`); set "
                         "--config.model.norm_pre=False")


def load(checkpoint, init_params: Mapping, *, classifier: str, grid=None, source_grid=None,
         reinit: str | None = DEFAULT_REINIT, posemb_resize: str = "zoom", convert_classifier: bool = False) -> dict:
    """Loads a published ViT checkpoint into exactly the tree of `init_params`.

    Args:
      checkpoint: a weights file (`.npz`, timm `.safetensors`, Hugging Face model folder; see `read_weights`) or
        a dict already read (flat '/'-keys or nested, or a timm / Hugging Face state dict).
      init_params: the model's `params`: freshly initialised arrays (they supply the re-initialised entries) or
        `jax.ShapeDtypeStruct`s (then no entry may need re-initialising).
      classifier: our `model.classifier`, `'token'` or `'gap'`: whether our posemb `[1, N, D]` has a CLS entry
        (N = 1 + h*w) or not (N = h*w). It is never guessed from N.
      grid: our patch grid `(h, w)`; None: square, from our posemb length.
      source_grid: the checkpoint's patch grid `(h, w)`; None: square (a non-square grid must be given).
      reinit: regex (`re.search`) on '/'-joined parameter paths in our layout (e.g. `head/kernel`). Matching model
        parameters keep their value from `init_params`; matching checkpoint entries are dropped. Default
        `^(head|pre_logits)/`: a new head, and no representation layer unless the model has one (vit_jax
        `load_pretrained`'s "drop-head variant"). None or "": load everything.
      posemb_resize: resampling method of `resize_posemb` when the grids differ.
      convert_classifier: allow a checkpoint whose class token disagrees with `classifier`. token checkpoint ->
        'gap' model: the `cls` parameter and the CLS posemb entry are dropped. gap checkpoint -> 'token' model:
        `cls` and its posemb entry start at zero (our init of `cls`). Without it such a load raises.

    Returns:
      nested dict with the tree of `init_params`: numpy arrays in the dtypes of `init_params` for loaded entries,
      the `init_params` leaves themselves for re-initialised ones (arrays already placed stay placed).

    Raises:
      FileNotFoundError: the file cannot be read.
      ValueError: listing, after renaming, the checkpoint entries the model lacks, the model parameters the
        checkpoint lacks, and shape mismatches (each with both shapes); a class-token mismatch without
        `convert_classifier`; a posemb length that does not fit the grid (naming the numbers); a scanned model;
        re-initialised entries without init values; a big_vision MAP head; a distilled DeiT (`dist_token`,
        listing those entries first); LayerScale or `norm_pre` in the checkpoint and not in the model or the other
        way round (one line naming the `--config.model.…` to set); a SwiGLU MLP (one line); other timm features
        this ViT does not have (QK-norm, `fc_norm`, …) are named after the listing
        (`torch_layouts.unsupported_hint`). A DINOv2 `mask_token` is dropped and logged; a patch embedding without
        a bias (timm `pre_norm=True`, CLIP) loads with `embedding/bias` zero (same function).
    """
    if classifier not in CLASSIFIERS:
        raise ValueError(f"model.classifier {classifier!r} is not one of {CLASSIFIERS}")
    try:
        rx = re.compile(reinit) if reinit else None
    except re.error as e:
        raise ValueError(f"re-init regex {reinit!r} is invalid: {e}") from e
    dropped = (lambda k: bool(rx.search(k))) if rx else (lambda k: False)
    raw = flatten(checkpoint) if isinstance(checkpoint, Mapping) else read_weights(checkpoint)
    target = flatten(init_params)
    flat, posemb_has_cls = canonical_layout(raw, {k: tuple(v.shape) for k, v in target.items()}, source_grid)
    distilled = sorted(k for k in flat if k == "dist_token" or k.startswith("head_dist."))
    if distilled:
        raise ValueError(f"checkpoint entries {distilled} are not in the model: the checkpoint is a distilled DeiT "
                         "(timm `dist_token`, `head_dist`): a second class token and head that this ViT does not "
                         "have; not supported (load a non-distilled DeiT instead)")
    if "mask_token" in flat:  # DINOv2's masked-image pre-training token (its repository's files): unused by the ViT
        del flat["mask_token"]
        logging.info("init: dropped checkpoint entry mask_token (DINOv2's masked-patch token, pre-training only)")
    _check_features(flat, target)
    if "embedding/kernel" in flat and "embedding/bias" not in flat and "embedding/bias" in target:
        # timm builds the patch embedding without a bias when pre_norm=True (CLIP's conv1 has none): a zero bias
        flat["embedding/bias"] = np.zeros(target["embedding/bias"].shape, np.float32)
        logging.info("init: the checkpoint's patch embedding has no bias (CLIP): embedding/bias starts at zero")
    if any(k.startswith("Transformer/encoderblock/") for k in target):
        raise ValueError("the model's encoder is scanned (Transformer/encoderblock with a depth axis); load into the "
                         "unscanned layout and stack the blocks with the model's converter")

    n_reg = int(np.shape(flat["registers"])[1]) if np.ndim(flat.get("registers")) == 3 else 0
    if n_reg and np.ndim(flat.get(POSEMB)) == 3:  # registers with a posemb entry (timm no_embed_class=False)
        n = int(np.shape(flat[POSEMB])[1])
        square = lambda m: m >= 0 and math.isqrt(m) ** 2 == m
        with_regs = (n - source_grid[0] * source_grid[1] in (n_reg, n_reg + 1) if source_grid else
                     not (square(n) or square(n - 1)) and (square(n - n_reg) or square(n - n_reg - 1)))
        if with_regs:
            raise ValueError(f"checkpoint's posemb has {n} entries, which include its {n_reg} register tokens (timm "
                             "no_embed_class=False); not supported: our registers carry no position (DINOv2's layout, "
                             "timm no_embed_class=True)")
    src_cls, tgt_cls = "cls" in flat, classifier == "token"
    if src_cls != tgt_cls:
        if not convert_classifier:
            raise ValueError(
                f"checkpoint {'has' if src_cls else 'has no'} class token `cls` but model.classifier is "
                f"{classifier!r}; set config.init_convert_classifier=True to "
                + ("drop the token and its posemb entry (token -> gap)" if src_cls else
                   "add a zero-initialised token and posemb entry (gap -> token)"))
        if src_cls:
            del flat["cls"]
            if posemb_has_cls and POSEMB in flat:
                flat[POSEMB], posemb_has_cls = flat[POSEMB][:, 1:], False
            logging.info("init: token checkpoint into a gap model: dropped cls and its posemb entry")
        elif "cls" in target:
            flat["cls"] = np.zeros(target["cls"].shape, np.float32)
            logging.info("init: gap checkpoint into a token model: cls and its posemb entry start at zero")

    if POSEMB in flat and POSEMB in target and not dropped(POSEMB):
        pe, shape = np.asarray(flat[POSEMB]), tuple(target[POSEMB].shape)
        if pe.ndim == 3 and pe.shape[-1] == shape[-1]:
            n_src = int(posemb_has_cls)  # 1 only if the checkpoint's posemb holds a CLS entry
            n_tgt = int(tgt_cls)
            new_grid = tuple(grid) if grid else _square(shape[1] - n_tgt, f"model pos_embedding {list(shape)} "
                                                                          f"(classifier {classifier!r})")
            if shape[1] != n_tgt + new_grid[0] * new_grid[1]:
                raise ValueError(f"model pos_embedding has N={shape[1]} entries, but grid {new_grid[0]}x"
                                 f"{new_grid[1]} with classifier {classifier!r} needs "
                                 f"{n_tgt + new_grid[0] * new_grid[1]}")
            pe = resize_posemb(pe, new_grid, old_grid=source_grid, num_prefix=n_src, method=posemb_resize)
            if n_tgt and not n_src:  # a class token that carried no position (big_vision, or gap -> token)
                pe = np.concatenate([np.zeros((1, 1, pe.shape[-1]), np.float32), pe], axis=1)
            flat[POSEMB] = pe

    try:
        return unflatten(match_params(flat, target, reinit))
    except ValueError as e:
        hint = torch_layouts.unsupported_hint(raw) if torch_layouts.detect_layout(raw) == torch_layouts.TIMM else ""
        if hint:  # name the timm features behind the unused entries, and what is supported (same line)
            raise ValueError(f"{e} {hint}") from None
        raise
