"""High-norm ("artifact") patch tokens, after Darcet et al. 2024, "Vision Transformers Need Registers" (ICLR 2024).

Large, long-trained ViTs (DINOv2, OpenCLIP, DeiT-III) turn a few low-information patches into global "scratch"
tokens whose output norm is far above the rest (DINOv2 ViT-g/14: norms above 150 for ≈ 2.4 % of the tokens, §2.1,
Fig. 3); those tokens sit on patches that are redundant with their neighbours (Fig. 5a: high cosine similarity of the
patch embeddings to their 4 neighbours) and carry less local information (Table 1a: a linear probe predicts their
position worse than a normal token's). This module measures the same quantities on the patch tokens (CLS and
register tokens excluded) of any ViT the analysis reads:

- per block, the distribution of the patch tokens' L2 norms (quantiles and a histogram on log-spaced bins) and the
  fraction above two thresholds: the paper's fixed one (`DEFAULT_THRESHOLD` = 150, meaningful for DINOv2-scale
  models) and a robust, scale-free one, `median + k · 1.4826 · MAD` of that block's norms (`DEFAULT_MAD_K` = 6; the
  factor makes the MAD a standard-deviation estimate for normal data);
- for the analysis block (the last one, whose outputs the paper plots), where the outliers sit on the patch grid
  (fraction of images with an outlier at each position), the mean cosine similarity of the outlier and the normal
  tokens' patch embeddings (the `stem`, before the posemb) to their 4-neighbours, and a linear position probe
  trained and tested separately on outlier and normal tokens (top-1 accuracy over the N positions and mean grid
  distance of the prediction, in patches; Table 1a).

Outliers of the analysis block are the tokens above the robust threshold (the fixed one is reported beside it).
"""

from __future__ import annotations

import numpy as np

from vit_jax_struct import fewshot

DEFAULT_THRESHOLD = 150.0  # Darcet et al. 2024 §2.1: "high-norm" = norm above 150 (DINOv2 ViT-g/14)
DEFAULT_MAD_K = 6.0
MAD_TO_SD = 1.4826  # 1 / Φ⁻¹(3/4): the MAD of a normal distribution times this is its standard deviation
MIN_PROBE_TOKENS = 20  # fewer outlier tokens in either half of the images: no probe, the reason is reported
MAX_PROBE_TOKENS = 20_000  # normal tokens per half are subsampled to this many (bounded ridge cost)
HIST_BINS = 40


def token_norms(tokens, xp=np):
    """L2 norm of each token: `[B, N, D]` -> `[B, N]` float32 (float64 with numpy)."""
    dtype = np.float64 if xp is np else np.float32
    return xp.linalg.norm(xp.asarray(tokens, dtype), axis=-1)


def neighbour_cosine(embeddings, grid, xp=np):
    """Mean cosine similarity of each patch embedding with its 4-neighbours on the patch grid (Darcet et al. Fig. 5a).

    Args:
      embeddings: `[B, N, D]` patch embeddings in row-major grid order (`N = h · w`), e.g. the ViT's `stem` output.
      grid: `(h, w)` patches.
      xp: `numpy` or `jax.numpy` (usable inside `jax.jit`).

    Returns:
      `[B, N]` float (float64 with numpy, float32 with jax.numpy): the mean over the 2–4 neighbours that exist
      (a corner has 2). A zero vector has cosine 0 with everything.

    Raises:
      ValueError: `N != h · w`, or a grid of one patch (no neighbours).
    """
    h, w = int(grid[0]), int(grid[1])
    b, n, d = embeddings.shape
    if n != h * w:
        raise ValueError(f"neighbour_cosine: {n} tokens do not fill a {h}x{w} grid")
    if h * w < 2:
        raise ValueError(f"neighbour_cosine: a {h}x{w} grid has no neighbours")
    dtype = np.float64 if xp is np else np.float32
    e = xp.asarray(embeddings, dtype).reshape(b, h, w, d)
    e = e / xp.maximum(xp.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    total = xp.zeros((b, h, w), dtype)
    count = xp.zeros((h, w), dtype)
    if h > 1:  # vertical pairs: row r with row r + 1, added to both tokens of the pair
        s = (e[:, 1:] * e[:, :-1]).sum(-1)
        pad = xp.zeros((b, 1, w), dtype)
        total = total + xp.concatenate([s, pad], 1) + xp.concatenate([pad, s], 1)
        ones = xp.ones((h - 1, w), dtype)
        zero = xp.zeros((1, w), dtype)
        count = count + xp.concatenate([ones, zero], 0) + xp.concatenate([zero, ones], 0)
    if w > 1:  # horizontal pairs
        s = (e[:, :, 1:] * e[:, :, :-1]).sum(-1)
        pad = xp.zeros((b, h, 1), dtype)
        total = total + xp.concatenate([s, pad], 2) + xp.concatenate([pad, s], 2)
        ones = xp.ones((h, w - 1), dtype)
        zero = xp.zeros((h, 1), dtype)
        count = count + xp.concatenate([ones, zero], 1) + xp.concatenate([zero, ones], 1)
    return (total / count).reshape(b, n)


def robust_threshold(norms, k: float = DEFAULT_MAD_K) -> float:
    """`median + k · 1.4826 · MAD` of `norms` (any shape, flattened): a threshold in units of the norms' own spread.

    Raises:
      ValueError: empty `norms` or `k` ≤ 0.
    """
    x = np.asarray(norms, np.float64).ravel()
    if not x.size:
        raise ValueError("robust_threshold: no norms")
    if not k > 0:
        raise ValueError(f"robust_threshold: k must be > 0, got {k}")
    med = float(np.median(x))
    return med + float(k) * MAD_TO_SD * float(np.median(np.abs(x - med)))


def position_probe(features, mask, grid, seed: int = 0) -> dict:
    """Linear probe of a token's grid position from its features (Darcet et al. 2024 Table 1a), on the tokens `mask`
    selects.

    The images are split in two halves at random (seeded); the probe is fit on the selected tokens of one half
    (ridge regression to one-vs-all targets over the N positions, λ chosen on a held-out 20 % of those tokens:
    `vit_jax_struct.fewshot.fit_select`) and tested on the selected tokens of the other half.

    Args:
      features: `[M, N, D]` token features of M images (N = h · w patch tokens).
      mask: `[M, N]` bool, the tokens to use (e.g. the outliers, or the normal tokens).
      grid: `(h, w)`.
      seed: the image split and the subsampling of more than `MAX_PROBE_TOKENS` tokens per half.

    Returns:
      `{"top1": accuracy in [0, 1], "mean_distance_patches": mean Euclidean grid distance between predicted and
      true position, "chance_top1": 1 / N, "n_train": tokens fit, "n_test": tokens tested, "lambda": λ}`, or
      `{"reason": "...", "n_train": …, "n_test": …}` when either half has fewer than `MIN_PROBE_TOKENS` tokens.
    """
    x = np.asarray(features, np.float32)
    mask = np.asarray(mask, bool)
    m, n = mask.shape
    h, w = int(grid[0]), int(grid[1])
    if x.shape[:2] != (m, n) or n != h * w:
        raise ValueError(f"position_probe: features {x.shape}, mask {mask.shape} and grid {grid} do not agree")
    rng = np.random.default_rng(seed)
    order = rng.permutation(m)
    halves = [np.zeros(m, bool), np.zeros(m, bool)]
    halves[0][order[: m // 2]] = True
    halves[1][order[m // 2:]] = True
    pos = np.broadcast_to(np.arange(n), (m, n))
    sets = []
    for half in halves:
        sel = mask & half[:, None]
        xs, ys = x[sel], pos[sel]
        if len(ys) > MAX_PROBE_TOKENS:
            keep = np.sort(rng.choice(len(ys), MAX_PROBE_TOKENS, replace=False))
            xs, ys = xs[keep], ys[keep]
        sets.append((xs, ys))
    (tr_x, tr_y), (te_x, te_y) = sets
    if min(len(tr_y), len(te_y)) < MIN_PROBE_TOKENS:
        return {"reason": f"fewer than {MIN_PROBE_TOKENS} tokens in a half of the images", "n_train": len(tr_y),
                "n_test": len(te_y)}
    hold = np.zeros(len(tr_y), bool)
    hold[rng.permutation(len(tr_y))[: max(1, len(tr_y) // 5)]] = True
    wts, lam = fewshot.fit_select(tr_x[~hold], tr_y[~hold], tr_x[hold], tr_y[hold], n)
    pred = np.argmax(fewshot.design(te_x) @ wts, axis=1)
    dist = np.hypot(pred // w - te_y // w, pred % w - te_y % w)
    return {"top1": float(np.mean(pred == te_y)), "mean_distance_patches": float(dist.mean()),
            "chance_top1": 1.0 / n, "n_train": len(tr_y), "n_test": len(te_y), "lambda": lam}


class NormOutliers:
    """Accumulates, batch by batch, what `result()` reports (see the module docstring).

    Args:
      grid: `(h, w)` patch grid.
      threshold: the fixed norm threshold (`DEFAULT_THRESHOLD`, the paper's).
      mad_k: k of the robust threshold `median + k · 1.4826 · MAD` (`DEFAULT_MAD_K`).
      probe_images: images whose analysis-block features are kept for the position probes (memory:
        `probe_images × N × D` float32).
      seed: the probes' image split.

    Raises:
      ValueError: `threshold` ≤ 0, `mad_k` ≤ 0 or `probe_images` < 2.
    """

    def __init__(self, grid, threshold: float = DEFAULT_THRESHOLD, mad_k: float = DEFAULT_MAD_K,
                 probe_images: int = 256, seed: int = 0):
        if not threshold > 0:
            raise ValueError(f"the outlier norm threshold must be > 0, got {threshold}")
        if not mad_k > 0:
            raise ValueError(f"the outlier MAD multiple k must be > 0, got {mad_k}")
        if probe_images < 2:
            raise ValueError(f"probe_images must be ≥ 2, got {probe_images}")
        self.grid = (int(grid[0]), int(grid[1]))
        self.threshold, self.mad_k, self.probe_images, self.seed = float(threshold), float(mad_k), probe_images, seed
        self.norms: dict[str, list] = {}
        self.cosine: list = []
        self.features: list = []
        self._kept = 0

    def update(self, norms: dict, cosine, features) -> None:
        """One batch: `norms` `{block name: [B, N]}` patch-token norms (every block, names sorting in depth order,
        e.g. `block00`…), `cosine` `[B, N]` (`neighbour_cosine` of the patch embeddings), `features` `[B, N, D]` the
        last block's patch tokens (kept for the first `probe_images` images only)."""
        for k, v in norms.items():
            self.norms.setdefault(k, []).append(np.asarray(v, np.float32))
        self.cosine.append(np.asarray(cosine, np.float32))
        if self._kept < self.probe_images:
            f = np.asarray(features, np.float32)[: self.probe_images - self._kept]
            self.features.append(f)
            self._kept += len(f)

    def result(self) -> dict:
        """The JSON-ready summary: `{"threshold_fixed", "mad_k", "blocks": {name: {...}}, "analysis_block",
        "outliers": {...}}` (see the module docstring). Raises ValueError if nothing was accumulated."""
        if not self.norms:
            raise ValueError("NormOutliers: no batch was accumulated")
        names = sorted(self.norms)
        allv = {k: np.concatenate(self.norms[k]) for k in names}  # [M, N]
        lo = max(min(float(v.min()) for v in allv.values()), 1e-6)
        hi = max(*(float(v.max()) for v in allv.values()), lo * 1.001)
        edges = np.geomspace(lo, hi, HIST_BINS + 1)
        blocks = {}
        for k in names:
            v = allv[k]
            t = robust_threshold(v, self.mad_k)
            med = float(np.median(v))
            blocks[k] = {"median": med, "mad": float(np.median(np.abs(v - med))),
                         "p01": float(np.quantile(v, 0.01)), "p99": float(np.quantile(v, 0.99)), "max": float(v.max()),
                         "robust_threshold": t, "fraction_above_fixed": float(np.mean(v > self.threshold)),
                         "fraction_above_robust": float(np.mean(v > t)),
                         "histogram": np.histogram(np.clip(v, lo, hi), edges)[0].tolist()}
        last = names[-1]
        v = allv[last]
        out_mask = v > blocks[last]["robust_threshold"]
        cos = np.concatenate(self.cosine)
        m = len(v)
        outl = {"count": int(out_mask.sum()), "tokens": int(v.size), "images": m,
                "images_with_outlier": int(out_mask.any(1).sum()),
                "position_fraction": out_mask.mean(0).tolist(),  # [N]: fraction of images with an outlier there
                "neighbour_cosine_outlier": float(cos[out_mask].mean()) if out_mask.any() else None,
                "neighbour_cosine_normal": float(cos[~out_mask].mean()) if (~out_mask).any() else None}
        feats = np.concatenate(self.features)
        kept = out_mask[: len(feats)]
        outl["position_probe"] = {"outlier": position_probe(feats, kept, self.grid, self.seed),
                                  "normal": position_probe(feats, ~kept, self.grid, self.seed),
                                  "images": len(feats)}
        return {"threshold_fixed": self.threshold, "mad_k": self.mad_k, "grid": list(self.grid),
                "histogram_edges": edges.tolist(), "blocks": blocks, "analysis_block": last, "outliers": outl}
