"""Shared config pieces: every key the trainer reads, with its default, in one place.

Config files call `base()` and change what their experiment needs; `parse_arg("runlocal,i21k")` turns the
`file.py:arg` suffix into flags. A key that nothing reads does not belong here (tests build and run every config).
"""

import ml_collections
from ml_collections import config_dict


def base() -> ml_collections.ConfigDict:
    """Defaults for every key of a training run (see `vit_jax_struct/train/trainer.py`)."""
    c = ml_collections.ConfigDict()
    c.seed = 0                        # Root of all randomness: init, dropout, data order, augmentation.
    c.total_steps = 1000              # Optimizer steps.
    c.batch_size = 128                # Global batch (examples), split over all devices and hosts.
    c.accum_steps = 1                 # Gradient accumulation: micro-batches of batch_size/accum_steps per update.
    c.eval_batch_size = 0             # 0: same as batch_size.
    c.log_every_steps = 50
    c.eval_every_steps = 500          # 0: evaluate only at the end.
    c.checkpoint_every_steps = 500    # Plus at the end and on SIGTERM.
    c.keep_checkpoints = 3
    c.save_checkpoints = True         # False: no checkpoint at all (smoke runs); the run cannot resume
    c.checkpoint_timeout_s = 1200     # a background checkpoint write that takes longer fails the run
    c.metrics_flush_secs = 30.0       # gs:// workdirs: longest time between uploads of metrics.jsonl / TensorBoard
    c.init_from = ""                  # Warm start: a workdir or checkpoints/<step> folder (parameters only),
    #                                   or a weights file: ViT .npz (vit_jax / big_vision), timm .safetensors,
    #                                   Hugging Face folder (models/official.py, torch_layouts.py); BiT .npz.
    c.init_reinit = r"^(head|pre_logits)/"  # weights file: params (regex on paths) kept at their fresh init; matching
    #                                   checkpoint entries are dropped ("": load everything, shapes must match);
    #                                   a run checkpoint: those whose shape differs (another number of classes)
    c.init_posemb_resize = "zoom"     # posemb grid resampling: "zoom" (scipy, as vit_jax) | "bilinear" | "bicubic"
    c.init_posemb_grid = ""           # weights file: the checkpoint's patch grid "h,w" when not square ("": square)
    c.init_convert_classifier = False  # allow token ckpt -> gap model (drop cls) / gap -> token (zero cls)
    c.multihost = False               # jax.distributed.initialize() before anything else (one process per host).
    # Read with multihost=True (vit_jax_struct/train/distributed.py); ""/0/-1: from the environment (TPU VM, SLURM).
    c.distributed = ml_collections.ConfigDict()
    c.distributed.coordinator_address = ""  # "host:port" of process 0 (it runs the coordination service)
    c.distributed.num_processes = 0   # processes in the run (one per host)
    c.distributed.process_id = -1     # this process's index in [0, num_processes)
    c.distributed.initialization_timeout = 1800  # seconds for every process to join (large pods start slowly),
    #                                   else one line naming the coordinator and who waited
    # Persistent XLA compilation cache: a folder or gs:// URL (one for all hosts of a pod), "" off, "auto":
    # $JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/vit_jax_struct/jax_compilation_cache (single-process runs).
    c.compilation_cache_dir = "auto"
    # jax.profiler trace of train steps start_step … start_step+num_steps-1 -> workdir/tensorboard/plugins/profile/
    c.profile = ml_collections.ConfigDict()
    c.profile.start_step = 10         # after the first step's compilation
    c.profile.num_steps = 0           # 0: off
    c.profile.process_index = 0       # the process that traces; -1: every process
    c.tensorboard = True
    c.loss = "softmax_xent"           # or "sigmoid_xent"
    c.label_smoothing = 0.0
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1))
    c.param_sharding = ((".*", "fsdp"),)  # (regex, 'fsdp'|'replicate'); with mesh.fsdp=1 all are replicated.

    c.model = ml_collections.ConfigDict()
    c.model.name = "vit"
    c.model.variant = "Ti/16"
    for k in ("width", "depth", "mlp_dim", "num_heads", "patch_size", "representation_size"):
        setattr(c.model, k, config_dict.placeholder(int))  # None: from the variant / no pre_logits layer.
    c.model.classifier = "token"      # or "gap"
    c.model.posemb = "learn"          # or "sincos2d"
    c.model.dropout = 0.0
    c.model.attention_dropout = 0.0
    c.model.head_bias_init = 0.0
    c.model.dtype = "float32"
    c.model.attention = "standard"    # or "positional" (Jelassi et al. 2022): attention from the posemb only
    c.model.positional_attention_blocks = ""  # "": all blocks; "0,1": those
    c.model.add_posemb = True         # add the posemb to the tokens
    c.model.skip_ablation = ""        # e.g. "6:both,7:mhsa" removes residuals (Raghu et al. 2021 §5)
    c.model.remat_policy = "none"     # per-block jax.checkpoint policy: "nothing_saveable", "dots_saveable", …
    c.model.scan = False              # nn.scan over encoder blocks (params stacked: Transformer/encoderblock [L, …])
    c.model.gelu = "tanh"             # MLP GELU: "tanh" (flax, vit_jax, big_vision), "erf" (PyTorch/timm default) or
    #                                   "quick" (x * sigmoid(1.702 x): OpenAI CLIP towers, timm act_layer='quick_gelu')
    c.model.num_registers = 0         # register tokens (Darcet et al. 2024): R learned tokens, discarded at the output
    c.model.layerscale = config_dict.placeholder(float)  # None; 1e-5: LayerScale ls1/ls2 (DeiT III, DINOv2)
    c.model.norm_pre = False          # LayerNorm after the posemb, before the first block (CLIP ln_pre, timm norm_pre)
    c.model.layer_norm_eps = 1e-6     # every LayerNorm's epsilon (1e-5 for timm's CLIP towers / OpenCLIP)

    c.data = ml_collections.ConfigDict()
    c.data.source = "digits"          # "digits" | "folder" | "tfds" | "sample_photos" (sklearn's 2 photos, offline)
    c.data.name = ""                  # TFDS name (source='tfds')
    c.data.root = ""                  # image-folder root (source='folder') or TFDS data_dir
    c.data.train_split = "train"
    c.data.eval_split = "test"
    c.data.image_size = 224           # pixels (square)
    c.data.num_classes = 0            # 0: as found in the data; else checked against it
    c.data.train_fraction = 0.0       # data-size subsets: 0 (all) or a fraction in (0, 1], nested across fractions
    c.data.train_examples = 0         # or an example count (overrides train_fraction)
    c.data.subset_seed = 0            # the fixed order the nested subsets are cut from
    c.data.scale_steps_with_data = False  # True: total_steps shrinks with the subset (same epochs)
    c.data.permute_patches = False    # one fixed random permutation of the patch grid, train and eval (J2, J3)
    c.data.permutation_seed = 0
    c.data.permutation_patch_size = 0  # 0: the model's patch size (ViT); required for CNNs
    c.data.eval_examples = 0          # 0: the whole eval split; N: N examples spread evenly over it
    c.data.num_threads = 2            # grain reader threads per host (decode + augment)
    c.data.prefetch = 256             # grain prefetch buffer (examples)
    c.data.worker_count = 0           # 0: read in threads of the trainer's process; N > 0: N grain worker processes
    #                                   (each with num_threads threads, batching i::N); resume needs the same N
    c.data.in_memory = False          # True: decode every train/eval image once at start-up into one uint8 array
    #                                   (small datasets: CIFAR, SVHN); the same batches, faster
    c.data.device_augment = True      # data held in memory (digits, in_memory=True) and no RandAugment: the host
    #                                   gathers uint8 batches by index, crop/flip/permutation run in the jitted step
    c.data.decode_errors = "raise"    # "raise": an unreadable image stops the run, naming it; "skip": replaced by
    #                                   the next readable example (deterministic), counted as data/skipped

    c.pp = ml_collections.ConfigDict()
    c.pp.train_crop = "inception"     # "inception" | "pad" | "none"
    c.pp.crop_area_min = 0.05
    c.pp.pad = 4
    c.pp.flip = True
    c.pp.jpeg_draft = True            # folder JPEGs: decode at 1/2..1/8 size when the inception crop is >= 2x the
    #                                   output side (Image.draft; a few grey levels from the full decode, faster)
    c.pp.jpeg_decoder = "pillow"      # JPEG files: "pillow", or "simplejpeg" (libjpeg-turbo's TurboJPEG API: the same
    #                                   pixels, no faster here: benchmarks/input_pipeline.py, docs/input_pipeline.md)
    c.pp.eval_crop_fraction = 0.875
    c.pp.value_range = (-1.0, 1.0)    # applied on the device: batches travel as uint8 (data/preprocess.py)
    c.pp.normalize = ""               # instead of value_range: "imagenet" / "clip" mean/std (DeiT, DINOv2, CLIP)
    # RandAugment (Cubuk et al. 2020) after crop + flip, TF/big_vision op list and magnitude scale (data/augment.py).
    c.pp.randaug_layers = 0           # ops per image; 0: off. AugReg: 2
    c.pp.randaug_magnitude = 10       # 0..30 on TF's scale (10 = max level); AugReg: 0, 10, 15, 20

    # Batch mixing in the jitted train step, keys from (seed, step) (data/mixup.py); labels become soft [B, K].
    c.mixup = ml_collections.ConfigDict()
    c.mixup.alpha = 0.0               # mixup (Zhang et al. 2018): λ ~ Beta(alpha, alpha); 0: off. AugReg: 0.2/0.5/0.8
    c.mixup.cutmix_alpha = 0.0        # CutMix (Yun et al. 2019): box area 1 - λ, λ ~ Beta(cutmix_alpha, ·); 0: off
    c.mixup.prob = 1.0                # probability that a batch is mixed
    c.mixup.switch_prob = 0.5         # with both alphas > 0: probability of CutMix rather than mixup

    c.optim = ml_collections.ConfigDict()
    c.optim.name = "adamw"            # "adamw" | "sgd" (heavy-ball momentum: the ViT fine-tuning recipe)
    c.optim.momentum = 0.9            # sgd only; 0: plain SGD
    c.optim.lr = 1e-3
    c.optim.warmup_steps = 100
    c.optim.schedule = "cosine"       # "cosine" | "linear" | "constant"
    c.optim.end_lr = 0.0
    c.optim.weight_decay = 0.0        # AdamW, optax convention: decay lr_t * weight_decay * param per step
    c.optim.wd_mask = r"/kernel$"     # regex on parameter paths that get weight decay
    c.optim.b1 = 0.9
    c.optim.b2 = 0.999
    c.optim.eps = 1e-8
    c.optim.mu_dtype = ""             # Adam first-moment dtype: "" (= params, float32) or "bfloat16"
    c.optim.grad_clip_norm = 1.0      # 0: no clipping

    # Few-shot linear evaluation of the frozen pre-logits during training (big_vision's `fewshot` evaluator:
    # closed-form ridge on {-1, +1} targets, vit_jax_struct/train/fewshot_eval.py), logged as fewshot/<name>_<k>shot.
    c.fewshot = ml_collections.ConfigDict()
    c.fewshot.every_steps = 0         # 0: off; N: every N steps and at the last step
    c.fewshot.shots = (1, 5, 10, 25)  # k examples per class
    c.fewshot.repeats = 3             # shot draws per k (seeds seed, seed+1, ...); the accuracy is their mean
    c.fewshot.l2_grid = tuple(2.0 ** e for e in range(-10, 11, 2))  # ridge lambda candidates, 2^-10 ... 2^10
    c.fewshot.train_examples = 2000   # train images (evenly spread) the shots and held-out examples come from
    c.fewshot.holdout_examples = 500  # of those, kept for choosing lambda (never among the shots)
    c.fewshot.test_examples = 1000    # test images (evenly spread; 0: the whole split)
    # {name: {source, name, root, train_split, test_split}}; keys not given: the run's config.data. Empty: the run's
    # own data (train_split for the shots, eval_split as the test split), named data.name / the folder's base name.
    c.fewshot.datasets = ml_collections.ConfigDict()
    return c


def parse_arg(arg: str, **defaults) -> ml_collections.ConfigDict:
    """`"runlocal,res=384"` -> ConfigDict(runlocal=True, res=384); keys must be among `defaults`.

    Raises:
      ValueError: an unknown key, naming the allowed ones.
    """
    out = ml_collections.ConfigDict(defaults)
    for item in filter(None, (arg or "").split(",")):
        key, _, value = item.partition("=")
        if key not in defaults:
            raise ValueError(f"config argument {key!r} is not one of {sorted(defaults)}")
        if not value:
            out[key] = True
        else:
            out[key] = type(defaults[key])(value) if not isinstance(defaults[key], bool) else value == "True"
    return out


# AugReg's augmentation levels (Steiner et al. 2022, "How to train your ViT?", §3.3 and Fig. 4; the values of
# big_vision's configs/vit_i1k.py): name -> (mixup alpha, RandAugment layers, magnitude). "light1" is randaug(2, 0),
# which is not nothing (AutoContrast, Equalize, Invert … still apply at magnitude 0).
AUG_LEVELS = {
    "none": (0.0, 0, 0),
    "light1": (0.0, 2, 0),
    "light2": (0.2, 2, 10),
    "medium1": (0.2, 2, 15),
    "medium2": (0.5, 2, 15),
    "strong1": (0.5, 2, 20),
    "strong2": (0.8, 2, 20),
}


def set_augmentation(c: ml_collections.ConfigDict, level: str) -> ml_collections.ConfigDict:
    """Sets `c.mixup.alpha`, `c.pp.randaug_layers`, `c.pp.randaug_magnitude` to AugReg level `level` (in place).

    Raises:
      ValueError: a level not in `AUG_LEVELS`.
    """
    if level not in AUG_LEVELS:
        raise ValueError(f"config argument aug={level!r} is not one of {list(AUG_LEVELS)}")
    c.mixup.alpha, c.pp.randaug_layers, c.pp.randaug_magnitude = AUG_LEVELS[level]
    return c


# Train/eval splits and sizes of the pretraining datasets the vit_*.py recipes know (TFDS names).
PRETRAIN_DATA = {
    # name: (tfds name, train split, eval split, train examples, classes, loss)
    "i1k": ("imagenet2012", "train[:99%]", "train[99%:]", 1_268_356, 1000, "sigmoid_xent"),
    "i21k": ("imagenet21k", "full[51200:]", "full[:51200]", 13_100_000, 21843, "sigmoid_xent"),
}


def pretrain(variant: str, arg=None) -> ml_collections.ConfigDict:
    """ImageNet-21k / JFT-style ViT pretraining recipe (Dosovitskiy et al. 2021 §4.1, Table 3; big_vision).

    Adam (b1 0.9, b2 0.999), batch 4096, lr 1e-3 with 10k linear warmup and linear decay, weight decay 0.1 in the
    paper's (and optax's) lr-coupled convention, global-norm clipping at 1, sigmoid cross-entropy with head bias −10,
    dropout 0.1 for L and H, inception crop + flip at 224 px; 300 epochs of ImageNet-1k or 90 of ImageNet-21k.
    L and H shard parameters and optimizer state over all devices (FSDP) and run the encoder as one `nn.scan` with
    per-block remat (`nothing_saveable`), as big_vision does for its large models.

    Arguments (`file.py:arg`, comma-separated): `data=i1k|i21k` (TFDS, default i1k, i.e. the 1000-class head the
    parameter counts refer to), `folder=PATH` (an image folder root/{train,test}/<class>/ instead, e.g. a prepared
    JFT-style set), `runlocal` (2 steps of batch 2 on 224-px images, for this CPU, no checkpoint;
    scikit-learn's two sample photos unless `folder=` is given), `aug=LEVEL` (AugReg's
    augmentation, Steiner et al. 2022 §3.3: `none` (default: inception crop + flip only), `light1`, `light2`,
    `medium1`, `medium2` (mixup 0.5 + RandAugment(2, 15), AugReg's choice for S/16, B/16, L/16), `strong1`,
    `strong2`; see `AUG_LEVELS`).
    """
    a = parse_arg(arg, data="i1k", folder="", runlocal=False, aug="none")
    if a.data not in PRETRAIN_DATA:
        raise ValueError(f"config argument data={a.data!r} is not one of {sorted(PRETRAIN_DATA)}")
    name, train_split, eval_split, n_train, classes, loss = PRETRAIN_DATA[a.data]
    epochs = 300 if a.data == "i1k" else 90
    size = variant.split("/")[0]
    c = base()
    c.batch_size = 4096
    c.total_steps = round(epochs * n_train / c.batch_size)
    c.log_every_steps = 100
    c.eval_every_steps = 10_000
    c.checkpoint_every_steps = 2_000
    c.loss = loss
    c.model.variant = variant
    c.model.head_bias_init = -10.0
    c.model.dropout = 0.1 if size in ("L", "H") else 0.0
    if size in ("L", "H"):
        # FSDP over every chip with per-block remat and a scanned encoder: ViT-L/16 at batch 4096 on v4:4x4x4 plans
        # 3.8 GiB per chip (docs/scaling.md). `--config.model.scan=False` for the unscanned parameter layout.
        c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=-1))
        c.model.remat_policy = "nothing_saveable"
        c.model.scan = True
    c.data.source, c.data.name = "tfds", name
    c.data.train_split, c.data.eval_split = train_split, eval_split
    c.data.image_size = 224
    c.data.num_classes = classes
    c.pp.train_crop = "inception"
    c.pp.crop_area_min = 0.05
    c.pp.eval_crop_fraction = 0.875
    c.optim.lr = 1e-3
    c.optim.warmup_steps = 10_000
    c.optim.schedule = "linear"
    c.optim.weight_decay = 0.1
    c.optim.grad_clip_norm = 1.0
    set_augmentation(c, a.aug)
    return folder_or_runlocal(c, a.folder, a.runlocal)


def folder_or_runlocal(c: ml_collections.ConfigDict, folder: str, runlocal: bool) -> ml_collections.ConfigDict:
    """Applies the `folder=PATH` / `runlocal` config arguments of the 224/384-px recipes to `c` (in place).

    `folder`: read an image folder root/{train,test}/<class>/ instead of TFDS. `runlocal`: 2 steps of batch 2 on one
    device, for this CPU, writing no checkpoint (`--config.save_checkpoints=True` to write one); without `folder` it
    reads the two photos scikit-learn ships (`data.source='sample_photos'`, offline), so it runs on a fresh clone.
    """
    if folder:
        c.data.source, c.data.name = "folder", ""
        c.data.root = folder
        c.data.num_classes = 0  # As many as the folder has.
        c.data.train_split, c.data.eval_split = "train", "test"
    elif runlocal:
        c.data.source, c.data.name, c.data.root = "sample_photos", "", ""
        c.data.num_classes = 0
        c.data.train_split, c.data.eval_split = "train", "test"
    if runlocal:
        c.total_steps, c.batch_size, c.eval_batch_size = 2, 2, 2
        c.data.eval_examples = 2
        c.log_every_steps, c.eval_every_steps, c.checkpoint_every_steps = 1, 0, 0
        c.save_checkpoints = False  # a ViT-L state is 3.6 GB: not for a smoke run
        c.optim.warmup_steps = 1
        c.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=1))  # one device: batch 2 splits no further
    return c
