"""J6: empirical risk on a fixed training set, Gaussian initialisation of both Q and v (v learned).

    python main.py --config=configs/theory/empirical.py --workdir=runs/theory/empirical

Expected: the model generalizes, test error ≤ 5 %, and learns the partition (purity well above chance).
"""

from configs.theory import common


def get_config(arg=None):
    c = common.base("J6 empirical risk, Gaussian init, learned v", "empirical", arg)
    c.model.v_fixed_scale = 0.0
    c.model.v_init_std = 0.1
    c.train.n_train = 2048
    return c
