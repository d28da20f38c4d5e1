"""J10: the same as J5 on data without spatial structure (a fresh random partition for every example).

    python main.py --config=configs/theory/no_structure.py --workdir=runs/theory/no_structure
    python main.py --config=configs/theory/no_structure.py:self_init --workdir=runs/theory/no_structure_self_init

Expected: no fixed partition to learn; with `self_init` set purity stays ≤ 2 × chance (0.5).
"""

from configs.theory import common


def get_config(arg=None):
    c = common.base("J10 population risk, no spatial structure", "population", arg)
    c.data.structured = False
    return c
