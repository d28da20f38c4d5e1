"""Mean attention distance (Dosovitskiy et al. 2021 §4.5 / Fig. 7; Raghu et al. 2021 §4, Fig. 3).

For every head, the distance a query patch attends over is the attention-weighted mean Euclidean distance
between its grid position and the key patches' positions, in pixels of the input image (patch size × grid
distance). It is averaged over the query patches and the images.

The CLS token has no grid position: its row (CLS as query) and column (CLS as key) are dropped, and each patch
query's remaining weights over the patch keys are renormalised to sum to 1 — the distance is then the expected
distance under the attention restricted to patches. (Without renormalisation, heads that send most weight to CLS
would look artificially local.)
"""

from __future__ import annotations

import numpy as np

LOCAL_FRACTION = 0.75  # a head is "local" when its mean distance is below 75 % of uniform attention's (ours, R2)


def grid_distances(grid: tuple[int, int], patch_size: float = 1.0) -> np.ndarray:
    """Euclidean distances `[N, N]` between the centres of the patches of an `(h, w)` grid, row-major, in pixels."""
    h, w = grid
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    pos = np.stack([yy.ravel(), xx.ravel()], -1).astype(np.float64)
    return np.sqrt(((pos[:, None] - pos[None]) ** 2).sum(-1)) * patch_size


def record_grid_patch(res: dict) -> tuple[int, int]:
    """(grid side, patch size in px) of the square-grid ViT an `analysis.json` record describes: the side from the
    number of rows of its localization matrix (one per patch), the patch from `model.patch_size` or, when that is
    unset, the run's `model.variant` ("Ti/4" → 4).

    Raises:
      ValueError: the record has no localization matrix or no patch size (a model without attention maps).
    """
    model = res.get("model") or {}
    patch = model.get("patch_size")
    if not patch and model.get("variant"):  # a run's config names its patch in the variant ("Ti/4") unless overridden
        from vit_jax_struct.models import vit

        patch = vit.decode_variant(model["variant"])["patch_size"]
    if not patch or "localization" not in res:
        raise ValueError("analysis.json lacks model.patch_size (or model.variant) or the localization matrix "
                         "(whose side is the number of patches)")
    return round(float(np.sqrt(len(res["localization"]["matrix"])))), int(np.ravel(patch)[0])


def mean_attention_distance(weights, grid: tuple[int, int], patch_size: float, has_cls: bool, xp=np):
    """Per-head mean attention distance in pixels, `[heads]` (float64 with `xp=numpy`; float32 with
    `xp=jax.numpy`, usable inside `jax.jit` so the `[B, heads, N, N]` weights never leave the device).

    Args:
      weights: attention weights `[B, heads, N, N]` (N = h*w, plus 1 if `has_cls`; CLS first).
      grid: patch grid `(h, w)`.
      patch_size: patch side in pixels.
      has_cls: whether token 0 is a CLS token (excluded as described in the module docstring).

    Raises:
      ValueError: N does not match the grid.
    """
    a = xp.asarray(weights, np.float64 if xp is np else np.float32)
    n = grid[0] * grid[1]
    if a.shape[-1] != n + int(has_cls):
        raise ValueError(f"attention over {a.shape[-1]} tokens does not fit a {grid} grid "
                         f"{'plus CLS' if has_cls else 'without CLS'}")
    if has_cls:
        a = a[..., 1:, 1:]
    a = a / xp.clip(a.sum(-1, keepdims=True), 1e-12, None)
    d = xp.asarray(grid_distances(grid, patch_size), a.dtype)
    per_query = (a * d).sum(-1)  # [B, heads, N]
    return per_query.mean(axis=(0, 2))


class AttentionDistance:
    """Accumulates per-block, per-head mean attention distance over batches: `update(out)`, `result()`.

    `update` takes a model's `out` dict with `attention/blockXX` entries; `result()` returns
    `{"block00": [heads] pixels, …}` averaged over all images seen.
    """

    def __init__(self, grid, patch_size, has_cls):
        self.grid, self.patch_size, self.has_cls = grid, patch_size, has_cls
        self.sums, self.count = {}, 0

    def update_sums(self, sums: dict, count: int):
        """Adds per-block sums over `count` images of the per-image head distances (`{"block00": [heads]}`)."""
        for name, v in sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + np.asarray(v, np.float64)
        self.count += count

    def update(self, out: dict):
        b = None
        for key, w in out.items():
            if key.startswith("attention/"):
                name = key.split("/", 1)[1]
                b = w.shape[0]
                self.sums[name] = self.sums.get(name, 0.0) + b * mean_attention_distance(
                    w, self.grid, self.patch_size, self.has_cls)
        if b is None:
            raise ValueError("no 'attention/blockXX' entries in the model output; call it with return_attention")
        self.count += b

    def result(self) -> dict:
        return {k: v / self.count for k, v in sorted(self.sums.items())}
