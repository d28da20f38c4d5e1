"""Few-shot linear evaluation by closed-form ridge regression: the one implementation behind the training-time
`config.fewshot` evaluator and the analysis probes (`vit_jax_struct/analysis/probes.py`).

Method (big_vision's `fewshot` evaluator, `big_vision/evaluators/fewshot_lsr.py`; the ViT paper, Dosovitskiy et
al. 2021 §4.1 "few-shot linear accuracy"; Raghu et al. 2021 §7, the 10-shot probe of Figure 12):

- frozen representations `x` `[N, D]` (the model's `pre_logits` during training), float64 on the host;
- {−1, +1} one-vs-all targets `Y` `[N, K]` (`+1` for the example's class, `−1` elsewhere);
- an appended constant-1 column (bias, regularised like the weights), `A = [x, 1]` `[N, D+1]`;
- the ridge solution `W = (AᵀA + λI)⁻¹ AᵀY` `[D+1, K]` (the dual `Aᵀ(AAᵀ + λI)⁻¹Y` when D+1 > N: the same W);
- prediction `argmax_k (a W)_k`;
- k shots per class drawn from the train split, `λ` chosen from a grid by accuracy on held-out train examples that
  are never among the shots, the draw repeated with `repeats` seeds and the test accuracies averaged.
"""

from __future__ import annotations

import numpy as np

SHOTS = (1, 5, 10, 25)
L2_GRID = tuple(2.0 ** e for e in range(-10, 11, 2))  # 2^-10 … 2^10


def design(x) -> np.ndarray:
    """`[N, ...]` features → `[N, D+1]` float64 design matrix (flattened, with a constant-1 bias column)."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)


def targets(labels, num_classes: int) -> np.ndarray:
    """Integer labels `[N]` → {−1, +1} one-vs-all targets `[N, K]` float64.

    Raises:
      ValueError: a label outside [0, num_classes).
    """
    labels = np.asarray(labels, np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]")
    y = -np.ones((len(labels), num_classes))
    y[np.arange(len(labels)), labels] = 1.0
    return y


def ridge_fit(x, labels, num_classes: int, lam: float) -> np.ndarray:
    """Ridge weights `[D+1, K]` float64 for features `[N, ...]` and integer labels `[N]` on {−1, +1} targets.

    Raises:
      ValueError: `lam` < 0 (λ = 0 is allowed, as ordinary least squares, where AᵀA is invertible).
    """
    if lam < 0:
        raise ValueError(f"the ridge parameter must be ≥ 0, got {lam}")
    a, y = design(x), targets(labels, num_classes)
    d = a.shape[1]
    if d <= len(a):
        return np.linalg.solve(a.T @ a + lam * np.eye(d), a.T @ y)
    return a.T @ np.linalg.solve(a @ a.T + lam * np.eye(len(a)), y)  # dual form, same solution


def ridge_accuracy(w, x, labels) -> float:
    """Top-1 accuracy of ridge weights `[D+1, K]` on features `[N, ...]` and labels `[N]`."""
    return float(np.mean(np.argmax(design(x) @ w, -1) == np.asarray(labels)))


def k_shot_indices(labels, k: int, seed: int, exclude=()) -> np.ndarray:
    """Sorted int64 indices of k examples per class (all of a class if it has fewer), none in `exclude`.

    Deterministic in `seed` (numpy `default_rng`); classes in increasing label order.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    keep = np.ones(len(labels), bool)
    keep[np.asarray(exclude, np.int64)] = False
    out = []
    for c in np.unique(labels):
        idx = np.flatnonzero((labels == c) & keep)
        out += list(rng.permutation(idx)[:k])
    return np.sort(np.asarray(out, np.int64))


def holdout_indices(n: int, n_holdout: int, seed: int) -> np.ndarray:
    """Sorted indices of `n_holdout` of `n` train examples kept for choosing λ (at least 1, at most n − 1)."""
    n_holdout = int(min(max(1, n_holdout), max(1, n - 1)))
    return np.sort(np.random.default_rng(seed).permutation(n)[:n_holdout])


def fit_select(x, labels, hold_x, hold_labels, num_classes: int, l2_grid=L2_GRID) -> tuple[np.ndarray, float]:
    """Ridge weights `[D+1, K]` fit on `(x, labels)` with λ from `l2_grid` best on the held-out examples.

    Ties go to the first λ of the grid. Returns `(W, λ)`.

    Raises:
      ValueError: an empty `l2_grid`.
    """
    if not len(l2_grid):
        raise ValueError("l2_grid is empty")
    best = None
    for lam in l2_grid:
        w = ridge_fit(x, labels, num_classes, lam)
        acc = ridge_accuracy(w, hold_x, hold_labels)
        if best is None or acc > best[0]:
            best = (acc, w, float(lam))
    return best[1], best[2]


def few_shot(train_x, train_y, test_x, test_y, num_classes: int, shots=SHOTS, repeats: int = 1, seed: int = 0,
             holdout: int | float = 0.2, l2_grid=L2_GRID) -> dict:
    """k-shot ridge accuracy on one representation, averaged over `repeats` draws of the shots.

    Args:
      train_x, train_y: `[N, ...]` features and `[N]` int labels the shots (and the held-out examples) come from.
      test_x, test_y: `[M, ...]`, `[M]`: the accuracy is measured here.
      shots: k values; `0` means "all train examples not held out" (the full linear probe, key "full").
      repeats: shot draws per k (seeds `seed`, `seed + 1`, …); the held-out examples are the same for every draw.
      holdout: held-out examples for choosing λ: a count (int) or a fraction of N (float < 1).

    Returns:
      `{"1": mean test acc, …, "full": …, "lambda/1": λ of the first draw, …, "std/1": std over draws, …}`.
    """
    train_y = np.asarray(train_y)
    n = len(train_y)
    n_hold = round(holdout * n) if isinstance(holdout, float) and holdout < 1 else int(holdout)
    hold = holdout_indices(n, n_hold, seed + 1)
    rest = np.setdiff1d(np.arange(n), hold)
    out = {}
    for k in shots:
        key = "full" if k == 0 else str(k)
        accs, lams = [], []
        for r in range(1 if k == 0 else repeats):
            fit = rest if k == 0 else k_shot_indices(train_y, k, seed + r, exclude=hold)
            w, lam = fit_select(train_x[fit], train_y[fit], train_x[hold], train_y[hold], num_classes, l2_grid)
            accs.append(ridge_accuracy(w, test_x, test_y))
            lams.append(lam)
        out[key], out[f"lambda/{key}"], out[f"std/{key}"] = float(np.mean(accs)), lams[0], float(np.std(accs))
    return out
