"""Skip-connection norm ratios (Raghu et al. 2021 §5, Fig. 8): ‖z‖ / ‖f(z)‖ per encoder block, for the MHSA and the
MLP branch, separately for the CLS token and the patch tokens.

`z` is the residual stream entering the branch's sum and `f(z)` the branch output added to it (both sown by
`Encoder1DBlock` into the `intermediates` collection). A large ratio means the block mostly passes its input
through the skip connection. The ratio of norms is taken per example and token, then averaged.
"""

from __future__ import annotations

import numpy as np


def norm_ratios(intermediates: dict, has_cls: bool, xp=np, num_registers: int = 0) -> dict:
    """`{"block00/mhsa/cls": r, "block00/mhsa/patches": r, "block00/mlp/…": …}` from one batch's intermediates.

    Args:
      intermediates: the `intermediates` collection of a ViT apply, `{"Transformer": {"encoderblock_0": {…}}}`.
      has_cls: whether token 0 is the CLS token (else there is no `cls` entry).
      xp: `numpy` (float64, Python floats out) or `jax.numpy` (float32 scalars, usable inside `jax.jit`, so the
        `[B, N, D]` streams never leave the device: `analysis/run.py`).
      num_registers: register tokens R after the CLS token (`model.num_registers`): the streams are
        `[B, 1 + R + N, D]`; the registers get entries of their own (`block00/mhsa/registers`), not the patches'.
    """
    out = {}
    dtype = np.float64 if xp is np else np.float32
    blocks = intermediates["Transformer"]
    for name in sorted(blocks, key=lambda n: int(n.rsplit("_", 1)[1])):
        i = int(name.rsplit("_", 1)[1])
        for branch in ("mhsa", "mlp"):
            z = xp.asarray(blocks[name][f"{branch}_residual"][0], dtype)
            f = xp.asarray(blocks[name][f"{branch}_branch"][0], dtype)
            r = xp.linalg.norm(z, axis=-1) / xp.clip(xp.linalg.norm(f, axis=-1), 1e-12, None)  # [B, N]
            c, n_reg = int(has_cls), int(num_registers)
            if has_cls:
                out[f"block{i:02d}/{branch}/cls"] = r[:, 0].mean()
            if n_reg:
                out[f"block{i:02d}/{branch}/registers"] = r[:, c:c + n_reg].mean()
            out[f"block{i:02d}/{branch}/patches"] = r[:, c + n_reg:].mean()
    return {k: float(v) for k, v in out.items()} if xp is np else out
