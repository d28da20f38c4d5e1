"""Closed-form ridge-regression linear probes of the analysis (Raghu et al. 2021 §7; ViT paper §4.1 few-shot).

A thin layer over `vit_jax_struct/fewshot.py`, the one ridge implementation shared with the training-time few-shot
evaluator (big_vision's `fewshot`): {−1, +1} one-vs-all targets, `W = (AᵀA + λI)⁻¹ AᵀY` on features with an
appended constant 1 (the bias column is regularised too), prediction `argmax_k (a W)_k`. `λ` is chosen from
`LAMBDAS` on a held-out part of the train split; k-shot probes draw k examples per class from the rest of it
(deterministic given the seed).
"""

from __future__ import annotations

from vit_jax_struct import fewshot
from vit_jax_struct.fewshot import k_shot_indices, ridge_accuracy, ridge_fit  # noqa: F401 -- re-exported

LAMBDAS = (1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4)


def probe(train_x, train_y, test_x, test_y, num_classes: int, shots=(1, 5, 10, 25, 0), seed: int = 0,
          holdout_fraction: float = 0.2) -> dict:
    """Accuracy of k-shot (k > 0) and full-train (k = 0, key "full") ridge probes on one representation.

    Features `[N, ...]` / `[M, ...]`, int labels `[N]` / `[M]`. λ is chosen for each k by accuracy on a fixed
    held-out `holdout_fraction` of the train split (never used to fit); one shot draw per k.

    Returns:
      `{"1": acc, "5": acc, …, "full": acc, "lambda/1": λ, …}`.
    """
    res = fewshot.few_shot(train_x, train_y, test_x, test_y, num_classes, shots=shots, repeats=1, seed=seed,
                           holdout=float(holdout_fraction), l2_grid=LAMBDAS)
    return {k: v for k, v in res.items() if not k.startswith("std/")}
