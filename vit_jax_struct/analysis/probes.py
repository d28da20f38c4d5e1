"""Closed-form ridge-regression linear probes (Raghu et al. 2021 §7 / ViT paper §4.1 few-shot evaluation).

Targets are {−1, +1} one-vs-all codes (`+1` for the class, `−1` otherwise); the probe is the ridge solution
`W = (XᵀX + λI)⁻¹ XᵀY` on features with an appended constant 1 (the bias column is regularised too, as in
big_vision's fewshot evaluator), and predicts `argmax_k (x W)_k`. `λ` is chosen from a grid on a held-out part of
the train split; k-shot probes draw k examples per class from the rest of it (deterministic given the seed).
"""

from __future__ import annotations

import numpy as np

LAMBDAS = (1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4)


def _design(x):
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)


def ridge_fit(x, labels, num_classes: int, lam: float) -> np.ndarray:
    """Ridge weights `[D+1, K]` for features `[n, ...]` and integer labels `[n]` on {−1, +1} targets."""
    a = _design(x)
    y = -np.ones((len(a), num_classes))
    y[np.arange(len(a)), np.asarray(labels)] = 1.0
    d = a.shape[1]
    if d <= len(a):
        return np.linalg.solve(a.T @ a + lam * np.eye(d), a.T @ y)
    # Dual form when features outnumber examples: W = Aᵀ (A Aᵀ + λI)⁻¹ Y (same solution).
    return a.T @ np.linalg.solve(a @ a.T + lam * np.eye(len(a)), y)


def ridge_accuracy(w, x, labels) -> float:
    """Top-1 accuracy of ridge weights on features `[n, ...]`."""
    return float(np.mean(np.argmax(_design(x) @ w, -1) == np.asarray(labels)))


def k_shot_indices(labels, k: int, seed: int, exclude=()) -> np.ndarray:
    """k example indices per class (all of a class if it has fewer), not in `exclude`; deterministic."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    excl = set(np.asarray(exclude).tolist())
    out = []
    for c in np.unique(labels):
        idx = [i for i in np.flatnonzero(labels == c) if i not in excl]
        out += list(rng.permutation(idx)[:k])
    return np.sort(np.asarray(out, np.int64))


def probe(train_x, train_y, test_x, test_y, num_classes: int, shots=(1, 5, 10, 25, 0), seed: int = 0,
          holdout_fraction: float = 0.2) -> dict:
    """Accuracy of k-shot (k > 0) and full-train (k = 0, key "full") ridge probes on one representation.

    λ is chosen for each k by accuracy on a fixed held-out `holdout_fraction` of the train split (never used to fit).

    Returns:
      `{"1": acc, "5": acc, …, "full": acc, "lambda/1": λ, …}`.
    """
    train_y = np.asarray(train_y)
    n = len(train_y)
    rng = np.random.default_rng(seed + 1)
    hold = np.sort(rng.permutation(n)[: max(1, round(holdout_fraction * n))])
    rest = np.setdiff1d(np.arange(n), hold)
    out = {}
    for k in shots:
        fit = rest if k == 0 else k_shot_indices(train_y, k, seed, exclude=hold)
        best = max(LAMBDAS, key=lambda lam: ridge_accuracy(
            ridge_fit(train_x[fit], train_y[fit], num_classes, lam), train_x[hold], train_y[hold]))
        w = ridge_fit(train_x[fit], train_y[fit], num_classes, best)
        key = "full" if k == 0 else str(k)
        out[key] = ridge_accuracy(w, test_x, test_y)
        out[f"lambda/{key}"] = best
    return out
