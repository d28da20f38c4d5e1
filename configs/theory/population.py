"""J5: one-layer positional-attention ViT, population risk (fresh samples every GD step), idealized v = 0.5·w*.

    python main.py --config=configs/theory/population.py --workdir=runs/theory/population

Expected: set purity rises from chance (C/D = 0.25) to ≥ 0.8; test error → ≈ 0.
"""

from configs.theory import common


def get_config(arg=None):
    return common.base("J5 population risk, structured data", "population", arg)
