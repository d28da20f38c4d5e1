"""Spatial localization of output tokens (Raghu et al. 2021 §6, Fig. 10): CKA between each output token's
representation and the input image patch at every grid location.

For token position t (patch tokens only; CLS excluded) and grid location g, the entry is the linear CKA over
examples between the final-block token t `[n, D]` and the raw pixels of patch g `[n, p·p·C]`; row t reshaped to the
grid is token t's heatmap. A token that "localizes" is most similar to its own patch: the scalar is the fraction of
tokens whose best-matching location is their own.
"""

from __future__ import annotations

import numpy as np

from vit_jax_struct.analysis.cka import MinibatchCKA


def image_patches(images, patch: int) -> np.ndarray:
    """`[B, H, W, C] -> [B, N, p*p*C]` row-major patches."""
    images = np.asarray(images)
    b, h, w, c = images.shape
    x = images.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


def margin(m) -> float:
    """The localization margin: mean over output tokens t of CKA(t, own patch t) − mean_{g ≠ t} CKA(t, g), for the
    `[N, N]` token × patch CKA matrix (`Localization.result()[0]`; "localization"/"matrix" of `analysis.json`).
    Positive: tokens keep their own patch more than the others; 0: no localization."""
    m = np.asarray(m, float)
    n = len(m)
    off = (m.sum(1) - np.diag(m)) / (n - 1)
    return float(np.mean(np.diag(m) - off))


class Localization:
    """Accumulates token × patch-location CKA over batches; `update(tokens [B, N, D], images)`, `result()`."""

    def __init__(self, patch: int):
        self.patch, self.cka = patch, MinibatchCKA()

    def update(self, tokens, images):
        tokens = np.asarray(tokens)
        patches = image_patches(images, self.patch)
        if tokens.shape[1] != patches.shape[1]:
            raise ValueError(f"{tokens.shape[1]} tokens but {patches.shape[1]} patches: pass patch tokens only")
        self.cka.update([tokens[:, t] for t in range(tokens.shape[1])],
                        [patches[:, g] for g in range(patches.shape[1])])

    def update_grams(self, token_grams, patch_grams):
        """Adds one batch from Gram matrices `[N, B, B]` of each token position and each patch location."""
        self.cka.update_grams(token_grams, patch_grams)

    def result(self) -> tuple[np.ndarray, float]:
        """`([N, N] CKA of token t with patch g, fraction of tokens whose best patch is their own)`."""
        m = self.cka.result()
        return m, float(np.mean(np.argmax(m, axis=1) == np.arange(len(m))))
