"""J5: one-layer positional-attention ViT, population risk (fresh samples every GD step), structured data.

    python main.py --config=configs/theory/population.py --workdir=runs/theory/population
    python main.py --config=configs/theory/population.py:idealized --workdir=runs/theory/population_idealized
    python main.py --config=configs/theory/population.py:self_init --workdir=runs/theory/population_self_init

Default: Q and v learned from a Gaussian init. `idealized`: v = 0.5·w* fixed. `self_init`: the patch-association
setting of `configs/theory/common.py` (Q starts self-attending, α = 2, q = 0.1, v = 1.25·w* fixed).
Expected: test error → ≈ 0; with `self_init` every patch attends to its own set (set purity = own-set mass ≥ 0.8
vs chance C/D = 0.25).
"""

from configs.theory import common


def get_config(arg=None):
    return common.base("J5 population risk, structured data", "population", arg)
