"""J7–J9: pretrain the attention on feature w*, freeze it, fine-tune only v on a new feature w' ⟂ w*.

    python main.py --config=configs/theory/transfer.py --workdir=runs/theory/transfer

Compares test error vs downstream samples n' with the same model from scratch and a GLM (logistic regression on
the flattened input). Expected: the pretrained-attention learner reaches ≤ 5 % test error with ≥ 4x fewer
samples than both baselines.
"""

from configs.theory import common


def get_config(arg=None):
    return common.base("J7-J9 transfer of patch association", "transfer", arg)
