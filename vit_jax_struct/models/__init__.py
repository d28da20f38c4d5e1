"""Model registry: one uniform API, `model.apply(variables, images, train=…) -> (logits, out)`."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from vit_jax_struct.models import bit, cnn, vit

# resnetv2: BiT's ResNet-v2 (GroupNorm + weight standardisation; models/bit.py, loads the published BiT .npz files).
MODELS = {"vit": vit.VisionTransformer, "resnet": cnn.ResNet, "vgg": cnn.VGG, "resnetv2": bit.ResNetV2}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def get_model(model_config, num_classes: int):
    """Builds the flax module named by `model_config.name` with the remaining keys as its fields.

    Args:
      model_config: mapping (e.g. `config.model`) with `name` in `MODELS` and that module's fields; `dtype` may be
        given as a string ('float32', 'bfloat16').
      num_classes: size of the classification head.

    Raises:
      ValueError: unknown model name, unknown field (listing the allowed ones), or unknown dtype.
    """
    cfg = dict(model_config)
    name = cfg.pop("name", "vit")
    if name not in MODELS:
        raise ValueError(f"model.name {name!r} is not one of {', '.join(MODELS)}")
    cls = MODELS[name]
    allowed = {f.name for f in dataclasses.fields(cls)} - {"parent", "name", "num_classes"}
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ValueError(f"model key(s) {unknown} are not fields of {cls.__name__}; allowed: {sorted(allowed)}")
    for key in ("layers", "units"):  # VGG layer list / ResNetV2 units per stage from a config (lists or tuples)
        if cfg.get(key) is not None:
            cfg[key] = tuple(cfg[key])
    if isinstance(cfg.get("dtype"), str):
        if cfg["dtype"] not in DTYPES:
            raise ValueError(f"model.dtype {cfg['dtype']!r} is not one of {', '.join(DTYPES)}")
        cfg["dtype"] = DTYPES[cfg["dtype"]]
    if name == "vit":
        vit.decode_variant(cfg.get("variant", "Ti/16"))  # Fail at build time, not at the first step.
    return cls(num_classes=num_classes, **cfg)
