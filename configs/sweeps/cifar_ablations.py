"""Small-scale CIFAR-10 ablations of the catalog rows J1-J3, R3, R5, R2/R7 (issue: paper ablations as knobs).

    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/cifar_ablations --run \\
        --only=""   # add --only=<substring> to run a part
    python -m vit_jax_struct.experiments.report --runs=runs/cifar_ablations       # -> runs/cifar_ablations/report/
    # Smoke sweep (all 25 arms, 20 steps, 256 eval images; 4.3 min on 2 CPU cores): sweep-level --set overrides.
    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/smoke --run --jobs=2 \
        --set=total_steps=20 --set=eval_every_steps=10 --set=data.eval_examples=256 --set=optim.warmup_steps=2 \
        --set=fewshot.train_examples=300 --set=fewshot.holdout_examples=100 --set=fewshot.test_examples=256

Every ViT arm is `configs/cifar10_vit.py` (width 128, depth 6, 8-px patches). Short budget (`steps`, default
500 = 1.3 epochs, ≈ 1.5 min each on 2 CPU cores): baseline and permuted patches (2 seeds), positional attention and
GAP classifier (`seeds` seeds, default 1), skip removal in the middle block (block 3 of 6, both residuals). Long
budget (`data_steps`, default 4000 = 10 epochs, `long_seeds` seeds, default 2, with the few-shot evaluator):
train_fraction 0.1 / 0.3 / 1.0, GAP classifier, positional attention. CNN arms (J3): thin ResNet-18 and VGG-19
(16 channels in the first stage), original vs permuted patches, 2 seeds, `cnn_steps` (default 500).
Arguments: `steps=N`, `cnn_steps=N`, `cnn_width=N`, `seeds=N`, `data_steps=N`, `long_seeds=N`, `root=PATH`
(the CIFAR-10 image folder, default data/cifar10, written by `python -m vit_jax_struct.data.prepare --cifar=…`). `--jobs=2` runs two at a time (≈ 1.35× the throughput of
one on 2 cores).
"""

from configs import common
from launch.sweep import grid


def get_sweep(arg=None):
    a = common.parse_arg(arg, steps=500, cnn_steps=500, cnn_width=16, seeds=1, data_steps=4000, long_seeds=2,
                         root="data/cifar10")
    vit = f"configs/cifar10_vit.py:steps={a.steps}"
    runs = grid(**{"seed": [0, 1], "data.permute_patches": [False, True]})
    for run in runs:
        run["config"] = vit
    # XLA's CPU convolutions are slow (a full-width ResNet-18 step of batch 128 takes > 7 s here): on CPU the arms use
    # thin CNNs (`cnn_width`, default 16 channels in the first stage; 64 is the standard network) and evaluate once,
    # at the end, on 5,000 evenly spread test images. Two seeds of each (J3: the permutation's cost vs seed noise).
    cnns = []
    for model in ("resnet18", "vgg19"):
        for seed in (0, 1):
            for perm in (False, True):
                cnns.append({"name": f"model={model}w{a.cnn_width},permute_patches={perm},seed={seed}",
                             "config": f"configs/cifar10_vit.py:model={model},steps={a.cnn_steps}",
                             "overrides": {"seed": seed, "data.permute_patches": perm,
                                           "eval_every_steps": a.cnn_steps, "data.eval_examples": 5000,
                                           "model.width": a.cnn_width}})
    single = [{"name": "skip_ablation=3both,seed=0", "overrides": {"seed": 0, "model.skip_ablation": "3:both"}}]
    for seed in range(a.seeds):
        single.append({"name": f"classifier=gap,seed={seed}", "overrides": {"seed": seed, "model.classifier": "gap"}})
        single.append({"name": f"attention=positional,seed={seed}",
                       "overrides": {"seed": seed, "model.attention": "positional"}})
    for run in single:
        run["config"] = vit
    # The longer budget `data_steps` (default 4000 = 10 epochs of the full set, where the full-data model is near its
    # plateau; ≈ 9 min each on 2 CPU cores) for the rows whose effect needs a trained model: the data-size arms
    # (R2/R6/R7; at `steps` = 1.3 epochs every arm is far from fitting its data, so the subsets barely differ:
    # measured 0.362 / 0.366 / 0.366 at 10 / 30 / 100 %, and 0.4605 / 0.4608 / 0.4655 at 1500 steps), GAP vs CLS
    # (R5: at 500 steps every head is still near-uniform) and positional attention (J1). These runs evaluate the
    # few-shot probes too (`fewshot`: 1/5/10/25-shot on CIFAR-10 and on the digits, R6's downstream task).
    # `train_fraction=1.0` is every long comparison's baseline (CLS token, standard attention, all data).
    long_cfg = f"configs/cifar10_vit.py:steps={a.data_steps},fewshot"
    long_runs = {seed: [] for seed in range(a.long_seeds)}
    for seed in range(a.long_seeds):
        for frac in (1.0, 0.1, 0.3):
            long_runs[seed].append({"name": f"train_fraction={frac},steps={a.data_steps},seed={seed}",
                                    "overrides": {"seed": seed, "data.train_fraction": 0.0 if frac == 1.0 else frac}})
        long_runs[seed].append({"name": f"classifier=gap,steps={a.data_steps},seed={seed}",
                                "overrides": {"seed": seed, "model.classifier": "gap"}})
        long_runs[seed].append({"name": f"attention=positional,steps={a.data_steps},seed={seed}",
                                "overrides": {"seed": seed, "model.attention": "positional"}})
        for run in long_runs[seed]:
            run["config"] = long_cfg
    # Order: the first seed of the long arms (what the analyses need), the CNNs and short arms, then further seeds.
    ordered = long_runs[0] + cnns + runs + single
    for seed in range(1, a.long_seeds):
        ordered += long_runs[seed]
    return {"config": vit, "overrides": {"data.root": a.root}, "runs": ordered}
