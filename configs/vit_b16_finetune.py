"""ViT-B/16 fine-tuning at 384 px from a published ImageNet-21k checkpoint (Dosovitskiy et al. 2021 §3.2, App. B.1.1).

    gsutil cp gs://vit_models/imagenet21k/ViT-B_16.npz /data/vit/            # or pass gs:// (needs gcsfs)
    python main.py --config=configs/vit_b16_finetune.py:ckpt=/data/vit/ViT-B_16.npz --workdir=runs/vit_b16_ft
    python main.py --config=configs/vit_b16_finetune.py:data=cifar10,ckpt=/data/vit/ViT-B_16.npz
    python main.py --config=configs/vit_b16_finetune.py:folder=/data/my_images,ckpt=…  # root/{train,test}/<class>/
    python main.py --config=configs/vit_b16_finetune.py:runlocal,ckpt=/tmp/ViT-B_16.npz  # 2 steps on this CPU

Recipe (paper App. B.1.1 and google-research/vision_transformer `vit_jax/configs/common.py`): SGD with momentum
0.9, no weight decay, global-norm clipping at 1, batch 512, lr 0.03 (the paper sweeps {0.003, 0.01, 0.03, 0.06})
with 500 linear warmup steps then cosine decay to 0, 20,000 steps for ImageNet (10,000 for CIFAR), softmax
cross-entropy, no dropout; inception crop (area ≥ 5 %) + flip at 384 px for training; for evaluation the shorter
side is resized to 384 px and centre-cropped (vit_jax resizes to 384×384 without keeping the aspect). The
checkpoint's head and `pre_logits` layer are replaced by a zero-initialised head (`config.init_reinit`), and its
14×14 posemb grid (224 px) is resampled to 24×24 (`config.init_posemb_resize`, scipy zoom as in vit_jax).
vit_jax accumulates gradients over 8 micro-batches to fit 8 V100s: `--config.accum_steps=8` does the same here.
Expected: ImageNet top-1 ≈ 84.6 % (vit_jax README: ViT-B_16, imagenet21k → imagenet2012 at 384 px, 84.61/84.62 %
in two runs).
Arguments (comma-separated): `data=i1k|cifar10|cifar100` (TFDS; default i1k), `folder=PATH` (an image folder
instead), `ckpt=PATH` (the `.npz`; default the gs:// original), `runlocal` (2 steps of batch 2, no checkpoint, on
scikit-learn's two sample photos unless `folder=` is given).
"""


from configs import common

# name: (tfds name, train split, eval split, classes, steps), as vit_jax's DATASET_PRESETS.
FINETUNE_DATA = {
    "i1k": ("imagenet2012", "train[:99%]", "validation", 1000, 20_000),
    "cifar10": ("cifar10", "train[:98%]", "test", 10, 10_000),
    "cifar100": ("cifar100", "train[:98%]", "test", 100, 10_000),
}
CHECKPOINT = "gs://vit_models/imagenet21k/ViT-B_16.npz"


def get_config(arg=None):
    a = common.parse_arg(arg, data="i1k", folder="", ckpt=CHECKPOINT, runlocal=False)
    if a.data not in FINETUNE_DATA:
        raise ValueError(f"config argument data={a.data!r} is not one of {sorted(FINETUNE_DATA)}")
    name, train_split, eval_split, classes, steps = FINETUNE_DATA[a.data]
    c = common.base()
    c.init_from = a.ckpt
    c.init_reinit = r"^(head|pre_logits)/"  # new head; the i21k checkpoint's pre_logits layer is dropped
    c.init_posemb_resize = "zoom"
    c.total_steps = steps
    c.batch_size = 512
    c.log_every_steps = 50
    c.eval_every_steps = 1000
    c.checkpoint_every_steps = 1000
    c.loss = "softmax_xent"
    c.model.variant = "B/16"
    c.model.classifier = "token"      # as the checkpoint (a CLS token and its posemb entry)
    c.data.source, c.data.name = "tfds", name
    c.data.train_split, c.data.eval_split = train_split, eval_split
    c.data.image_size = 384
    c.data.num_classes = classes
    c.pp.train_crop = "inception"
    c.pp.crop_area_min = 0.05
    c.pp.flip = True
    c.pp.eval_crop_fraction = 1.0     # resize, no centre crop
    c.optim.name = "sgd"
    c.optim.momentum = 0.9
    c.optim.lr = 0.03
    c.optim.warmup_steps = 500
    c.optim.schedule = "cosine"
    c.optim.weight_decay = 0.0
    c.optim.grad_clip_norm = 1.0
    return common.folder_or_runlocal(c, a.folder, a.runlocal)
