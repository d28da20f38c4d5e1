"""ViT on CIFAR-10 (Krizhevsky 2009) from 32-px images, sized to train on a 2-core CPU in under 30 minutes.

    # CIFAR-10 as an image folder, root/{train,test}/<class>/*.{png,jpg}, from the official python archive
    # (https://www.cs.toronto.edu/~kriz/cifar.html) into data/cifar10, this config's default root:
    python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-10-python.tar.gz --out=data/cifar10
    python main.py --config=configs/cifar10_vit.py --workdir=runs/cifar10_vit
    # A prepared TFDS dataset instead (array_record): cifar10 or cifar100
    python main.py --config=configs/cifar10_vit.py:tfds=cifar100 --workdir=runs/cifar100_vit

Model: ViT with 8x8-pixel patches (4x4 grid + CLS), width 128, 6 blocks, 4 heads, MLP 256 (0.8 M parameters);
AdamW lr 1e-3, weight decay 0.05, 400 warmup steps then cosine, batch 128, 4,000 steps (10.2 epochs);
pad-4 random crop + flip. Measured on 2 CPU cores (≈ 410 img/s, 23 min in all): test accuracy 0.402 / 0.483 /
0.550 / 0.561 after 1k / 2k / 3k / 4k steps; expected ≥ 0.55.
Arguments (comma-separated): `tfds=<name>` reads TFDS instead of the folder; `model=resnet18|vgg19` trains a CNN
baseline with the same data, optimizer and budget;
`steps=N` shortens the schedule (sweeps); `fewshot` adds the few-shot evaluator (1/5/10/25-shot ridge probes of
the pre-logits at every evaluation) on the pretraining data and on scikit-learn's digits, a downstream task whose
classes and domain the model never saw (Raghu et al. 2021 §7, Figure 12); `runlocal` shrinks it to a few steps
(tests).
"""

import ml_collections

from configs import common

CNNS = {"resnet18": dict(name="resnet", depth=18, stem="cifar", norm="batch", weight_standardization=False,
                         width=64, dtype="float32"),
        "vgg19": dict(name="vgg", norm="batch", width=64, dtype="float32")}


def get_config(arg=None):
    a = common.parse_arg(arg, tfds="", runlocal=False, model="vit", steps=0, fewshot=False)
    c = common.base()
    c.total_steps = 4000
    c.batch_size = 128
    c.eval_batch_size = 512
    c.log_every_steps = 100
    c.eval_every_steps = 1000
    c.checkpoint_every_steps = 1000
    c.model.variant = "Ti/8"
    c.model.width = 128
    c.model.depth = 6
    c.model.num_heads = 4
    c.model.mlp_dim = 256
    c.data.source = "folder"
    c.data.root = "data/cifar10"
    c.data.image_size = 32
    c.data.num_classes = 10
    if a.tfds:
        c.data.source, c.data.name, c.data.root = "tfds", a.tfds, ""
        c.data.num_classes = 100 if a.tfds.startswith("cifar100") else 10
    if a.model != "vit":  # CNN baselines in the same loop, data and budget (Jelassi et al. 2022 §6, Table 2)
        if a.model not in CNNS:
            raise ValueError(f"config argument model={a.model!r} is not one of {['vit', *CNNS]}")
        c.model = ml_collections.ConfigDict(CNNS[a.model])
        c.data.permutation_patch_size = 8  # permuted-patch runs use the ViT's patch grid
    c.pp.train_crop = "pad"
    c.pp.pad = 4
    c.pp.flip = True
    c.pp.eval_crop_fraction = 1.0
    c.optim.warmup_steps = 400
    c.optim.lr = 1e-3
    c.optim.weight_decay = 0.05
    if a.steps:  # same schedule shape: 10 % warmup, four evaluations
        c.total_steps = a.steps
        c.optim.warmup_steps = a.steps // 10
        c.eval_every_steps = c.checkpoint_every_steps = max(a.steps // 4, 1)
    if a.fewshot:  # 10-shot transfer probes (Raghu et al. 2021 §7): the pretraining data and embedded digits
        c.fewshot.every_steps = c.eval_every_steps
        own = "cifar10" if not a.tfds else a.tfds
        c.fewshot.datasets = ml_collections.ConfigDict({own: {}, "digits": {"source": "digits", "name": "",
                                                                              "root": ""}})
    if a.runlocal:
        c.total_steps, c.batch_size, c.eval_batch_size = 2, 8, 8
        c.log_every_steps = c.eval_every_steps = c.checkpoint_every_steps = 1
        c.optim.warmup_steps = 1
        c.data.eval_examples = 8
        c.mesh.data = 1
    return c
