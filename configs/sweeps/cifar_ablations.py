"""Small-scale CIFAR-10 ablations of the catalog rows J1-J3, R3, R5, R2/R7 (issue: paper ablations as knobs).

    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=runs/cifar_ablations --run \\
        --only=""   # add --only=<substring> to run a part
    python -m vit_jax_struct.report --runs=runs/cifar_ablations --out=docs/results
    # Smoke sweep (every arm, 20 steps, 256 eval images; minutes on 2 CPU cores): sweep-level --set overrides.
    python launch/sweep.py --sweep=configs/sweeps/cifar_ablations.py --root=/tmp/smoke --run --set=total_steps=20 \
        --set=eval_every_steps=10 --set=data.eval_examples=256 --set=optim.warmup_steps=2

Every ViT arm is `configs/cifar10_vit.py` (width 128, depth 6, 8-px patches) with the same step budget
(`steps`, default 500 = 1.3 epochs, ≈ 4 min each on 2 CPU cores). ResNet-18 arms: a thin ResNet-18 (16 channels in
the first stage), 200 steps. Arms: baseline and permuted patches (2 seeds: the effect to show is small); positional
attention and GAP classifier (`seeds` seeds, default 1); skip removal in the middle block (block 3 of 6, both
residuals); train_fraction 0.1 / 0.3 / 1.0 (steps fixed at `data_steps`); ResNet-18 original vs permuted.
Arguments: `steps=N` (ViT budget), `cnn_steps=N`, `cnn_width=N`, `seeds=N` (positional/GAP arms), `data_steps=N`
(the data-size arms' budget), `root=PATH`
(the CIFAR-10 image folder, default /tmp/data/cifar10).
"""

from configs import common
from launch.sweep import grid


def get_sweep(arg=None):
    a = common.parse_arg(arg, steps=500, cnn_steps=200, cnn_width=16, seeds=1, data_steps=4000,
                         root="/tmp/data/cifar10")
    vit = f"configs/cifar10_vit.py:steps={a.steps}"
    runs = grid(**{"seed": [0, 1], "data.permute_patches": [False, True]})
    for run in runs:
        run["config"] = vit
    cnn = f"configs/cifar10_vit.py:model=resnet18,steps={a.cnn_steps}"
    # XLA's CPU convolutions are slow (a full-width ResNet-18 step of batch 128 takes > 7 s here): on CPU the arms use
    # a thin ResNet-18 (`cnn_width`, default 16 channels in the first stage; 64 is the standard network) and
    # evaluate once, at the end, on 5,000 evenly spread test images.
    resnet = [{"name": f"model=resnet18w{a.cnn_width},permute_patches={perm},seed=0", "config": cnn,
               "overrides": {"seed": 0, "data.permute_patches": perm, "eval_every_steps": a.cnn_steps,
                             "data.eval_examples": 5000, "model.width": a.cnn_width}} for perm in (False, True)]
    single = [{"name": "skip_ablation=3both,seed=0", "overrides": {"seed": 0, "model.skip_ablation": "3:both"}}]
    for seed in range(a.seeds):
        single.append({"name": f"classifier=gap,seed={seed}", "overrides": {"seed": seed, "model.classifier": "gap"}})
        single.append({"name": f"attention=positional,seed={seed}",
                       "overrides": {"seed": seed, "model.attention": "positional"}})
    for run in single:
        run["config"] = vit
    # Data size (R2/R6/R7): at `steps` (1.3 epochs of the full set) every arm is far from fitting its data, so the
    # subsets barely differ (measured: 0.362 / 0.366 / 0.366 at 10 / 30 / 100 %), nor at 1500 steps (0.4605 /
    # 0.4608 / 0.4655); the data-size arms therefore get their own, longer budget `data_steps` (default 4000 = 10
    # epochs of the full set, 100 of the 10 % subset, which it then overfits; ≈ 20 min each on 2 CPU cores).
    for frac in (0.1, 0.3, 1.0):
        name = f"train_fraction={frac},steps={a.data_steps},seed=0"
        single.append({"name": name, "config": f"configs/cifar10_vit.py:steps={a.data_steps}",
                       "overrides": {"seed": 0, "data.train_fraction": 0.0 if frac == 1.0 else frac}})
    # Order: what the analyses need first (ResNet-18, skip removal, GAP), then the remaining arms.
    runs += [single[0], single[1], *resnet, *single[2:]]
    return {"config": vit, "overrides": {"data.root": a.root}, "runs": runs}
