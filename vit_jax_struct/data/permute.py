"""Permuted patches (Jelassi, Sander & Li 2022 §6, "permuted vs original" CIFAR experiments).

One fixed random permutation π of the patch grid is applied to every image, train and eval alike, after
augmentation: output patch `i` (row-major on the grid) is input patch `π[i]`. Because π acts on image patches of the
model's patch size (not on tokens), the same permuted images can be fed to a CNN. The inverse `π⁻¹ = argsort(π)`
undoes it; analyses use it to re-index posemb similarity maps.
"""

from __future__ import annotations

import json

import numpy as np

from vit_jax_struct import storage


def patch_permutation(num_patches: int, seed: int) -> np.ndarray:
    """A fixed random permutation π of `num_patches` grid positions (int64), from `np.random.default_rng(seed)`."""
    return np.random.default_rng(seed).permutation(num_patches)


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """π⁻¹ with `π⁻¹[π[i]] = i`."""
    return np.argsort(np.asarray(perm))


def permute_patches(image: np.ndarray, perm: np.ndarray, patch: int, xp=np) -> np.ndarray:
    """Rearranges the `patch`x`patch` patches of `image` `[..., H, W, C]`: output patch i = input patch perm[i].

    `xp`: `numpy` (host transforms) or `jax.numpy` (the device input, `data/device_input.py`); the same pixels.

    Raises:
      ValueError: H or W not divisible by `patch`, or `perm` not of length (H/patch)*(W/patch).
    """
    *lead, h, w, c = image.shape
    if h % patch or w % patch:
        raise ValueError(f"image size {h}x{w} is not divisible by the permutation patch size {patch}")
    gh, gw = h // patch, w // patch
    if len(perm) != gh * gw:
        raise ValueError(f"permutation of length {len(perm)} does not fit a {gh}x{gw} patch grid")
    x = image.reshape(*lead, gh, patch, gw, patch, c)
    x = xp.moveaxis(x, -4, -3).reshape(*lead, gh * gw, patch, patch, c)  # [..., N, p, p, C]
    x = x[..., np.asarray(perm), :, :, :]
    x = x.reshape(*lead, gh, gw, patch, patch, c)
    return xp.moveaxis(x, -3, -4).reshape(*lead, h, w, c)


class PermutePatches:
    """Wraps a preprocess transform: its output image has its patches permuted by `perm`.

    Works for train transforms `(record, rng)` and eval transforms `(record)` alike.
    """

    def __init__(self, transform, perm: np.ndarray, patch: int):
        self.transform, self.perm, self.patch = transform, np.asarray(perm), int(patch)

    def __call__(self, record, *rng):
        out = self.transform(record, *rng)
        return {**out, "image": permute_patches(out["image"], self.perm, self.patch)}


def save_permutation(workdir: str, perm: np.ndarray, patch: int, image_size: int, seed: int) -> str:
    """Writes `workdir/permutation.json` (`perm`, `inverse`, `patch_size`, `grid`, `seed`); returns its path."""
    path = storage.join(workdir, "permutation.json")
    grid = image_size // patch
    storage.write_text(path, json.dumps({"perm": [int(i) for i in perm],
                                         "inverse": [int(i) for i in inverse_permutation(perm)],
                                         "patch_size": int(patch), "grid": [grid, grid], "seed": int(seed)}))
    return path


def load_permutation(workdir: str) -> dict | None:
    """The saved permutation record of a run, or None if it used original images."""
    path = storage.join(workdir, "permutation.json")
    if not storage.exists(path):
        return None
    rec = json.loads(storage.read_text(path))
    rec["perm"], rec["inverse"] = np.asarray(rec["perm"]), np.asarray(rec["inverse"])
    return rec
