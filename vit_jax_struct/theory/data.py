"""Spatially structured synthetic data (Jelassi, Sander & Li 2022, §2, Definition of the data distribution).

An input is D patches `X = (X_1 … X_D)`, `X_j ∈ R^d`. The D positions are partitioned into L sets S_1 … S_L of size C
(D = L·C); the partition is fixed for the dataset (default: contiguous √C×√C blocks of the √D×√D grid; option:
a random fixed partition). Each example draws a label y ∈ {−1, +1} (balanced) and one set ℓ(X) uniformly; then

    X_j = y · w* + ξ_j                     for j ∈ S_ℓ(X)   (signal patches)
    X_j = ε_j · α · w* · b_j + ξ_j          otherwise        (feature noise with probability q, random signs)

with `w*` a unit vector, `ε_j` uniform ±1, `b_j ~ Bernoulli(q)`, `ξ_j ~ N(0, σ² (I − w* w*ᵀ))` (Gaussian noise
orthogonal to w*). With α ≥ 1 a single patch cannot tell signal from feature noise; only the set structure —
the signal patches agree in sign on one whole set — identifies y. The **no-structure** variant (J10) draws a fresh
random partition for every example, so there is no fixed spatial structure to learn.

Constants the paper leaves to its appendix are config keys (`theory.data`): D, C, d, α, q, σ, grid or random
partition. Arrays are float32 numpy: `X [n, D, d]`, `y [n]` (±1), `signal_set [n]` (index ℓ), and the partition
`[L, C]` (positions of each set).
"""

from __future__ import annotations

import math

import numpy as np

PARTITIONS = ("grid", "random")


def make_partition(num_patches: int, set_size: int, kind: str = "grid", seed: int = 0) -> np.ndarray:
    """Partition of the positions `0..D-1` into L = D / C sets, `[L, C]` int.

    `grid`: D and C perfect squares; sets are the contiguous √C×√C blocks of the row-major √D×√D grid.
    `random`: a random partition from `seed`.

    Raises:
      ValueError: C does not divide D, or (grid) D or C is not a square number or √C does not divide √D.
    """
    if num_patches % set_size:
        raise ValueError(f"theory.data.set_size {set_size} does not divide num_patches {num_patches}")
    if kind == "random":
        return np.random.default_rng(seed).permutation(num_patches).reshape(-1, set_size)
    if kind != "grid":
        raise ValueError(f"theory.data.partition {kind!r} is not one of {PARTITIONS}")
    g, b = math.isqrt(num_patches), math.isqrt(set_size)
    if g * g != num_patches or b * b != set_size or g % b:
        raise ValueError(f"a grid partition needs square num_patches and set_size with √C | √D; got D={num_patches}, "
                         f"C={set_size}")
    ids = np.arange(num_patches).reshape(g, g)
    return np.stack([ids[r:r + b, c:c + b].ravel() for r in range(0, g, b) for c in range(0, g, b)])


def unit_vector(d: int, seed: int, orthogonal_to: np.ndarray | None = None) -> np.ndarray:
    """A random unit vector in R^d (orthogonal to `orthogonal_to` if given)."""
    w = np.random.default_rng(seed).normal(size=d)
    if orthogonal_to is not None:
        w -= (w @ orthogonal_to) * orthogonal_to
    return (w / np.linalg.norm(w)).astype(np.float32)


def sample(n: int, partition: np.ndarray, w: np.ndarray, rng: np.random.Generator, alpha: float = 1.0,
           noise_prob: float = 0.5, sigma: float = 0.1, structured: bool = True) -> dict:
    """Draws n examples; returns `{"x": [n, D, d], "y": [n] ±1, "signal_set": [n], "partition": [n, L, C]}`.

    With `structured=False` each example gets its own random partition (returned per example).
    """
    L, C = partition.shape
    D, d = L * C, len(w)
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)  # exactly balanced ...
    y = rng.permutation(y).astype(np.float32)          # ... in random order
    ell = rng.integers(0, L, n)
    parts = (np.broadcast_to(partition, (n, L, C)) if structured
             else np.stack([rng.permutation(D).reshape(L, C) for _ in range(n)]))
    signal = np.zeros((n, D), bool)
    signal[np.arange(n)[:, None], parts[np.arange(n), ell]] = True
    coeff = np.where(signal, y[:, None],
                     alpha * rng.choice([-1.0, 1.0], size=(n, D)) * (rng.uniform(size=(n, D)) < noise_prob))
    xi = rng.normal(scale=sigma, size=(n, D, d))
    xi -= (xi @ w)[..., None] * w  # orthogonal to w*
    x = coeff[..., None] * w + xi
    return {"x": x.astype(np.float32), "y": y, "signal_set": ell, "partition": np.asarray(parts)}
