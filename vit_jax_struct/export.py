"""`python -m vit_jax_struct.export --workdir=RUN [--step=N] --format=FORMAT --out=PATH [--overwrite]`.

Writes the ViT parameters of a run's checkpoint (the newest step unless `--step`) in a layout another codebase
reads; `--workdir` and `--out` may be local paths or `gs://` URLs. Formats:

- `vit_jax`: an `.npz` of '/'-joined names exactly as google-research/vision_transformer writes them (our own
  parameter names, encoder unscanned), which its `checkpoint.load` and timm's `_load_weights` read;
- `big_vision`: an `.npz` in big_vision's `params/…` layout (`official.to_big_vision`), the encoder scanned
  (`Transformer/encoderblock` with a leading depth axis) when the run was (`model.scan`);
- `timm`: a `.safetensors` state dict with timm `VisionTransformer` names and shapes (`models/torch_layouts.py`);
  the sidecar holds the `timm.create_model` arguments that load it;
- `hf`: a folder with `model.safetensors`, `config.json` (transformers `ViTForImageClassification`) and
  `preprocessor_config.json` (`ViTImageProcessor`, from `pp.value_range` and `data.image_size`).

Every output gets a JSON sidecar (`PATH.json`; `PATH/export.json` for `hf`): the source run and step, the model
config, the format, the class names and the preprocessing the model expects. The parameters are read onto the host
whatever mesh wrote them (FSDP-sharded checkpoints included) and whatever `model.scan` was; no data is read.

Bad input (a missing run or checkpoint step, an unknown format, a non-ViT run, a model the format cannot express,
an existing output without `--overwrite`) exits with code 2 and one line `error: …` naming the value and what is
allowed, before anything is written.

Parity: the model's MLP uses the GELU of `model.gelu` (default the tanh approximation, flax `nn.gelu`, as vit_jax
and big_vision; `erf` the exact one; `quick` CLIP's QuickGELU) and LayerNorm epsilon `model.layer_norm_eps`
(default 1e-6); the PyTorch configs written here say so (timm `act_layer='gelu_tanh'`, `'gelu'` or `'quick_gelu'`,
transformers `hidden_act='gelu_pytorch_tanh'`, `'gelu'` or `'quick_gelu'`, `layer_norm_eps`; the safetensors
header's `gelu`); with another GELU the logits move by ≈ 1e-3 (tests/fixtures/make_reference.py). vit_jax and
big_vision files are tanh and eps 1e-6 only. LayerScale (`model.layerscale`) and `model.norm_pre` go to timm only
(`init_values`, `pre_norm=True`; timm's pre-norm patch embedding has no bias, so ours is folded into the posemb's
grid entries, `torch_layouts.fold_patch_bias`); a model with eps 1e-5 is written for timm's
`vit_base_patch16_clip_224` entry point, whose LayerNorms have that epsilon (tests/models/test_layouts.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from vit_jax_struct import storage

FORMATS = ("vit_jax", "big_vision", "timm", "hf")
SUFFIX = {"vit_jax": ".npz", "big_vision": ".npz", "timm": ".safetensors", "hf": ""}
SIDECAR_IN_FOLDER = "export.json"
LAYER_NORM_EPS = 1e-6  # flax nn.LayerNorm's default, which the model uses
TIMM_BASE_MODEL = "vit_base_patch16_224"  # any timm VisionTransformer entry point: the kwargs set every size
# timm's CLIP entry point: its LayerNorms have eps 1e-5 (`norm_layer=partial(LayerNorm, eps=1e-5)`, which no JSON
# kwarg can say), used for a model with model.layer_norm_eps=1e-5; the kwargs set everything else.
TIMM_EPS5_MODEL = "vit_base_patch16_clip_224"
TIMM_ACT = {"tanh": "gelu_tanh", "erf": "gelu", "quick": "quick_gelu"}  # model.gelu -> timm act_layer
HF_ACT = {"tanh": "gelu_pytorch_tanh", "erf": "gelu", "quick": "quick_gelu"}  # model.gelu -> transformers hidden_act
ACTIVATION = {"tanh": "GELU, tanh approximation (flax nn.gelu)", "erf": "GELU, exact erf (PyTorch nn.GELU)",
              "quick": "QuickGELU, x * sigmoid(1.702 x) (CLIP)"}
USAGE_EXIT = 2


class ExportError(ValueError):
    """Bad export input; the message is one line naming the value and what is allowed."""


def check_model(model: dict, fmt: str) -> None:
    """Raises `ExportError` if `fmt` has no model that computes what this ViT computes.

    Args:
      model: the run's `config.model` as a dict.
      fmt: one of `FORMATS`.

    Raises:
      ExportError: not a ViT; positional attention, `add_posemb=False` or skip ablations (no library has them);
        sin-cos posemb outside big_vision; register tokens outside timm; a representation layer (`pre_logits`) for
        timm / hf; a GAP classifier
        for hf (transformers' ViT classifies the CLS token only); an erf or quick GELU for vit_jax / big_vision;
        LayerScale (`model.layerscale`) or `model.norm_pre` outside timm; a `model.layer_norm_eps` other than 1e-6
        for vit_jax / big_vision, or other than 1e-6 / 1e-5 for timm.
    """
    name = model.get("name", "vit")
    if name != "vit":
        raise ExportError(f"model.name {name!r} of the run is not a ViT; export writes ViT weights only "
                          "(model.name 'vit')")
    if model.get("attention", "standard") != "standard":
        raise ExportError(f"model.attention {model['attention']!r} has no equivalent in the {fmt} layout; export "
                          "writes the standard ViT (model.attention 'standard')")
    if not model.get("add_posemb", True):
        raise ExportError(f"model.add_posemb False has no equivalent in the {fmt} layout (the posemb is always added "
                          "there)")
    if model.get("skip_ablation"):
        raise ExportError(f"model.skip_ablation {model['skip_ablation']!r} has no equivalent in the {fmt} layout "
                          "(every block has both residuals there)")
    if model.get("posemb", "learn") != "learn" and fmt != "big_vision":
        raise ExportError(f"model.posemb {model['posemb']!r} has no equivalent in the {fmt} layout (a learned "
                          "posemb); use --format=big_vision, whose ViT has posemb 'sincos2d'")
    if model.get("representation_size") and fmt in ("timm", "hf"):
        raise ExportError(f"model.representation_size {model['representation_size']} (a pre_logits layer) has no "
                          f"equivalent in the {fmt} ViT classifier; use --format=vit_jax or --format=big_vision")
    if fmt == "hf" and model.get("classifier", "token") != "token":
        raise ExportError(f"model.classifier {model['classifier']!r}: transformers' ViTForImageClassification "
                          "classifies the CLS token only; use --format=timm (global_pool='avg')")
    if model.get("num_registers", 0) and fmt != "timm":
        raise ExportError(f"model.num_registers {model['num_registers']}: the {fmt} ViT has no register tokens; use "
                          "--format=timm (reg_tokens, no_embed_class=True)")
    if model.get("gelu", "tanh") != "tanh" and fmt in ("vit_jax", "big_vision"):
        raise ExportError(f"model.gelu {model['gelu']!r}: the {fmt} ViT uses flax's tanh GELU; use --format=timm or "
                          "--format=hf, which say which GELU the file needs")
    if model.get("layerscale") is not None and fmt != "timm":
        raise ExportError(f"model.layerscale {model['layerscale']}: the {fmt} ViT has no LayerScale; use "
                          "--format=timm (init_values, blocks.{i}.ls1/ls2.gamma)")
    if model.get("norm_pre") and fmt != "timm":
        raise ExportError(f"model.norm_pre True: the {fmt} ViT has no LayerNorm before the first block; use "
                          "--format=timm (pre_norm=True)")
    eps = float(model.get("layer_norm_eps", LAYER_NORM_EPS))
    allowed_eps = {"vit_jax": (1e-6,), "big_vision": (1e-6,), "timm": (1e-6, 1e-5)}.get(fmt)
    if allowed_eps is not None and eps not in allowed_eps:
        raise ExportError(f"model.layer_norm_eps {eps}: the {fmt} ViT's LayerNorms have eps "
                          f"{' or '.join(map(str, allowed_eps))}; use --format=hf (layer_norm_eps in config.json)")


def _arch(model: dict, num_classes: int) -> dict:
    from vit_jax_struct.models import get_model

    try:
        a = get_model(model, num_classes).arch()
    except ValueError as e:  # e.g. a key of an older model version
        raise ExportError(f"the run's config.model does not build: {e}") from None
    return {**a, "classifier": model.get("classifier", "token"), "num_classes": num_classes,
            "gelu": model.get("gelu", "tanh"), "num_registers": int(model.get("num_registers", 0) or 0),
            "layerscale": model.get("layerscale"), "norm_pre": bool(model.get("norm_pre", False)),
            "layer_norm_eps": float(model.get("layer_norm_eps", LAYER_NORM_EPS))}


def timm_model_name(arch: dict) -> str:
    """The timm entry point the exported kwargs go to: `TIMM_EPS5_MODEL` for LayerNorm eps 1e-5, else
    `TIMM_BASE_MODEL`."""
    return TIMM_EPS5_MODEL if arch.get("layer_norm_eps", LAYER_NORM_EPS) == 1e-5 else TIMM_BASE_MODEL


def timm_kwargs(arch: dict, image_size: int) -> dict:
    """Keyword arguments of `timm.create_model(timm_model_name(arch), **kwargs)` for the model `arch` describes
    (`_arch`: width, depth, mlp_dim, num_heads, patch_size, classifier, num_classes, gelu, num_registers,
    layerscale -> `init_values`, norm_pre -> `pre_norm`).

    Raises:
      ExportError: an MLP width timm cannot express as `int(width * mlp_ratio)`.
    """
    ratio = arch["mlp_dim"] / arch["width"]
    if int(arch["width"] * ratio) != arch["mlp_dim"]:
        raise ExportError(f"model.mlp_dim {arch['mlp_dim']} is not int(width * mlp_ratio) for width "
                          f"{arch['width']}, so timm cannot build it")
    token = arch["classifier"] == "token"
    kw = dict(img_size=image_size, patch_size=arch["patch_size"], embed_dim=arch["width"], depth=arch["depth"],
              num_heads=arch["num_heads"], mlp_ratio=ratio, qkv_bias=True, num_classes=arch["num_classes"],
              class_token=token, global_pool="token" if token else "avg", fc_norm=False,
              act_layer=TIMM_ACT[arch.get("gelu", "tanh")])
    if arch.get("layerscale") is not None:  # LayerScale (DeiT III, DINOv2): ls1/ls2.gamma
        kw.update(init_values=float(arch["layerscale"]))
    if arch.get("norm_pre") or timm_model_name(arch) != TIMM_BASE_MODEL:  # the CLIP entry point's default is True
        kw.update(pre_norm=bool(arch.get("norm_pre")))
    if arch.get("num_registers"):  # registers carry no posemb: timm's no_embed_class layout (torch_layouts)
        kw.update(reg_tokens=arch["num_registers"], no_embed_class=True)
    return kw


def _labels(class_names, num_classes: int) -> list[str]:
    if class_names is not None and len(class_names) == num_classes:
        return [str(c) for c in class_names]
    return [f"LABEL_{i}" for i in range(num_classes)]  # transformers' own default names


def hf_config(arch: dict, image_size: int, class_names=None) -> dict:
    """`config.json` of a transformers `ViTForImageClassification` for the model `arch` describes (token
    classifier); `id2label` from `class_names` (label order), `LABEL_<i>` where they are unknown."""
    labels = _labels(class_names, arch["num_classes"])
    return {"architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": arch["width"],
            "num_hidden_layers": arch["depth"], "num_attention_heads": arch["num_heads"],
            "intermediate_size": arch["mlp_dim"],
            "hidden_act": HF_ACT[arch.get("gelu", "tanh")],
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
            "layer_norm_eps": arch.get("layer_norm_eps", LAYER_NORM_EPS),
            "image_size": image_size, "patch_size": arch["patch_size"], "num_channels": 3, "qkv_bias": True,
            "encoder_stride": arch["patch_size"], "id2label": {str(i): c for i, c in enumerate(labels)},
            "label2id": {c: i for i, c in enumerate(labels)}}


def preprocessing(image_size: int, value_range) -> dict:
    """What the model expects as input: RGB `[S, S, 3]`, `x = uint8 / 255 * (high - low) + low`, and the same as
    a per-channel `mean` / `std` on `uint8 / 255` (`(x01 - mean) / std`, the PyTorch convention). `value_range`:
    `preprocess.input_scaling` of the run's `pp` (a per-channel `(mean, std)` from `pp.normalize` is written as is,
    with `value_range` None)."""
    from vit_jax_struct.data import preprocess

    value_range = preprocess.check_value_range(value_range)
    if np.ndim(value_range[0]):
        mean, std = value_range
        return {"image_size": int(image_size), "value_range": None, "channels": "RGB",
                "formula": "x = (uint8 / 255 - mean) / std", "mean": list(mean), "std": list(std)}
    lo, hi = value_range
    return {"image_size": int(image_size), "value_range": [lo, hi], "channels": "RGB",
            "formula": "x = uint8 / 255 * (high - low) + low", "mean": [-lo / (hi - lo)] * 3,
            "std": [1.0 / (hi - lo)] * 3}


def hf_preprocessor_config(pp: dict) -> dict:
    """`preprocessor_config.json` of a transformers `ViTImageProcessor` giving the inputs `preprocessing` says."""
    return {"image_processor_type": "ViTImageProcessor", "do_resize": True, "resample": 2,
            "size": {"height": pp["image_size"], "width": pp["image_size"]}, "do_rescale": True,
            "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": pp["mean"], "image_std": pp["std"]}


def convert(params: dict, fmt: str, scan: bool = False) -> dict[str, np.ndarray]:
    """Our ViT parameters (nested, scanned or not) -> the flat tensors of `fmt`.

    Returns:
      `{name: array}`: vit_jax `'/'` names (unscanned), big_vision `params/…` names (scanned when `scan`), timm
      or Hugging Face (`ViTForImageClassification`) `.` names; values copied exactly, except for timm with
      registers (`torch_layouts.fold_cls_posemb`) or `norm_pre` (`torch_layouts.fold_patch_bias`): same logits.
    """
    from vit_jax_struct.models import official, torch_layouts, vit

    params = vit.unstack_blocks(params)
    if fmt == "big_vision":
        return official.to_big_vision(params, scan=scan)
    flat = {k: np.asarray(v) for k, v in official.flatten(params).items()}
    if fmt == "timm" and "Transformer/norm_pre/scale" in flat:  # timm's pre_norm patch embedding has no bias
        flat = torch_layouts.fold_patch_bias(flat)
    if fmt == "timm" and "registers" in flat:
        flat = torch_layouts.fold_cls_posemb(flat)
    return flat if fmt == "vit_jax" else torch_layouts.from_vit_jax(flat, fmt)


def _read_config(workdir: str) -> dict:
    if not storage.isdir(workdir):
        raise ExportError(f"--workdir {workdir!r}: no such run folder (a folder with config.json and checkpoints/)")
    path = storage.join(workdir, "config.json")
    if not storage.exists(path):
        raise ExportError(f"--workdir {workdir!r} has no config.json: give the folder a training run wrote")
    return json.loads(storage.read_text(path))


def _check_out(out: str, fmt: str, overwrite: bool) -> None:
    if not out:
        raise ExportError(f"--out is required: {'a folder' if fmt == 'hf' else 'a ' + SUFFIX[fmt] + ' file'} "
                          f"for --format={fmt}")
    suffix = SUFFIX[fmt]
    if suffix and not out.endswith(suffix):
        raise ExportError(f"--out {out!r} must end with {suffix} for --format={fmt}")
    if not suffix and out.rstrip("/").endswith((".npz", ".safetensors", ".json")):
        raise ExportError(f"--out {out!r} must be a folder for --format=hf (it gets model.safetensors, config.json)")
    empty_folder = storage.isdir(out) and not storage.listdir(out)
    if storage.exists(out) and not overwrite and not empty_folder:
        raise ExportError(f"--out {out!r} exists; pass --overwrite to replace it")
    if suffix and storage.isdir(out):
        raise ExportError(f"--out {out!r} is a folder; --format={fmt} writes one {suffix} file")


def export(workdir: str, fmt: str, out: str, step: int | None = None, overwrite: bool = False) -> dict:
    """Writes the ViT parameters of run `workdir` in layout `fmt` to `out`, plus the JSON sidecar.

    Args:
      workdir: a run folder (local or `gs://`) with `config.json` and `checkpoints/`.
      fmt: one of `FORMATS`.
      out: the `.npz` (vit_jax, big_vision), `.safetensors` (timm) or folder (hf) to write.
      step: the checkpoint step; None: the newest.
      overwrite: replace an existing `out`.

    Returns:
      the sidecar dict (also written beside the output).

    Raises:
      ExportError: bad input (see the module docstring), before anything is written.
      storage.StorageError: a write failed.
    """
    from vit_jax_struct.train import checkpoint, trainer

    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    workdir = str(workdir).rstrip("/")
    config = _read_config(workdir)
    model = dict(config.get("model", {}))
    check_model(model, fmt)
    _check_out(out, fmt, overwrite)
    image_size = int(config["data"]["image_size"])
    from vit_jax_struct.data import preprocess

    value_range = preprocess.input_scaling(config.get("pp", {}))
    names_path = storage.join(workdir, trainer.CLASS_NAMES)
    class_names = json.loads(storage.read_text(names_path)) if storage.exists(names_path) else None
    try:
        params, step = checkpoint.host_params(workdir, step)
    except FileNotFoundError as e:
        raise ExportError(str(e)) from None
    return write_weights(params, model, fmt, out, image_size=image_size, value_range=value_range,
                         class_names=class_names,
                         source={"workdir": workdir, "step": int(step),
                                 "checkpoint": storage.join(workdir, "checkpoints", str(step))})


def write_weights(params: dict, model: dict, fmt: str, out: str, *, image_size: int, value_range=(-1.0, 1.0),
                  class_names=None, source: dict | None = None) -> dict:
    """Writes ViT parameters in layout `fmt` to `out` (no checks of `out`; `export` makes them) plus the sidecar.

    Args:
      params: nested float32 parameters (numpy or JAX arrays), scanned or not, of the model `model` describes.
      model: `config.model` as a dict (checked with `check_model`).
      fmt, out: as in `export`.
      image_size, value_range: `data.image_size` and `pp.value_range` of the run (the model's input).
      class_names: class names in label order (Hugging Face `id2label`), or None.
      source: where the parameters come from, for the sidecar.

    Returns:
      the sidecar dict, also written to `out + '.json'` (`out/export.json` for hf).

    Raises:
      ExportError: the model does not fit `fmt` (`check_model`), or hf without a head.
      storage.StorageError: a write failed.
    """
    from vit_jax_struct.models import official, torch_layouts

    check_model(model, fmt)
    head = params.get("head", {}).get("bias")
    num_classes = int(np.shape(head)[0]) if head is not None else 0
    if fmt == "hf" and not num_classes:
        raise ExportError("the model has no head (num_classes 0); ViTForImageClassification needs one, use "
                          "--format=timm")
    arch = _arch(model, num_classes)
    pp = preprocessing(image_size, value_range)
    extra = {}
    if fmt == "timm":
        name = timm_model_name(arch)
        extra["timm"] = {"model_name": name, "kwargs": timm_kwargs(arch, image_size),
                         "load": (f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay="
                                  f"dict(file=PATH, num_classes={num_classes}), **kwargs)")}
    tensors = convert(params, fmt, scan=bool(model.get("scan")))
    if SUFFIX[fmt] and storage.dirname(out):  # a file's missing parent folders are made, as a workdir's are
        storage.makedirs(storage.dirname(out))
    if fmt in ("vit_jax", "big_vision"):
        official.save_npz(out, tensors)
        files, sidecar = [storage.basename(out)], out + ".json"
    elif fmt == "timm":  # the GELU in the header: timm files say nothing of it, and its default is erf
        torch_layouts.write_safetensors(out, tensors, {**torch_layouts.SAFETENSORS_METADATA, "gelu": arch["gelu"]})
        files, sidecar = [storage.basename(out)], out + ".json"
    else:
        storage.makedirs(out)
        torch_layouts.write_safetensors(storage.join(out, official.HF_WEIGHTS), tensors,
                                        {**torch_layouts.SAFETENSORS_METADATA, "gelu": arch["gelu"]})
        storage.write_text(storage.join(out, "config.json"),
                           json.dumps(hf_config(arch, image_size, class_names), indent=2))
        storage.write_text(storage.join(out, "preprocessor_config.json"),
                           json.dumps(hf_preprocessor_config(pp), indent=2))
        files = [official.HF_WEIGHTS, "config.json", "preprocessor_config.json"]
        sidecar = storage.join(out, SIDECAR_IN_FOLDER)
        extra["transformers"] = {"load": "transformers.ViTForImageClassification.from_pretrained(FOLDER)"}
    info = {"format": fmt, "files": files, "exported_by": "vit_jax_struct.export", "source": source or {},
            "model": model, "architecture": arch, "class_names": class_names, "preprocessing": pp,
            "activation": ACTIVATION[arch["gelu"]], "layer_norm_eps": arch["layer_norm_eps"],
            "parameters": int(sum(int(np.size(v)) for v in tensors.values())), **extra}
    storage.write_text(sidecar, json.dumps(info, indent=2))
    return info


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2, as main.py
        print(f"error: {message}", file=sys.stderr)
        sys.exit(USAGE_EXIT)


def main(argv=None) -> int:
    """The command line (see the module docstring); returns the exit code (0 done, 2 bad input, 1 a failed write)."""
    parser = _Parser(prog="python -m vit_jax_struct.export", description=__doc__.split("\n\n")[1])
    parser.add_argument("--workdir", required=True, help="run folder (local or gs://)")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    parser.add_argument("--format", required=True, help=f"one of {', '.join(FORMATS)}")
    parser.add_argument("--out", required=True, help=".npz (vit_jax, big_vision), .safetensors (timm), folder (hf)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    import logging as logging_std

    from absl import logging

    absl_logger = logging.get_absl_logger()
    level = absl_logger.level  # often NOTSET (inherit): restored as it was, not as an effective level
    absl_logger.setLevel(logging_std.ERROR)  # Orbax's read-only notices would bury the one line
    try:
        info = export(args.workdir, args.format, args.out, args.step, args.overwrite)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_EXIT
    except storage.StorageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        absl_logger.setLevel(level)
    print(f"wrote {args.format} {args.out} ({', '.join(info['files'])}; {info['parameters']:,} parameters) from "
          f"{info['source']['checkpoint']}")
    return 0


if __name__ == "__main__":
    # The parameters only pass through the host: no accelerator backend (a TPU runtime's start-up chatter would bury
    # the one line of an error).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
