"""Validation of a whole training config before anything is built or written: `validate(config)`.

Every enum, size and range the trainer reads is checked here, so a typo fails in a second with one line naming the
key, the value and what is allowed (`ConfigError`), instead of deep inside PIL, the model or the first step. Keys a
config does not have are not checked (`configs/common.py:base()` has them all); checks that need the data or the
model (class counts, patch divisibility, parameter trees) stay where that information is, in `trainer.build`.
"""

from __future__ import annotations

import numbers

from vit_jax_struct.data import preprocess, sources
from vit_jax_struct.models import DTYPES, MODELS, vit
from vit_jax_struct.train import optim


class ConfigError(ValueError):
    """A config value is not allowed; the message names the key, the value and what is allowed."""


def _enum(*allowed):
    def check(v):
        return None if v in allowed else f"is not one of {', '.join(repr(a) for a in allowed)}"
    return check


def _int(lo=None, hi=None, none_ok=False, minus_one_ok=False):
    def check(v):
        if v is None and none_ok:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            return "is not an integer"
        if minus_one_ok and v == -1:
            return None
        if lo is not None and v < lo:
            return f"must be ≥ {lo}" + (" (or -1: all remaining devices)" if minus_one_ok else "")
        if hi is not None and v > hi:
            return f"must be ≤ {hi}"
        return None
    return check


def _float(lo=None, hi=None, lo_open=False, hi_open=False):
    def check(v):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return "is not a number"
        if v != v:  # NaN
            return "is NaN"
        if lo is not None and (v < lo or (lo_open and v == lo)):
            return f"must be {'>' if lo_open else '≥'} {lo}"
        if hi is not None and (v > hi or (hi_open and v == hi)):
            return f"must be {'<' if hi_open else '≤'} {hi}"
        return None
    return check


def _value_range(v):
    try:
        lo, hi = (float(x) for x in v)
    except (TypeError, ValueError):
        return "is not a pair (low, high)"
    return None if lo < hi else "must have low < high"


def _int_tuple(lo):
    def check(v):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or not len(v):
            return "is not a non-empty tuple of integers"
        for x in v:
            if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < lo:
                return f"must hold integers ≥ {lo}"
        return None
    return check


def _positive_floats(v):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or not len(v):
        return "is not a non-empty tuple of numbers"
    for x in v:
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not x > 0:
            return "must hold numbers > 0"
    return None


def _bool(v):
    return None if isinstance(v, bool) else "is not True or False"


def _str(v):
    return None if isinstance(v, str) else "is not a string"


RULES = {
    "seed": _int(),
    "total_steps": _int(1),
    "batch_size": _int(1),
    "accum_steps": _int(1),
    "eval_batch_size": _int(0),
    "log_every_steps": _int(1),
    "eval_every_steps": _int(0),
    "checkpoint_every_steps": _int(0),
    "checkpoint_timeout_s": _int(1),
    "keep_checkpoints": _int(1, none_ok=True),
    "save_checkpoints": _bool,
    "tensorboard": _bool,
    "metrics_flush_secs": _float(0),
    "compilation_cache_dir": _str,  # "auto", "" (off), a folder or gs:// URL
    "profile.start_step": _int(1),
    "profile.num_steps": _int(0),
    "profile.process_index": _int(-1),
    "distributed.initialization_timeout": _float(0, lo_open=True),
    "loss": _enum(*optim.LOSSES),
    "label_smoothing": _float(0, 1, hi_open=True),
    "init_posemb_resize": _enum("zoom", "bilinear", "bicubic"),
    "mesh.data": _int(1, minus_one_ok=True),
    "mesh.fsdp": _int(1, minus_one_ok=True),
    "model.name": _enum(*MODELS),
    "model.dtype": _enum(*DTYPES),
    "data.source": _enum(*sources.SOURCES),
    "data.image_size": _int(1),
    "data.num_classes": _int(0),
    "data.train_fraction": _float(0, 1),
    "data.train_examples": _int(0),
    "data.eval_examples": _int(0),
    "data.permutation_patch_size": _int(0),
    "data.num_threads": _int(1),
    "data.prefetch": _int(0),
    "data.worker_count": _int(0),
    "data.decode_errors": _enum("raise", "skip"),
    "data.in_memory": _bool,
    "data.device_augment": _bool,
    "pp.train_crop": _enum(*preprocess.TRAIN_CROPS),
    "pp.crop_area_min": _float(0, 1, lo_open=True),
    "pp.pad": _int(0),
    "pp.flip": _bool,
    "pp.jpeg_draft": _bool,
    "pp.jpeg_decoder": _enum(*sources.JPEG_DECODERS),
    "pp.eval_crop_fraction": _float(0, 1, lo_open=True),
    "pp.value_range": _value_range,
    "pp.normalize": _enum("", *preprocess.NORMALIZATIONS),
    "optim.name": _enum(*optim.OPTIMIZERS),
    "optim.lr": _float(0),
    "optim.warmup_steps": _int(0),
    "optim.schedule": _enum(*optim.SCHEDULES),
    "optim.end_lr": _float(0),
    "optim.weight_decay": _float(0),
    "optim.b1": _float(0, 1, hi_open=True),
    "optim.b2": _float(0, 1, hi_open=True),
    "optim.eps": _float(0, lo_open=True),
    "optim.mu_dtype": _enum("", "float32", "bfloat16"),
    "optim.grad_clip_norm": _float(0),
    "optim.momentum": _float(0, 1, hi_open=True),
    "fewshot.every_steps": _int(0),
    "fewshot.shots": _int_tuple(1),
    "fewshot.repeats": _int(1),
    "fewshot.l2_grid": _positive_floats,
    "fewshot.train_examples": _int(2),
    "fewshot.holdout_examples": _int(1),
    "fewshot.test_examples": _int(0),
}

VIT_RULES = {  # model.name == "vit"
    "model.classifier": _enum("token", "gap"),
    "model.posemb": _enum("learn", "sincos2d"),
    "model.attention": _enum("standard", "positional"),
    "model.remat_policy": _enum(*vit.REMAT_POLICIES),
    "model.dropout": _float(0, 1, hi_open=True),
    "model.attention_dropout": _float(0, 1, hi_open=True),
    "model.head_bias_init": _float(),
    "model.scan": _bool,
    "model.add_posemb": _bool,
    **{f"model.{k}": _int(1, none_ok=True) for k in ("width", "depth", "mlp_dim", "num_heads", "patch_size")},
    "model.representation_size": _int(0, none_ok=True),
}

CNN_RULES = {  # model.name in ("resnet", "vgg", "resnetv2")
    "model.width": _int(1),   # channels of the first stage (64: the standard networks)
    "model.depth": _int(1),
}

_MISSING = object()


def _get(config, dotted):
    node = config
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return _MISSING
    return node


def validate(config) -> None:
    """Checks every known key of a training config (see `RULES`, `VIT_RULES`, `CNN_RULES`) and a few relations
    between keys.

    Raises:
      ConfigError: the first bad value, as `config.<key> <value> <what is allowed>`.
    """
    rules = dict(RULES)
    if _get(config, "model.name") in (_MISSING, "vit"):
        rules.update(VIT_RULES)
    else:
        rules.update(CNN_RULES)
    for key, check in rules.items():
        value = _get(config, key)
        if value is _MISSING:
            continue
        problem = check(value)
        if problem:
            raise ConfigError(f"config.{key} {value!r} {problem}")
    total, warmup = _get(config, "total_steps"), _get(config, "optim.warmup_steps")
    if warmup is not _MISSING and warmup > total:
        raise ConfigError(f"config.optim.warmup_steps {warmup} must be ≤ config.total_steps {total}")
    if _get(config, "model.name") in (_MISSING, "vit"):
        variant = _get(config, "model.variant")
        if variant is not _MISSING:
            try:
                vit.decode_variant(variant)
            except ValueError as e:
                raise ConfigError(f"config.{e}") from None
    train_n, hold_n = _get(config, "fewshot.train_examples"), _get(config, "fewshot.holdout_examples")
    if train_n is not _MISSING and hold_n is not _MISSING and hold_n >= train_n:
        raise ConfigError(f"config.fewshot.holdout_examples {hold_n} must be < config.fewshot.train_examples "
                          f"{train_n} (the shots come from the rest)")
    if _get(config, "data.in_memory") is True and _get(config, "data.decode_errors") == "skip":
        raise ConfigError("config.data.in_memory True needs config.data.decode_errors 'raise' (an unreadable image "
                          "stops the load, naming it; run vit_jax_struct.data.verify to find such files)")
    source = _get(config, "data.source")
    if source == "folder" and not _get(config, "data.root"):
        raise ConfigError("config.data.root '' must name the image folder root/{train,test}/<class>/*.jpg for "
                          "data.source 'folder'")
    if source == "tfds" and not _get(config, "data.name"):
        raise ConfigError("config.data.name '' must name the TFDS dataset (e.g. 'cifar100') for data.source 'tfds'")
