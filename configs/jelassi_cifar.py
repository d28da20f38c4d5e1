"""Jelassi, Sander & Li (2022)'s small-data ViT at full scale: 300 epochs of CIFAR-10, CIFAR-100 or SVHN, for one GPU.

    python main.py --config=configs/jelassi_cifar.py:dataset=cifar10 --config.data.root=/data/cifar10 \
        --config.model.dtype=bfloat16                                   # one GPU, ≈ 15 M images
    python main.py --config=configs/jelassi_cifar.py:dataset=cifar100,epochs=30 --config.model.attention=positional

Model (the paper's §6 small-data ViT): 7 blocks, width 384, 12 heads, MLP 384, 4x4-pixel patches (8x8 grid + CLS,
65 tokens), learned posemb, `token` classifier; 2.3 M parameters (CIFAR-10), ≈ 2.5 GFLOP per training image.
Optimizer: AdamW with a linear warmup of 5 epochs then cosine decay, batch 128, 300 epochs (the paper's schedule;
it gives no learning rate or weight decay: 1e-3 and 0.05, the values of this repository's CIFAR configs and of
public 7x384 CIFAR ViT recipes). Augmentation: the standard one, pad 4 + random 32-px crop and a horizontal flip (no
flip for SVHN's digits).

The data is decoded once into memory (`data.in_memory`) and augmented inside the jitted step
(`data.device_augment`, `data/device_input.py`): the host sends uint8 batches gathered by index, so the input keeps
up with a GPU (the per-example host pipeline tops out near 1,500 img/s on 2 cores). On a 2-core CPU one epoch takes
about an hour: use `epochs=N` there, or the sweep configs.

Arguments (comma-separated): `dataset=cifar10|cifar100|svhn` (default cifar10), `epochs=N` (default 300),
`root=PATH` (default data/<dataset>, as `python -m vit_jax_struct.data.prepare --cifar=…` writes it: an image folder `root/{train,test}/<class>/*`), `runlocal` (a few steps on
the embedded digits, for tests).
"""

import math

from configs import common

DATASETS = {"cifar10": (10, 50_000, True), "cifar100": (100, 50_000, True), "svhn": (10, 73_257, False)}
EPOCHS = 300


def get_config(arg=None):
    a = common.parse_arg(arg, dataset="cifar10", epochs=EPOCHS, root="", runlocal=False)
    if a.dataset not in DATASETS:
        raise ValueError(f"config argument dataset={a.dataset!r} is not one of {sorted(DATASETS)}")
    if a.epochs <= 0:
        raise ValueError(f"config argument epochs={a.epochs} must be a positive integer")
    num_classes, train_examples, flip = DATASETS[a.dataset]
    steps_per_epoch = math.ceil(train_examples / 128)
    c = common.base()
    c.batch_size = 128
    c.eval_batch_size = 1000
    c.total_steps = a.epochs * steps_per_epoch
    c.log_every_steps = 200
    c.eval_every_steps = max(steps_per_epoch, c.total_steps // 12)  # 12 evaluations (one per epoch when shorter)
    c.checkpoint_every_steps = c.eval_every_steps
    c.model.variant = "Ti/4"
    c.model.width = 384
    c.model.depth = 7
    c.model.num_heads = 12
    c.model.mlp_dim = 384
    c.data.source = "folder"
    c.data.root = a.root or f"data/{a.dataset}"
    c.data.image_size = 32
    c.data.num_classes = num_classes
    c.data.in_memory = True
    c.data.device_augment = True
    c.pp.train_crop = "pad"
    c.pp.pad = 4
    c.pp.flip = flip
    c.pp.eval_crop_fraction = 1.0
    c.optim.lr = 1e-3
    c.optim.weight_decay = 0.05
    c.optim.warmup_steps = min(5 * steps_per_epoch, c.total_steps // 10)
    if a.runlocal:
        c.data.source, c.data.root, c.data.image_size, c.data.num_classes = "digits", "", 16, 10
        c.total_steps, c.batch_size, c.eval_batch_size = 2, 8, 8
        c.log_every_steps = c.eval_every_steps = c.checkpoint_every_steps = 1
        c.optim.warmup_steps = 1
        c.data.eval_examples = 8
        c.mesh.data = 1
    return c
