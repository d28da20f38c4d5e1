"""CIFAR-100 sweep: J2/J3 (original vs permuted patches, with a positive control; Jelassi et al. §6), J1, R3, R5.

    python launch/sweep.py --sweep=configs/sweeps/cifar100_permuted.py --root=runs/cifar100_permuted --run --jobs=2
    python launch/sweep.py --sweep=configs/sweeps/cifar100_permuted.py --root=… --run --jobs=2 --only=vit_   # ViT arms
    python -m vit_jax_struct.experiments.report --runs=runs/cifar100_permuted --out=docs/results/cifar100

CIFAR-100 as an image folder `root/{train,test}/<class>/*.png` (100 classes). Every ViT arm is
`configs/cifar10_vit.py` (width 128, depth 6, 8-px patches: a 4x4 grid) with 100 classes, `steps` steps (default
1000 = 2.6 epochs; sized so the 18 ViT runs fit about 1.5 hours on 2 CPU cores, two at a time). Arms, each with seeds
0 … `seeds`−1 (default and fixed maximum 3, chosen before any result was seen):

- `vit_original`: unpermuted images;
- `vit_permuted8`: one fixed permutation of the 8-px blocks, the ViT's own patch size. For a ViT whose position
  embeddings start i.i.d. this is the same learning problem up to a relabelling of positions, so J2's "no effect"
  is expected by construction;
- `vit_permuted4`: the **positive control**: 4-px blocks permuted across the whole image under 8-px patches, so
  every patch holds four blocks from anywhere in the image in a fixed but scrambled arrangement; the patch embedding
  (a linear map of a patch) loses the spatial structure inside the patch, so this should cost the ViT accuracy. If it does not, J2's comparison cannot detect a harmful permutation at this budget.
- `vit_permuted8pi` (seeds 1 … `seeds`−1 only): the same, but permutation `seed` for initialization `seed`
  (`data.permutation_seed`), so that J4 is also measured over permutations, not only over initializations of one
  permutation; its seed 0 would be `vit_permuted8,seed=0` again (the same effective config), which is used instead.
  Added after J4's results existed (under the shared permutation the posemb was somewhat local already in token
  order, unexplained; one permutation could be special). Never pooled into J2's arm:
  the scoreboard labels its permutation "patch, π seed k";
- `vit_positional` (J1: positional attention in every block, as Jelassi et al. §6), `vit_gap` (R5/R8: GAP classifier), `vit_skip3` (R3/R4:
  both residuals of block 3 of 6 removed): further catalog rows against the same `vit_original` baseline;
- `vit_reg4`: 4 register tokens (`model.num_registers=4`; Darcet et al. 2024, "Vision Transformers Need Registers"):
  the D1 row (high-norm patch tokens with and without registers, accuracy, localization margin) against the same
  `vit_original`; added after the other arms' 1,000-step results existed, before any run of the `regime` setting
  finished; 3 seeds as every arm;
- `cnn_{resnet18,vgg19}_{original,permuted8,permuted4}`: J3's CNNs (16 channels in the first stage, `cnn_steps`),
  unpermuted, 8-px and 4-px blocks (the paper's Fig. 5 is a curve over block sizes: the finer, the larger the loss;
  the 4-px arms were added after the 8-px results existed, 3 seeds as for every arm; their rule was committed before
  any of them had finished, while the first was training).
  XLA's CPU convolutions are slow: `python benchmarks/train_step.py --config=configs/cifar10_vit.py:model=resnet18
  --config.model.width=16 --steps=3` gives 2.7 s a step for ResNet-18 and 1.9 s for VGG-19 (batch 128, 2 cores shared
  with a training run; about 30 % of the matmul rate measured beside it; benchmarks/results/train_step.jsonl), so
  `time/wall` of the finished ResNet-18 runs: 467–489 s alone (≈ 290 img/s), 1454–3755 s beside other runs: run them
  one at a time, where an accelerator is, or after the ViT sweeps. Pinned to one core (`taskset -c 0`, beside a
  training run niced on the same core) with the data on the device (`--config.data.in_memory=True`), the same step
  takes 0.85 s (ResNet-18) and 0.73 s (VGG-19) at width 16, 2.5 s and 2.6 s at width 32
  (docs/results/performance/cnn_regime_step.jsonl, 2026-12-06, Intel Xeon; the benchmark feeds noise, so the data
  path is not in it): the 2.7 s above was measured with both cores shared with another run.

Seed-major order: every completed seed adds one run to each arm.
Arguments: `regime` (the trained-model setting, `REGIME`), `steps=N`, `cnn_steps=N`, `cnn_width=N`, `seeds=N`, `root=PATH` (default data/cifar100, written by `python -m vit_jax_struct.data.prepare --cifar=…`).
"""

from configs import common

MAX_SEEDS = 3  # the fixed maximum number of seeds per arm, stated before the runs (docs/experiments.md)
# The trained-model setting (`regime`): the same models and arms, 16,000 ViT steps (41 epochs) instead of 1,000, the
# CNNs 8,000 steps at width 32, the data held in memory. The ViT budget was fixed by its pilot before any sweep run
# started (docs/results/regime_pilot/README.md: 38.8 % at 8,000 steps, 43.7 % at 16,000, target 40 %; two budgets
# tried, one seed each). The CNNs' is not piloted: at width 32 a run of 8,000 steps is ≈ 5.5 h on one core of this
# CPU (2.5 s a step, docs/results/performance/cnn_regime_step.jsonl), ≈ 1.9 h at width 16: for an accelerator.
REGIME = {"steps": 16000, "cnn_steps": 8000, "cnn_width": 32}


def get_sweep(arg=None):
    defaults = dict(steps=1000, cnn_steps=1000, cnn_width=16, seeds=MAX_SEEDS, root="data/cifar100")
    a = common.parse_arg(arg, **defaults, regime=False)
    if a.regime:  # the setting's values, under the arguments given explicitly
        a = common.parse_arg(arg, **{**defaults, **REGIME}, regime=False)
    if not 1 <= a.seeds <= MAX_SEEDS:
        raise ValueError(f"sweep argument seeds={a.seeds} must be 1 … {MAX_SEEDS} (the maximum fixed in advance)")
    vit = f"configs/cifar10_vit.py:steps={a.steps}"
    arms = [("vit_original", vit, {}),
            ("vit_permuted8", vit, {"data.permute_patches": True}),
            ("vit_permuted4", vit, {"data.permute_patches": True, "data.permutation_patch_size": 4}),
            # Further rows that share the unpermuted baseline (same data, model and budget): J1, R5/R8, R3/R4.
            ("vit_positional", vit, {"model.attention": "positional"}),
            ("vit_gap", vit, {"model.classifier": "gap"}),
            ("vit_skip3", vit, {"model.skip_ablation": "3:both"}),
            # Darcet et al. 2024 (registers; issue 40): 4 register tokens, the same model otherwise.
            ("vit_reg4", vit, {"model.num_registers": 4})]
    for model in ("resnet18", "vgg19"):
        cnn = f"configs/cifar10_vit.py:model={model},steps={a.cnn_steps}"
        extra = {"model.width": a.cnn_width}
        arms += [(f"cnn_{model}w{a.cnn_width}_original", cnn, extra),
                 (f"cnn_{model}w{a.cnn_width}_permuted8", cnn, {**extra, "data.permute_patches": True}),
                 # J3's "more the finer the blocks": 4-px blocks (added after the 8-px results existed).
                 (f"cnn_{model}w{a.cnn_width}_permuted4", cnn,
                  {**extra, "data.permute_patches": True, "data.permutation_patch_size": 4})]
    runs = []
    for seed in range(a.seeds):
        for name, config, overrides in arms:
            runs.append({"name": f"{name},seed={seed}", "config": config, "overrides": {"seed": seed, **overrides}})
    # J4 over permutations: permutation k for seed k; seed 0 is vit_permuted8,seed=0 (permutation 0) itself.
    runs += [{"name": f"vit_permuted8pi,seed={seed}", "config": vit,
              "overrides": {"seed": seed, "data.permute_patches": True, "data.permutation_seed": seed}}
             for seed in range(1, a.seeds)]
    held = {"data.in_memory": True} if a.regime else {}  # decoded once, augmented in the step (data/device_input.py)
    return {"config": vit, "overrides": {"data.root": a.root, "data.num_classes": 100, **held}, "runs": runs}
