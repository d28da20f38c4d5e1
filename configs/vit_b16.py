"""ViT-B/16 pretraining (ImageNet-21k / JFT-style recipe, see `configs/common.py:pretrain`).

    python main.py --config=configs/vit_b16.py --workdir=runs/vit_b16               # ImageNet-1k (TFDS), 300 epochs
    python main.py --config=configs/vit_b16.py:data=i21k --workdir=runs/vit_b16_i21k  # ImageNet-21k, 90 epochs
    python main.py --config=configs/vit_b16.py:folder=/data/jft_like                   # an image folder
    python main.py --config=configs/vit_b16.py:runlocal                                # 2 steps on this CPU
    python main.py --config=configs/vit_b16.py:aug=medium2 --workdir=runs/vit_b16_augreg  # + mixup 0.5, randaug(2,15)

`aug=` picks one of AugReg's augmentation levels (Steiner et al. 2022, "How to train your ViT?", §3.3, Fig. 4;
`configs/common.py:AUG_LEVELS`): none, light1, light2, medium1, medium2 (AugReg's setting for B/16), strong1, strong2.

Expected at full scale (ViT paper Table 2/5, AugReg): ImageNet-1k from scratch with this recipe is far below the
numbers of 21k/JFT pretraining; a pretrained checkpoint is the usual starting point for fine-tuning.
"""

from configs import common


def get_config(arg=None):
    return common.pretrain("B/16", arg)
