"""BiT ResNet-v2 upstream training (Kolesnikov et al. 2020, "Big Transfer", §3.1 and §3.3), mostly used to analyse
the published BiT checkpoints against ViTs (Raghu et al. 2021 §3; docs/published_models.md).

    python main.py --config=configs/bit.py:r50x1 --workdir=runs/bit_r50x1                   # ImageNet-1k (TFDS)
    python main.py --config=configs/bit.py:r152x2,data=i21k --workdir=runs/bit_r152x2_i21k  # BiT-M data
    python main.py --config=configs/bit.py:r50x1,runlocal                                   # 2 steps on this CPU
    # Analysis of a published file next to a ViT (no training):
    python main.py --mode=analyze --config=configs/vit_b16.py:folder=IMAGENET --config.init_from=ViT-B_16.npz \\
      --compare_config=configs/bit.py:r50x1 --compare_init_from=BiT-M-R50x1.npz --workdir=runs/analysis_b16_r50

The first argument `r<depth>x<k>` picks the model: depth 50 / 101 / 152 (units per stage [3, 4, 6, 3] /
[3, 4, 23, 3] / [3, 8, 36, 3]) and width factor k (BiT releases R50x1, R50x3, R101x1, R101x3, R152x2, R152x4).
Other arguments as `configs/common.py:pretrain` (`data=i1k|i21k`, `folder=PATH`, `runlocal`).

Recipe (BiT §3.3, upstream): SGD with momentum 0.9, lr 0.03 × batch / 256 = 0.48 at batch 4096, weight decay 1e-4
(L2 on the kernels), 5,000 linear warmup steps, 90 epochs; BiT divides the rate by 10 at epochs 30, 60 and 80,
which is approximated here by linear decay (the schedules of `train/optim.py`); softmax cross-entropy; inception
crop + flip at 224 px; pixels in [−1, 1] as the released models expect.
"""

import re

import ml_collections
from ml_collections import config_dict

from configs import common


def get_config(arg=None):
    items = [i for i in (arg or "").split(",") if i]
    depth, k = 50, 1
    if items and (m := re.fullmatch(r"r(\d+)x(\d+)", items[0].lower())):
        depth, k = int(m.group(1)), int(m.group(2))
        items = items[1:]
    c = common.pretrain("B/16", ",".join(items))
    c.model = ml_collections.ConfigDict(dict(name="resnetv2", depth=depth, width_factor=k, width=64, num_groups=32,
                                             units=config_dict.placeholder(tuple), ws_eps=1e-10, dtype="float32"))
    c.init_reinit = r"^head/"
    c.loss = "softmax_xent"
    c.param_sharding = ((".*", "fsdp"),)
    c.optim.name = "sgd"
    c.optim.momentum = 0.9
    c.optim.lr = 0.03 * c.batch_size / 256
    c.optim.weight_decay = 1e-4
    c.optim.wd_mask = r"/kernel$"
    c.optim.warmup_steps = min(5_000, c.optim.warmup_steps)
    c.optim.schedule = "linear"
    c.optim.grad_clip_norm = 0.0
    return c
