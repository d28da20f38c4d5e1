"""Positional-embedding similarity (Jelassi, Sander & Li 2022, Fig. 1; ViT paper Fig. 7 centre).

The learned posemb `P` `[N, D]` (patch positions only, CLS row dropped) gives the cosine-similarity matrix
`S_ij = ⟨p_i, p_j⟩ / (‖p_i‖ ‖p_j‖)` in [−1, 1]; row i reshaped to the patch grid is position i's similarity map.
For a model trained on permuted patches (output patch i = input patch π[i]), the token position holding original
patch a is π⁻¹[a], so `P[π⁻¹]` re-indexes the embeddings to the original image layout.

Locality score: the Spearman rank correlation between `S_ij` and the grid distance of i and j over all pairs
i < j. Strongly negative = similarity decays with distance (a spatially structured posemb); ≈ 0 = no structure.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from vit_jax_struct.analysis.attention import grid_distances


def posemb_patches(params, has_cls: bool) -> np.ndarray:
    """The learned posemb of the patch positions `[N, D]` from ViT params (CLS row dropped when present).

    Raises:
      ValueError: the model has no learned posemb (`posemb='sincos2d'`).
    """
    try:
        pe = np.asarray(params["Transformer"]["posembed_input"]["pos_embedding"])[0]
    except KeyError as e:
        raise ValueError("the model has no learned posemb (Transformer/posembed_input/pos_embedding)") from e
    return pe[1:] if has_cls else pe


def cosine_similarity(p) -> np.ndarray:
    """`[N, D] -> [N, N]` cosine similarities (float64)."""
    p = np.asarray(p, np.float64)
    p = p / np.clip(np.linalg.norm(p, axis=-1, keepdims=True), 1e-12, None)
    return p @ p.T


def reindex(p, inverse_perm) -> np.ndarray:
    """`P[π⁻¹]`: posemb rows in the original (unpermuted) patch order."""
    return np.asarray(p)[np.asarray(inverse_perm)]


def locality_score(p, grid: tuple[int, int]) -> float:
    """Spearman correlation between posemb cosine similarity and grid distance over all pairs i < j."""
    s = cosine_similarity(p)
    d = grid_distances(grid)
    iu = np.triu_indices(len(s), k=1)
    return float(spearmanr(s[iu], d[iu]).statistic)


def locality_null(p, grid: tuple[int, int], num: int = 200, seed: int = 0) -> dict:
    """The locality score of `p` `[N, D]` under `num` random re-indexings of its rows: what a posemb with the same
    similarity values but no relation to the grid scores. Returns `{"mean", "sd", "num"}`; a trained posemb is local
    beyond chance when its score is well below `mean` (negative = local)."""
    rng = np.random.default_rng(seed)
    scores = [locality_score(np.asarray(p)[rng.permutation(len(p))], grid) for _ in range(num)]
    return {"mean": float(np.mean(scores)), "sd": float(np.std(scores, ddof=1)), "num": num}


def distance_rank_kept(perm, grid: tuple[int, int]) -> float:
    """How much of the grid's geometry a patch permutation keeps: Spearman ρ between the grid distances of all
    position pairs i < j and of their images (π(i), π(j)) (1: distances kept in rank, ≈ 0: a random permutation).
    Read beside `locality_score` in token order: a permutation that keeps distances leaves a local posemb local.

    Args:
      perm: `[N]` int, the permutation (`permutation.json` "perm"), N = rows × cols.
      grid: (rows, cols) of the patch grid.
    Raises:
      ValueError: `perm` is not a permutation of rows × cols positions.
    """
    perm = np.asarray(perm)
    n = grid[0] * grid[1]
    if sorted(perm.tolist()) != list(range(n)):
        raise ValueError(f"perm must be a permutation of the {n} positions of a {grid[0]}x{grid[1]} grid, got {perm}")
    d = grid_distances(grid)
    iu = np.triu_indices(n, k=1)
    return float(spearmanr(d[iu], d[perm][:, perm][iu]).statistic)


def random_distance_rank_kept(grid: tuple[int, int], draws: int = 2000) -> tuple[float, float]:
    """Mean and s.d. of `distance_rank_kept` over `draws` uniform random permutations (numpy seed 0): the chance
    level against which a permutation's kept geometry is read."""
    rng = np.random.default_rng(0)
    vals = [distance_rank_kept(rng.permutation(grid[0] * grid[1]), grid) for _ in range(draws)]
    return float(np.mean(vals)), float(np.std(vals))
