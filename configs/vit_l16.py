"""ViT-L/16 pretraining (ImageNet-21k / JFT-style recipe, see `configs/common.py:pretrain`).

    python main.py --config=configs/vit_l16.py --workdir=runs/vit_l16               # ImageNet-1k (TFDS), 300 epochs
    python main.py --config=configs/vit_l16.py:data=i21k --workdir=runs/vit_l16_i21k  # ImageNet-21k, 90 epochs
    python main.py --config=configs/vit_l16.py:folder=/data/jft_like                   # an image folder
    python main.py --config=configs/vit_l16.py:runlocal                                # 2 steps on this CPU

Expected at full scale (ViT paper Table 2/5, AugReg): ImageNet-1k from scratch with this recipe is far below the
numbers of 21k/JFT pretraining; a pretrained checkpoint is the usual starting point for fine-tuning.
"""

from configs import common


def get_config(arg=None):
    return common.pretrain("L/16", arg)
