"""Representation verdict measures (vit_jax_struct/analysis/verdicts.py) on matrices with known answers."""

import numpy as np
import pytest

from vit_jax_struct.analysis import verdicts


def test_localization_margin_is_own_minus_mean_of_others():
    m = np.full((4, 4), 0.2) + np.eye(4) * 0.5  # own patch 0.7, others 0.2
    assert verdicts.localization_margin(m) == pytest.approx(0.5)
    assert verdicts.localization_margin(np.full((4, 4), 0.3)) == pytest.approx(0.0)


def test_cka_split_is_within_minus_across_at_the_block():
    layers = ["stem", "block00", "block01", "block02", "block03", "pre_logits"]
    m = np.ones((6, 6))
    m[1:3, 3:5] = m[3:5, 1:3] = 0.4  # blocks 0-1 vs 2-3 differ
    assert verdicts.cka_split(m, layers, 2) == pytest.approx(0.6)
    assert verdicts.cka_split(np.ones((6, 6)), layers, 2) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="does not split"):
        verdicts.cka_split(m, layers, 0)
