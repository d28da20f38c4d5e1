"""Every config file builds and trains: small ones as they are, large ones through their `runlocal` argument."""

import glob
import importlib.util
import json
import os
import re

import jax
import numpy as np
import pytest

from tests.conftest import apply_overrides, write_image_folder
from vit_jax_struct.data import permute
from vit_jax_struct.models import get_model, official
from vit_jax_struct.train import metrics, optim, trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILES = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "configs", "**", "*.py"),
                                                                  recursive=True)
                      if not os.path.basename(p).startswith(("_", "common")) and "/sweeps/" not in p)
# Theory configs are run (shrunk) in tests/theory/test_theory_configs.py.
# How each config file is exercised here: (argument, needs an image folder of this size, extra overrides).
RUNS = {
    "configs/default.py": (None, None, {"total_steps": 2, "eval_every_steps": 0, "optim.warmup_steps": 1,
                                        "data.eval_examples": 64}),
    "configs/cifar10_vit.py": ("runlocal", 32, {}),
    # Jelassi et al.'s CIFAR ViT (7 x 384, patch 4) at two steps on the digits held in memory, input on the device.
    "configs/jelassi_cifar.py": ("runlocal", None, {}),
    # 224-px recipes at two blocks, on scikit-learn's two sample photos (`runlocal` needs no data folder): every key
    # of the recipe is exercised at a fraction of the compile time; the full-depth `:runlocal` runs (2 steps of
    # ViT-L/16 and ViT-H/14) are measured outside the suite (README).
    "configs/vit_ti16.py": ("runlocal", None, {"model.depth": 2}),
    "configs/vit_s16.py": ("runlocal", None, {"model.depth": 2}),
    "configs/vit_b16.py": ("runlocal", None, {"model.depth": 2}),
    "configs/vit_l16.py": ("runlocal", None, {"total_steps": 1, "model.depth": 2}),
    "configs/vit_h14.py": ("runlocal", None, {"total_steps": 1, "model.depth": 2}),
    # BiT ResNet-v2 at one unit per stage and 64 px (the published R50x1 / R152x2 sizes: test_published_reference).
    "configs/bit.py": ("r50x1,runlocal", 64, {"total_steps": 1, "model.units": (1, 1, 1, 1), "model.width": 32,
                                              "data.image_size": 64}),
    # Fine-tuning from a random .npz in the published layout (written by the test, 224 px -> the recipe's 384 px).
    "configs/vit_b16_finetune.py": ("runlocal", None, {"total_steps": 1, "model.depth": 2}),
}
THEORY = {"configs/theory/population.py", "configs/theory/no_structure.py", "configs/theory/empirical.py",
          "configs/theory/transfer.py"}


def load(path, arg=None):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def random_official_npz(c, path, image_size=224, classes=21):
    """A random `.npz` in the original ViT layout for `c.model` pretrained at `image_size` px, with a pre_logits
    layer and a `classes`-way head like the ImageNet-21k releases; written without compiling anything."""
    model = get_model({**c.model, "representation_size": 8}, classes)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, image_size, image_size, 3))))
    rng = np.random.default_rng(0)
    return official.save_npz(path, jax.tree.map(lambda s: 0.02 * rng.standard_normal(s.shape, np.float32),
                                                shapes["params"]))


def test_every_config_file_is_exercised():
    assert set(CONFIG_FILES) == set(RUNS) | THEORY, "add the new config to RUNS (or THEORY) so it is run here"


@pytest.mark.parametrize("path", sorted(RUNS))
def test_config_builds_and_trains(path, tmp_path):
    arg, folder_size, overrides = RUNS[path]
    c = load(path, arg)
    if folder_size:
        root = write_image_folder(tmp_path / "data", splits=("train", "test"), classes=("a", "b"), per_class=2,
                                  size=folder_size)
        c.data.root = root
        c.data.num_classes = 0
    c.tensorboard = False
    apply_overrides(c, overrides)
    if c.init_from.endswith(".npz"):  # fine-tuning recipes: a random i21k-style checkpoint instead of the download
        c.init_from = random_official_npz(c, str(tmp_path / "pretrained.npz"))
    state, last = trainer.train_and_evaluate(c, str(tmp_path / "run"))
    assert int(state["step"]) == c.total_steps
    if arg == "runlocal" and path.startswith("configs/vit_"):  # offline smoke runs write no checkpoint
        assert c.data.source == "sample_photos" and not (tmp_path / "run" / "checkpoints").exists()
    losses = [r["train/loss"] for r in metrics.read_metrics(str(tmp_path / "run")) if "train/loss" in r]
    assert losses and np.isfinite(losses).all()
    assert 0.0 <= last["eval/accuracy"] <= 1.0


def test_augreg_variants_set_their_levels_and_train(tmp_path):
    """Every `aug=` level of the recipes sets AugReg's values; `vit_b16.py:aug=medium2` trains (with CutMix too)."""
    from configs import common

    for path in ("configs/vit_ti16.py", "configs/vit_s16.py", "configs/vit_b16.py", "configs/vit_l16.py",
                 "configs/vit_h14.py"):
        for level, (alpha, layers, magnitude) in common.AUG_LEVELS.items():
            c = load(path, f"aug={level}")
            assert (c.mixup.alpha, c.pp.randaug_layers, c.pp.randaug_magnitude) == (alpha, layers, magnitude)
    assert load("configs/vit_b16.py").mixup.alpha == 0.0  # default: inception crop + flip only
    with pytest.raises(ValueError, match=r"aug='medium3' is not one of"):
        load("configs/vit_b16.py", "aug=medium3")
    c = load("configs/vit_b16.py", "runlocal,aug=medium2")
    assert (c.mixup.alpha, c.pp.randaug_layers, c.pp.randaug_magnitude) == (0.5, 2, 15)
    c.data.root = os.path.join(write_image_folder(tmp_path / "data", splits=("train",), classes=("a", "b"),
                                                  per_class=2, size=224), "train")
    c.tensorboard = False
    apply_overrides(c, {"model.depth": 1, "total_steps": 1, "mixup.cutmix_alpha": 1.0})
    state, last = trainer.train_and_evaluate(c, str(tmp_path / "run"))
    assert int(state["step"]) == 1 and np.isfinite(last["train/loss"])


@pytest.mark.parametrize("arg", ["model=resnet18,runlocal", "model=vgg19,runlocal"])
def test_cifar_cnn_baselines_train_on_permuted_patches(arg, tmp_path):
    c = load("configs/cifar10_vit.py", arg)
    c.data.root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=4, size=32)
    c.data.num_classes, c.tensorboard, c.data.permute_patches = 0, False, True
    state, _ = trainer.train_and_evaluate(c, str(tmp_path / "run"))
    assert int(state["step"]) == 2 and "batch_stats" in state["model_state"]
    rec = permute.load_permutation(str(tmp_path / "run"))
    assert rec["patch_size"] == 8 and sorted(rec["perm"].tolist()) == list(range(16))


def test_sweep_expands_and_every_run_builds(tmp_path):
    from launch import sweep

    root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=2, size=32)
    arg = f":steps=8,data_steps=8,root={root}"
    sw = sweep.load_sweep(os.path.join(ROOT, "configs/sweeps/cifar_ablations.py") + arg)
    cmds = sweep.commands(sw, str(tmp_path / "runs"))
    # 4 (2 seeds x permute) + skip + GAP + positional + 8 CNN (ResNet-18, VGG-19 x permute x 2 seeds) + 2 seeds of
    # the 5 long arms (3 data sizes, GAP, positional), each in its own workdir.
    assert len(cmds) == len(sw["runs"]) == 25 and len({w for _, w, _ in cmds}) == 25
    for run in sw["runs"]:
        path, _, arg = run["config"].partition(":")
        c = load(path, arg)
        apply_overrides(c, {**sw["overrides"], **run["overrides"]})
        c.data.num_classes = 0
        parts = trainer.build(c)
        assert parts["total_steps"] == (8 if c.model.name == "vit" else 500)
        assert bool(c.fewshot.every_steps) == ("steps=8,fewshot" in run["config"])
    assert any("--config.model.attention=positional" in cmd for _, _, cmd in cmds)
    for example in re.findall(r"--sweep=(configs/sweeps/\S+\.py(?::\S+)?)", sweep.__doc__):  # the docstring's
        sweep.load_sweep(os.path.join(ROOT, example))
    assert sum("--config.model.width=16" in cmd and "model=vgg19" in cmd[2] for _, _, cmd in cmds) == 4


def test_cifar100_sweep_arms_build_with_the_positive_control_and_seed_major_order(tmp_path):
    from launch import sweep

    root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=2, size=32)
    sw = sweep.load_sweep(os.path.join(ROOT, "configs/sweeps/cifar100_permuted.py") + f":steps=8,cnn_steps=8,root={root}")
    names = [r["name"] for r in sw["runs"]]
    assert len(names) == 3 * 13 + 2 and names[0] == "vit_original,seed=0" and names[13] == "vit_original,seed=1"
    assert next(r for r in sw["runs"] if r["name"] == "vit_reg4,seed=1")["overrides"] == {
        "seed": 1, "model.num_registers": 4}
    control = next(r for r in sw["runs"] if r["name"] == "vit_permuted4,seed=2")
    assert control["overrides"] == {"seed": 2, "data.permute_patches": True, "data.permutation_patch_size": 4}
    # J3's finer blocks: each CNN at 4-px blocks as well as at its 8-px ones (the default grain)
    fine = next(r for r in sw["runs"] if r["name"] == "cnn_vgg19w16_permuted4,seed=1")
    assert fine["overrides"] == {"seed": 1, "model.width": 16, "data.permute_patches": True,
                                 "data.permutation_patch_size": 4}
    # J4 over permutations: permutation k for seed k, seeds 1-2 only (seed 0 is vit_permuted8,seed=0 itself).
    assert {r["name"]: r["overrides"]["data.permutation_seed"] for r in sw["runs"][-2:]} == {
        "vit_permuted8pi,seed=1": 1, "vit_permuted8pi,seed=2": 2}
    for run in sw["runs"][:13]:
        path, _, arg = run["config"].partition(":")
        c = load(path, arg)
        apply_overrides(c, {**sw["overrides"], **run["overrides"]})
        c.data.num_classes = 0
        assert trainer.build(c)["total_steps"] == 8
    with pytest.raises(ValueError, match="seeds=4 must be 1 … 3"):
        sweep.load_sweep(os.path.join(ROOT, "configs/sweeps/cifar100_permuted.py") + ":seeds=4")


def test_grid8_sweep_arms_build_an_8x8_patch_grid_in_memory_in_seed_major_order(tmp_path):
    from launch import sweep

    root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=5, size=32)
    sw = sweep.load_sweep(os.path.join(ROOT, "configs/sweeps/cifar10_grid8.py") + f":steps=8,root={root}")
    names = [r["name"] for r in sw["runs"]]
    assert len(names) == 15 and names[:6] == ["full,seed=0", "frac0.1,seed=0", "frac0.3,seed=0", "gap,seed=0",
                                              "positional,seed=0", "full,seed=1"]
    sizes = {}
    for run in sw["runs"][:5]:
        path, _, arg = run["config"].partition(":")
        c = load(path, arg)
        apply_overrides(c, {**sw["overrides"], **run["overrides"]})
        c.data.num_classes = 0
        parts = trainer.build(c)
        assert parts["total_steps"] == 8 and c.fewshot.every_steps == 2 and c.data.in_memory
        assert parts["model"].arch()["patch_size"] == 4 and parts["train_source"].images.shape[1:] == (32, 32, 3)
        sizes[run["name"]] = len(parts["train_source"])
    assert sizes == {"full,seed=0": 10, "frac0.1,seed=0": 1, "frac0.3,seed=0": 3, "gap,seed=0": 10,
                     "positional,seed=0": 10}
    with pytest.raises(ValueError, match="seeds=4 must be 1 … 3"):
        sweep.load_sweep(os.path.join(ROOT, "configs/sweeps/cifar10_grid8.py") + ":seeds=4")


def test_sweep_runs_jobs_in_parallel_and_skips_finished_runs(tmp_path, capsys):
    from launch import sweep

    spec = tmp_path / "tiny_sweep.py"
    spec.write_text(
        "def get_sweep(arg=None):\n"
        "    return {'config': 'configs/default.py', 'overrides': {'total_steps': 2, 'optim.warmup_steps': 1,\n"
        "            'eval_every_steps': 2, 'checkpoint_every_steps': 2, 'tensorboard': False},\n"
        "            'runs': [{'name': f'seed={s}', 'overrides': {'seed': s}} for s in (0, 1)]}\n")
    args = [f"--sweep={spec}", f"--root={tmp_path / 'runs'}", "--run", "--jobs=2"]
    assert sweep.main(args) == 0
    for s in (0, 1):
        with open(tmp_path / "runs" / f"seed={s}" / "final_metrics.json") as f:
            assert json.load(f)["step"] == 2
        log = (tmp_path / "runs" / f"seed={s}" / "log.txt").read_text()  # the run's own log, once
        assert log.count("step 2/2: loss") == 1 and log.count("] done: step 2; ") == 1
        assert "Traceback" not in (tmp_path / "runs" / f"seed={s}" / "console.txt").read_text()
    capsys.readouterr()
    assert sweep.main(args) == 0
    assert capsys.readouterr().out.count("done, skipped") == 2
    with pytest.raises(SystemExit):
        sweep.main([*args[:2], "--run", "--jobs=0"])
    with pytest.raises(SystemExit):  # a typo in --only is an error, not an empty success
        sweep.main([*args, "--only=sede"])
    assert "no run of the sweep matches --only 'sede'" in capsys.readouterr().err


def test_cifar_config_trains_from_tfds(tmp_path):
    import tensorflow_datasets as tfds

    c = load("configs/cifar10_vit.py", "tfds=cifar100,runlocal")
    assert (c.data.source, c.data.name, c.data.num_classes) == ("tfds", "cifar100", 100)
    c.tensorboard = False
    with tfds.testing.mock_data(num_examples=16, policy=tfds.testing.MockPolicy.USE_CODE):
        state, last = trainer.train_and_evaluate(c, str(tmp_path))
    assert int(state["step"]) == 2 and 0.0 <= last["eval/accuracy"] <= 1.0


@pytest.mark.parametrize("path,millions", [("configs/vit_l16.py", 304.33), ("configs/vit_h14.py", 632.05),
                                           ("configs/vit_b16.py", 86.57)])
def test_full_scale_configs_report_paper_sizes(path, millions):
    c = load(path)
    assert c.batch_size == 4096 and c.loss == "sigmoid_xent" and c.model.head_bias_init == -10.0
    assert c.optim.warmup_steps == 10_000 and c.optim.lr == 1e-3
    model = get_model(c.model, c.data.num_classes)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, 224, 224, 3), np.float32)))
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    assert n / 1e6 == pytest.approx(millions, rel=1e-3)


def test_large_configs_use_dropout_and_fsdp():
    for path in ("configs/vit_l16.py", "configs/vit_h14.py"):
        c = load(path)
        assert c.model.dropout == 0.1 and dict(c.mesh) == {"data": 1, "fsdp": -1}
    assert load("configs/vit_b16.py").model.dropout == 0.0
    with pytest.raises(ValueError, match=r"config argument 'runlcoal' is not one of"):
        load("configs/vit_l16.py", "runlcoal")
    assert load("configs/vit_l16.py", "data=i21k").data.num_classes == 21843


def test_finetune_recipe_is_the_vit_papers():
    c = load("configs/vit_b16_finetune.py")
    assert c.init_from == "gs://vit_models/imagenet21k/ViT-B_16.npz" and c.init_reinit == r"^(head|pre_logits)/"
    assert (c.optim.name, c.optim.momentum, c.optim.weight_decay, c.optim.grad_clip_norm) == ("sgd", 0.9, 0.0, 1.0)
    assert (c.batch_size, c.total_steps, c.data.image_size, c.loss, c.optim.schedule) == (
        512, 20_000, 384, "softmax_xent", "cosine")
    assert load("configs/vit_b16_finetune.py", "data=cifar10,ckpt=/x/B_16.npz").init_from == "/x/B_16.npz"
    with pytest.raises(ValueError, match=r"data='svhn' is not one of"):
        load("configs/vit_b16_finetune.py", "data=svhn")
    # SGD with heavy-ball momentum 0.9 (clipping off, constant lr 0.1): updates -0.1 g, then -0.1 (0.9 g + g).
    cfg = c.optim.copy_and_resolve_references()
    cfg.update(lr=0.1, warmup_steps=0, schedule="constant", grad_clip_norm=0.0)
    tx, _ = optim.make_optimizer(cfg, 10)
    p, g = {"w": np.ones(2, np.float32)}, {"w": np.full(2, 0.5, np.float32)}
    u1, s1 = tx.update(g, tx.init(p), p)
    u2, _ = tx.update(g, s1, p)
    np.testing.assert_allclose(u1["w"], -0.05, rtol=1e-6)
    np.testing.assert_allclose(u2["w"], -0.095, rtol=1e-6)
    cfg.name = "lamb"
    with pytest.raises(ValueError, match=r"optim.name 'lamb' is not one of"):
        optim.make_optimizer(cfg, 10)


def test_sweep_set_overrides_every_run_for_a_smoke_sweep(tmp_path, capsys):
    from launch import sweep
    from vit_jax_struct.train import validate

    sets = ["total_steps=20", "eval_every_steps=10", "data.eval_examples=256", "optim.warmup_steps=2"]
    sw = sweep.load_sweep(os.path.join(ROOT, "configs/sweeps/cifar_ablations.py"))
    cmds = sweep.commands(sw, str(tmp_path), sets=sweep.parse_sets(sets))
    assert len(cmds) == 25
    for (_, _, argv), run in zip(cmds, sw["runs"], strict=True):
        flags = [a for a in argv if a.startswith("--config.")]
        for s in sets:  # once each, winning over the run's own (ResNet arms set eval_every_steps, data.eval_examples)
            key = s.split("=")[0]
            assert [f for f in flags if f.startswith(f"--config.{key}=")] == [f"--config.{s}"]
        path, _, arg = run["config"].partition(":")
        c = load(path, arg)
        apply_overrides(c, {**sw["overrides"], **run["overrides"], "total_steps": 20, "eval_every_steps": 10,
                            "data.eval_examples": 256, "optim.warmup_steps": 2})
        validate.validate(c)
    assert sweep.main([f"--sweep={ROOT}/configs/sweeps/cifar_ablations.py", f"--root={tmp_path}", "--only=gap,seed=0",
                       *[f"--set={s}" for s in sets]]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "--config.total_steps=20" in printed[0] and "classifier=gap" in printed[0]
    # --only repeated: the runs matching any of the substrings (a treatment arm with its baseline arm).
    assert sweep.main([f"--sweep={ROOT}/configs/sweeps/cifar10_grid8.py", f"--root={tmp_path}", "--only=full",
                       "--only=frac0.1"]) == 0
    names = [line.split("--workdir=")[1].split()[0].rsplit("/", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert sorted(names) == sorted(f"{arm},seed={s}" for arm in ("full", "frac0.1") for s in range(3))
    with pytest.raises(ValueError, match="key=value"):
        sweep.parse_sets(["total_steps"])


@pytest.mark.parametrize("arg", ["model=vgg19", "model=resnet18"])
def test_cnn_width_is_validated(arg):
    from vit_jax_struct.train import validate

    c = load("configs/cifar10_vit.py", arg)
    c.model.width = 0
    with pytest.raises(validate.ConfigError, match=r"config.model.width 0 must be ≥ 1"):
        validate.validate(c)
    c.model.width = 7  # any positive width builds (VGG-19 layers scale by width / 64)
    validate.validate(c)


def test_a_config_without_arguments_refuses_one():
    assert load("configs/default.py").total_steps == 1200
    with pytest.raises(ValueError, match="configs/default.py takes none"):
        load("configs/default.py", "foo")


def test_jelassi_cifar_is_the_papers_schedule():
    """300 epochs of batch 128 (391 steps per CIFAR epoch, 573 per SVHN epoch), 5 warmup epochs, data on the device."""
    c = load("configs/jelassi_cifar.py")
    assert (c.total_steps, c.optim.warmup_steps, c.batch_size) == (300 * 391, 5 * 391, 128)
    assert (c.model.depth, c.model.width, c.model.num_heads, c.model.mlp_dim, c.model.variant) == \
        (7, 384, 12, 384, "Ti/4")
    assert c.data.in_memory and c.data.device_augment and c.data.root == "data/cifar10"
    svhn = load("configs/jelassi_cifar.py", "dataset=svhn,epochs=2")
    assert (svhn.total_steps, svhn.data.num_classes, svhn.pp.flip) == (2 * 573, 10, False)
    assert load("configs/jelassi_cifar.py", "dataset=cifar100").data.num_classes == 100
    with pytest.raises(ValueError, match=r"dataset='mnist' is not one of"):
        load("configs/jelassi_cifar.py", "dataset=mnist")
