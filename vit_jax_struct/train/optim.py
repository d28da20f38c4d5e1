"""Optimizer and learning-rate schedules (optax), and the classification losses.

AdamW (Loshchilov & Hutter 2019) with decoupled weight decay in optax's convention: each step subtracts
`lr_t * weight_decay * param` for parameters whose path matches `optim.wd_mask` (kernels by default; biases,
LayerNorm scales, posemb and CLS are not decayed), after global-norm gradient clipping (Pascanu et al. 2013).
Or SGD with momentum (`optim.name='sgd'`), the ViT paper's fine-tuning optimizer.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import optax

from vit_jax_struct.train.sharding import path_str

SCHEDULES = ("cosine", "linear", "constant")
OPTIMIZERS = ("adamw", "sgd")
LOSSES = ("softmax_xent", "sigmoid_xent")


def make_schedule(lr: float, total_steps: int, warmup_steps: int = 0, decay: str = "cosine",
                  end_value: float = 0.0):
    """Linear warmup from 0 to `lr` over `warmup_steps`, then `decay` to `end_value` at `total_steps`.

    Raises:
      ValueError: unknown decay, or warmup_steps not in [0, total_steps].
    """
    if decay not in SCHEDULES:
        raise ValueError(f"optim.schedule {decay!r} is not one of {SCHEDULES}")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"optim.warmup_steps {warmup_steps} is not in [0, total_steps={total_steps}]")
    rest = max(total_steps - warmup_steps, 1)
    if decay == "cosine":
        main = optax.cosine_decay_schedule(lr, rest, alpha=end_value / lr if lr else 0.0)
    elif decay == "linear":
        main = optax.linear_schedule(lr, end_value, rest)
    else:
        main = optax.constant_schedule(lr)
    if warmup_steps == 0:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup_steps), main], [warmup_steps])


def make_optimizer(optim_config, total_steps: int):
    """`(optax.GradientTransformation, schedule)` from `config.optim`.

    Keys: `lr`, `warmup_steps`, `schedule` ('cosine', 'linear', 'constant'), `end_lr`, `weight_decay`,
    `wd_mask` (regex on parameter paths), `b1`, `b2`, `eps`, `grad_clip_norm` (0/None: no clipping), `mu_dtype`
    (Adam's first moment stored in this dtype, e.g. "bfloat16" halves its memory; the second moment stays float32,
    as in big_vision's `scale_by_adam(mu_dtype=…)`), `name` ('adamw' or 'sgd'), `momentum` (sgd; 0: none).
    With `name='sgd'` (`optax.sgd`, heavy-ball momentum) `weight_decay` adds `weight_decay * param` to the
    gradient of `wd_mask` parameters (L2, PyTorch's SGD convention) and `b1`, `b2`, `eps`, `mu_dtype` are unused.

    Raises:
      ValueError: unknown optimizer name, schedule or mu_dtype, or a warmup longer than training.
    """
    sched = make_schedule(optim_config.lr, total_steps, optim_config.get("warmup_steps", 0),
                          optim_config.get("schedule", "cosine"), optim_config.get("end_lr", 0.0))
    pattern = optim_config.get("wd_mask", r"/kernel$")

    def mask(params):
        return jax.tree_util.tree_map_with_path(lambda p, _: bool(re.search(pattern, path_str(p))), params)

    mu_dtype = optim_config.get("mu_dtype") or None
    if mu_dtype not in (None, "float32", "bfloat16"):
        raise ValueError(f"optim.mu_dtype {mu_dtype!r} is not one of '', 'float32', 'bfloat16'")
    name = optim_config.get("name", "adamw")
    if name == "adamw":
        tx = optax.adamw(sched, b1=optim_config.get("b1", 0.9), b2=optim_config.get("b2", 0.999),
                         eps=optim_config.get("eps", 1e-8), weight_decay=optim_config.get("weight_decay", 0.0),
                         mask=mask, mu_dtype=mu_dtype and jnp.dtype(mu_dtype))
    elif name == "sgd":  # Heavy-ball momentum (ViT fine-tuning, Dosovitskiy et al. 2021 App. B.1.1).
        tx = optax.sgd(sched, momentum=optim_config.get("momentum", 0.9) or None)
        if optim_config.get("weight_decay", 0.0):  # L2 on the gradient (passes through the momentum)
            tx = optax.chain(optax.add_decayed_weights(optim_config.weight_decay, mask), tx)
    else:
        raise ValueError(f"optim.name {name!r} is not one of {OPTIMIZERS}")
    clip = optim_config.get("grad_clip_norm", 1.0)
    if clip:
        tx = optax.chain(optax.clip_by_global_norm(clip), tx)
    return tx, sched


def classification_loss(logits, labels, num_classes: int, kind: str = "softmax_xent",
                        label_smoothing: float = 0.0):
    """Per-example loss `[B]` float32 from logits `[B, K]` and labels: integer `[B]`, or float targets `[B, K]`.

    Float targets are soft labels, e.g. mixup / CutMix mixtures (rows summing to 1, `data/mixup.py`); integer labels
    become one-hot. Either is smoothed to `(1 - ls) * targets + ls / K` (Szegedy et al. 2016 §7). `softmax_xent`:
    cross-entropy against those targets. `sigmoid_xent`: sum over classes of binary cross-entropy with the same
    targets (the ViT / big_vision pretraining loss; with mixup, big_vision likewise uses the mixed targets).

    Raises:
      ValueError: unknown kind, or float targets not of shape `[B, num_classes]`.
    """
    if labels.ndim == 2:
        if labels.shape[-1] != num_classes:
            raise ValueError(f"soft targets of shape {labels.shape} do not have num_classes={num_classes} columns")
        targets = labels.astype(jnp.float32)
    else:
        targets = jax.nn.one_hot(labels, num_classes)
    if label_smoothing:
        targets = targets * (1.0 - label_smoothing) + label_smoothing / num_classes
    logits = logits.astype(jnp.float32)
    if kind == "softmax_xent":
        return optax.softmax_cross_entropy(logits, targets)
    if kind == "sigmoid_xent":
        return optax.sigmoid_binary_cross_entropy(logits, targets).sum(-1)
    raise ValueError(f"config.loss {kind!r} is not one of {LOSSES}")
