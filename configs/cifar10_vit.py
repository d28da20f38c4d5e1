"""ViT on CIFAR-10 (Krizhevsky 2009) from 32-px images, sized to train on a 2-core CPU in under 30 minutes.

    # The image-folder copy (root/{train,test}/<class>/*.jpg), e.g. from ../shared/data/cifar10-jpeg.tar.gz:
    mkdir -p /tmp/data/cifar10 && tar xzf ../shared/data/cifar10-jpeg.tar.gz -C /tmp/data/cifar10
    python main.py --config=configs/cifar10_vit.py --workdir=runs/cifar10_vit --config.data.root=/tmp/data/cifar10
    # A prepared TFDS dataset instead (array_record): cifar10 or cifar100
    python main.py --config=configs/cifar10_vit.py:tfds=cifar100 --workdir=runs/cifar100_vit

Model: ViT with 8x8-pixel patches (4x4 grid + CLS), width 192, 6 blocks, 3 heads, MLP 384 (1.8 M parameters);
AdamW lr 1e-3, weight decay 0.05, 300 warmup steps then cosine, batch 128, 2,800 steps (7.2 epochs);
pad-4 random crop + flip. Expected (measured on 2 CPU cores, ≈ 25 min): test accuracy ≥ 0.55; see the closing
note of the foundation issue for the measured curve. Arguments: `tfds=<name>` reads TFDS instead of the folder,
`runlocal` shrinks it to a few steps (tests).
"""

from configs import common


def get_config(arg=None):
    a = common.parse_arg(arg, tfds="", runlocal=False)
    c = common.base()
    c.total_steps = 2800
    c.batch_size = 128
    c.eval_batch_size = 500
    c.log_every_steps = 100
    c.eval_every_steps = 500
    c.checkpoint_every_steps = 500
    c.model.variant = "Ti/8"
    c.model.depth = 6
    c.model.mlp_dim = 384
    c.data.source = "folder"
    c.data.root = "data/cifar10"
    c.data.image_size = 32
    c.data.num_classes = 10
    if a.tfds:
        c.data.source, c.data.name, c.data.root = "tfds", a.tfds, ""
        c.data.num_classes = 100 if a.tfds.startswith("cifar100") else 10
    c.pp.train_crop = "pad"
    c.pp.pad = 4
    c.pp.flip = True
    c.pp.eval_crop_fraction = 1.0
    c.optim.lr = 1e-3
    c.optim.warmup_steps = 300
    c.optim.weight_decay = 0.05
    if a.runlocal:
        c.total_steps, c.batch_size, c.eval_batch_size = 2, 8, 8
        c.log_every_steps = c.eval_every_steps = c.checkpoint_every_steps = 1
        c.optim.warmup_steps = 1
        c.data.eval_examples = 8
        c.mesh.data = 1
    return c
