"""Minibatch linear CKA with the unbiased HSIC estimator.

CKA (Kornblith et al. 2019, Eq. 2): `CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))` for Gram matrices
`K = X Xᵀ`, `L = Y Yᵀ` of two representations of the same n examples (linear kernel; a layer's representation is
its activation flattened per example, tokens × channels).

HSIC₁ is the unbiased estimator of Song et al. 2012 (Eq. 5), with K̃, L̃ the Gram matrices with zeroed diagonals:

    HSIC₁(K, L) = [ tr(K̃ L̃) + (1ᵀK̃1)(1ᵀL̃1) / ((n−1)(n−2)) − 2/(n−2) · 1ᵀK̃L̃1 ] / (n (n−3))

Minibatch CKA (Nguyen et al. 2021, Eq. 3; used by Raghu et al. 2021 §3): HSIC₁ is averaged over k minibatches
before the ratio, `CKA = Σᵢ HSIC₁(Kᵢ, Lᵢ) / sqrt(Σᵢ HSIC₁(Kᵢ, Kᵢ) · Σᵢ HSIC₁(Lᵢ, Lᵢ))`, which is unbiased in the
number of batches and lets every layer pair be accumulated in one pass. All accumulation is in float64; a
representation with (near) zero self-HSIC (e.g. a constant feature) gets CKA 0, never NaN.
"""

from __future__ import annotations

import numpy as np


def gram(x) -> np.ndarray:
    """Linear-kernel Gram matrix `[n, n]` float64 of `x` `[n, ...]` (flattened per example)."""
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    return x @ x.T


def _hsic_terms(grams: np.ndarray):
    """For stacked Gram matrices `[L, n, n]`: zero-diagonal flats `[L, n²]`, row sums `[L, n]`, totals `[L]`."""
    n = grams.shape[-1]
    g = grams.copy()
    idx = np.arange(n)
    g[:, idx, idx] = 0.0
    rows = g.sum(-1)
    return g.reshape(len(g), -1), rows, rows.sum(-1)


def hsic1_cross(grams_a: np.ndarray, grams_b: np.ndarray) -> np.ndarray:
    """Unbiased HSIC₁ for every pair: `[La, n, n] x [Lb, n, n] -> [La, Lb]` (float64); needs n ≥ 4.

    Raises:
      ValueError: fewer than 4 examples, or different example counts.
    """
    n = grams_a.shape[-1]
    if n < 4 or grams_b.shape[-1] != n:
        raise ValueError(f"HSIC₁ needs the same n ≥ 4 examples on both sides, got {n} and {grams_b.shape[-1]}")
    fa, ra, sa = _hsic_terms(grams_a)
    fb, rb, sb = _hsic_terms(grams_b)
    trace = fa @ fb.T  # tr(K̃ L̃) = Σ K̃ ∘ L̃ (both symmetric)
    cross = ra @ rb.T  # 1ᵀ K̃ L̃ 1 = (K̃ 1) · (L̃ 1)
    return (trace + np.outer(sa, sb) / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * cross) / (n * (n - 3))


class MinibatchCKA:
    """Accumulates HSIC₁ over minibatches for all pairs of layers of two models (or one model with itself).

    `update(feats_a, feats_b=None)` takes lists of per-layer activations `[n, ...]` of the same n examples;
    `result()` returns the `[La, Lb]` CKA matrix (float64, 0 where a self-HSIC is ≤ `eps`).
    """

    def __init__(self, eps: float = 1e-12):
        self.eps = eps
        self.xy = self.xx = self.yy = None

    def update(self, feats_a, feats_b=None):
        ga = np.stack([gram(f) for f in feats_a])
        self.update_grams(ga, None if feats_b is None else np.stack([gram(f) for f in feats_b]))

    def update_grams(self, grams_a, grams_b=None):
        """Adds one minibatch given its Gram matrices `[La, n, n]` (and `[Lb, n, n]`; None: the same model), e.g.
        computed on the accelerator next to the forward pass so no layer's features leave it (`analysis/run.py`)."""
        ga = np.asarray(grams_a, np.float64)
        gb = ga if grams_b is None else np.asarray(grams_b, np.float64)
        xy = hsic1_cross(ga, gb)
        xx = np.diag(hsic1_cross(ga, ga)) if grams_b is not None else np.diag(xy)
        yy = np.diag(hsic1_cross(gb, gb)) if grams_b is not None else np.diag(xy)
        if self.xy is None:
            self.xy, self.xx, self.yy = xy, xx, yy
        else:
            self.xy, self.xx, self.yy = self.xy + xy, self.xx + xx, self.yy + yy

    def result(self) -> np.ndarray:
        if self.xy is None:
            raise ValueError("MinibatchCKA.result() before any update()")
        denom = np.sqrt(np.clip(np.outer(self.xx, self.yy), 0.0, None))
        ok = (self.xx[:, None] > self.eps) & (self.yy[None, :] > self.eps)
        return np.where(ok, self.xy / np.where(ok, denom, 1.0), 0.0)


def linear_cka(x, y, batch_size: int | None = None) -> float:
    """Minibatch linear CKA of two representations `[n, ...]` (one batch if `batch_size` is None)."""
    n = len(x)
    bs = batch_size or n
    acc = MinibatchCKA()
    for i in range(0, n - bs + 1, bs):
        acc.update([x[i:i + bs]], [y[i:i + bs]])
    return float(acc.result()[0, 0])


def resnet_unit_groups(layers) -> dict[str, list[int]]:
    """R1's grouping of a ResNet's layers (names as the analysis gives them: `stem`, then `blockXX` residual units in
    forward order): "early" = `stem` and the first quarter of the units, "middle" = the second and third quarters,
    "late" = the rest (ResNet-18: its four stages of two units). Returns `{group: [indices into layers]}`.

    Raises:
      ValueError: fewer than 4 residual units.
    """
    layers = list(layers)
    units = sorted(n for n in layers if n.startswith("block"))
    if len(units) < 4:
        raise ValueError(f"a ResNet grouping needs ≥ 4 residual units, got {layers}")
    q = len(units) // 4
    return {"early": [layers.index(n) for n in ["stem", *units[:q]] if n in layers],
            "middle": [layers.index(n) for n in units[q:3 * q]],
            "late": [layers.index(n) for n in units[3 * q:]]}
