"""Benchmark helpers: the analytic ViT FLOPs, topology names, the markdown table, one tiny step of
`benchmarks/train_step.py`, the timm arguments of `benchmarks/peer_small_vit.py` (without torch), and (with libtpu
installed) remat lowering TPU temporaries in an AOT compile."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import common
from tests.conftest import tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_vit_b16_flops_match_hand_calculation():
    # ViT-B/16 at 224 px: n = 196 patches, N = 197 tokens, D = 768, M = 3072, L = 12, 1000 classes.
    arch = dict(width=768, depth=12, mlp_dim=3072, patch_size=16)
    f = common.vit_flops(arch, 224, 1000)
    n, t, d = 196, 197, 768
    block = 12 * t * d * d + 2 * t * t * d  # 1,453,954,560 MACs
    assert f["tokens"] == t and f["block"] == block == 1_453_954_560
    assert f["embed"] == n * 16 * 16 * 3 * d == 115_605_504
    assert f["head"] == 768_000
    assert f["forward"] == 12 * block + 115_605_504 + 768_000 == 17_563_828_224
    # The published "17.6 GFLOPs" of ViT-B/16 / DeiT-B (fvcore) counts multiply-adds: 2 FLOPs each -> 35.1 GFLOP.
    assert round(f["forward"] / 1e9, 1) == 17.6 and f["forward_flops"] == 2 * f["forward"]
    assert f["train"] == 3 * f["forward"] - f["embed"] and f["train_flops"] == 2 * f["train"]


def test_vit_flops_general_mlp_gap_and_representation():
    arch = dict(width=64, depth=2, mlp_dim=96, patch_size=4)  # mlp_dim != 4 * width
    f = common.vit_flops(arch, 16, 10, classifier="gap", representation_size=32)
    t = 16  # no CLS token with GAP
    assert f["block"] == 4 * t * 64 * 64 + 2 * t * t * 64 + 2 * t * 64 * 96
    assert f["head"] == 64 * 32 + 32 * 10
    assert f["forward"] == f["embed"] + 2 * f["block"] + f["head"]


def test_parse_topology():
    v4 = common.parse_topology("v4:2x2x1")
    assert (v4["chips"], v4["devices"], v4["kwargs"]) == (4, 4, {"chip_config_name": "megacore"})
    assert common.parse_topology("v5litepod:4x4")["name"] == "v5e:4x4"
    assert common.parse_topology("v3:2x2")["devices"] == 8  # two TensorCores per chip, one device each
    assert common.parse_topology("v5p:2x2x4")["chips"] == 16
    with pytest.raises(ValueError, match="v4-8"):
        common.parse_topology("v4-8")
    with pytest.raises(ValueError, match="version 'v9'"):
        common.parse_topology("v9:2x2")


def test_render_markdown_table(tmp_path):
    gib = common.GiB
    rec = dict(variant="L/16", topology="v4:2x2x1", chips=4, backend="tpu", mesh={"data": 1, "fsdp": 4},
               per_device_batch=1024, accum_steps=16, remat_policy="nothing_saveable", scan=True, dtype="float32",
               mu_dtype="float32", memory=dict(arguments=gib, temporaries=2 * gib, total=4 * gib), hbm=32 * gib,
               fits=True, compile_s=12.0, command="python benchmarks/memory_plan.py --topology=v4:2x2x1")
    path = tmp_path / "r.jsonl"
    oom = dict(rec, memory=None, fits=False, oom=dict(temporaries=40 * gib, available=30.75 * gib))
    big = dict(rec, memory=dict(arguments=gib, temporaries=40 * gib, total=41 * gib))  # fits is judged again: no
    path.write_text("".join(json.dumps(r) + "\n" for r in (rec, oom, big)))
    lines = common.render(str(path)).splitlines()
    assert len(lines) == 5 and lines[0].startswith("| model |")
    assert "| 1024 (64 × 16) |" in lines[2] and "nothing_saveable + scan" in lines[2]
    assert "4.0 / 32.0 GiB | yes |" in lines[2]
    assert "40.00 GiB (compiler OOM) | > 30.75 GiB available | **no** |" in lines[3]
    assert "41.0 / 32.0 GiB | **no** |" in lines[4]


def test_train_step_script_runs_one_tiny_step(tmp_path):
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    cmd = [sys.executable, "benchmarks/train_step.py", "--config=configs/default.py", "--batch=8", "--steps=1",
           "--warmup=0", f"--out={out}", "--config.model.depth=1"]
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "images/s" in res.stdout and "fraction of peak" in res.stdout and "matmul [136,64]x[64,256]" in res.stdout
    rec = json.loads(out.read_text().splitlines()[-1])
    assert rec["batch"] == 8 and rec["images_per_s"] > 0 and rec["peak"] == "cpu"
    assert rec["analytic"]["tokens"] == 17 and rec["memory"]["total"] > 0


def test_tpu_aot_remat_and_fsdp_temporaries():
    """On the TPU compiler's plan of a small scanned ViT train step: per-block remat (`nothing_saveable`) lowers the
    temporaries, and FSDP over all 8 devices needs no more temporaries than data parallelism at the same per-device
    batch (the activation sharding constraints keep the batch sharded inside the scanned blocks; without them the
    FSDP program gathered activations: 39.4 MiB against 21.0 MiB for data parallelism, libtpu 0.0.42).

    v3:2x2 (8 TensorCores) is the smallest slice libtpu accepts here, and v3 has no large on-chip memory that would
    hold a small model's activations (v4/v5e keep them out of HBM, showing no temporaries either way).
    """
    pytest.importorskip("libtpu", reason="needs libtpu (pip install -r requirements-tpu.txt)")
    topology = common.parse_topology("v3:2x2")
    dp, fsdp = {"mesh.data": -1, "mesh.fsdp": 1}, {"mesh.data": 1, "mesh.fsdp": -1}
    temps = {}
    for name, mesh, policy in (("none", dp, "none"), ("remat", dp, "nothing_saveable"),
                               ("remat_fsdp", fsdp, "nothing_saveable")):
        c = tiny_config(batch_size=128, **mesh, **{"data.image_size": 32, "model.depth": 3, "model.width": 128,
                                                   "model.mlp_dim": 512, "model.remat_policy": policy,
                                                   "model.scan": True})
        result = common.plan(c, topology)
        assert result["devices"] == 8 and result["per_device_batch"] == 16
        temps[name] = result["memory"]["temporaries"]
    # Measured with libtpu 0.0.42 (MiB): none 78.9, remat 21.0 (data parallel), remat + FSDP 17.3.
    assert temps["remat"] < 0.85 * temps["none"], temps
    assert temps["remat_fsdp"] <= 1.05 * temps["remat"], temps


def test_input_pipeline_benchmark_runs_on_a_tiny_folder(tmp_path):
    from benchmarks import input_pipeline
    from tests.conftest import write_image_folder

    root = write_image_folder(tmp_path, splits=("train",), classes=("a", "b"), per_class=4, size=64)
    ips, dtype = input_pipeline.bench_ours(root, "train", 16, 1, batch=8)
    assert ips > 0 and dtype == "uint8"
    ips, dtype = input_pipeline.bench_ours(root, "train", 8, 2, draft=True, randaug=True, batch=8)
    assert ips > 0 and dtype == "uint8"
    ips, dtype = input_pipeline.bench_ours(root, "train", 8, 1, draft=True, batch=8, decoder="simplejpeg")
    assert ips > 0 and dtype == "uint8"


def test_train_step_script_times_a_cnn_with_xlas_flop_count(tmp_path):
    """A CNN has no analytic FLOP count: the script takes XLA's cost analysis of the compiled step instead."""
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    cmd = [sys.executable, "benchmarks/train_step.py", "--config=configs/cifar10_vit.py:model=resnet18", "--batch=4",
           "--steps=1", "--warmup=0", f"--out={out}", "--config.model.width=4"]
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "FLOPs per image (XLA cost analysis; no analytic count for resnet)" in res.stdout
    rec = json.loads(out.read_text().splitlines()[-1])
    # The per-image count is XLA's per-step count over the batch (one device), not an analytic ViT count.
    assert rec["analytic"]["train_flops"] == rec["xla_flops_per_step"] / 4 and "forward" not in rec["analytic"]
    assert rec["matmul_shape"] == [256, 256, 256] and rec["images_per_s"] > 0


def test_peer_benchmark_mirrors_the_three_models_in_timm_arguments_without_torch():
    """`benchmarks/peer_small_vit.py` (torch and timm from requirements-peer.txt, never the tests') resolves its model
    table from the sweep files and configs and maps each to timm's `VisionTransformer` and AdamW arguments in plain
    Python: the sizes the sweeps' docstrings state, and a config it cannot mirror is refused. Run in a subprocess: the
    script defines absl flags of the same names as train_step.py's, and the check that torch stays unimported is
    meaningful only in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "from benchmarks import peer_small_vit as p\n"
        "out = {}\n"
        "for name in p.MODELS:\n"
        "    c = p.model_config(name)\n"
        "    out[name] = dict(kw=p.timm_kwargs(c, c.data.num_classes), opt=p.torch_optim(c), batch=c.batch_size,\n"
        "                     in_memory=c.data.in_memory)\n"
        "c = p.model_config('grid8')\n"
        "c.model.posemb = 'sincos2d'\n"
        "try:\n"
        "    p.timm_kwargs(c, 10)\n"
        "    out['refused'] = ''\n"
        "except ValueError as e:\n"
        "    out['refused'] = str(e)\n"
        "out['imported'] = sorted(m for m in ('torch', 'timm') if m in sys.modules)\n"
        "print(json.dumps(out))\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    res = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    common_kw = dict(class_token=True, global_pool="token", qkv_bias=True, act_layer="gelu_tanh", drop_rate=0.0,
                     pos_drop_rate=0.0, proj_drop_rate=0.0, attn_drop_rate=0.0)
    assert out["grid8"]["kw"] == dict(img_size=32, patch_size=4, embed_dim=64, depth=6, num_heads=4, mlp_ratio=2.0,
                                      num_classes=10, **common_kw)
    assert out["cifar100"]["kw"] == dict(img_size=32, patch_size=8, embed_dim=128, depth=6, num_heads=4,
                                         mlp_ratio=2.0, num_classes=100, **common_kw)
    assert out["b16"]["kw"] == dict(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12,
                                    mlp_ratio=4.0, num_classes=1000, **common_kw)
    assert [out[m]["batch"] for m in ("grid8", "cifar100", "b16")] == [128, 128, 16]
    assert not any(out[m]["in_memory"] for m in ("grid8", "cifar100", "b16"))
    assert out["grid8"]["opt"] == dict(betas=[0.9, 0.999], eps=1e-8, weight_decay=0.05, clip=1.0,
                                       loss="softmax_xent", label_smoothing=0.0)
    assert out["b16"]["opt"]["loss"] == "sigmoid_xent" and out["b16"]["opt"]["weight_decay"] == 0.1
    assert "model.posemb='sincos2d'" in out["refused"]
    assert out["imported"] == []


def test_gpu_paper_scale_script_smoke_runs_on_cpu(tmp_path):
    """`benchmarks/gpu_paper_scale.sh OUT --smoke`: the GPU script's steps at toy size, with no GPU and no data."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as on a user's machine
    out, env = tmp_path / "out", {**env, "RUNS": str(tmp_path / "runs"), "PYTHON": sys.executable}
    bad = subprocess.run(["bash", "benchmarks/gpu_paper_scale.sh", str(out), "--bogus"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "'--bogus' is not --smoke" in bad.stderr
    p = subprocess.run(["bash", "benchmarks/gpu_paper_scale.sh", str(out), "--smoke"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["env.txt", "log.txt", "runs.jsonl", "runs.md", "train_step.jsonl",
                                       "train_step.txt"]
    bench = [json.loads(line) for line in open(out / "train_step.jsonl")]
    assert [(b["config"], b["batch"], b["dtype"]) for b in bench] == [("configs/jelassi_cifar.py", 4, "bfloat16"),
                                                                      ("configs/vit_b16.py", 2, "bfloat16")]
    runs = {r["run"]: r for r in map(json.loads, open(out / "runs.jsonl"))}
    assert sorted(runs) == ["positional,seed=0", "standard,seed=0"]
    assert all(r["finished"] and r["steps"] == r["total_steps"] == 4 and 0 <= r["eval_accuracy"] <= 1
               for r in runs.values())
    assert "positional: 1 finished run(s)" in (out / "runs.md").read_text()


def test_gpu_regime_script_smoke_runs_both_sweeps_on_cpu(tmp_path):
    """`benchmarks/gpu_regime.sh OUT --smoke`: both regime sweeps side by side at toy size (synthetic CIFAR-shaped
    folders, two arms each, 1 seed), their per-run lines, the report over both roots and the runs' archive."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as on a user's machine
    out, env = tmp_path / "out", {**env, "RUNS": str(tmp_path / "runs"), "PYTHON": sys.executable}
    bad = subprocess.run(["bash", "benchmarks/gpu_regime.sh", str(out), "--bogus"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "'--bogus' is not --smoke" in bad.stderr
    p = subprocess.run(["bash", "benchmarks/gpu_regime.sh", str(out), "--smoke"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["aggregate.txt", "env.txt", "log.txt", "report", "runs",
                                       "runs_cifar100_permuted.jsonl", "runs_cifar100_permuted.md",
                                       "runs_cifar10_grid8.jsonl", "runs_cifar10_grid8.md"]
    rows = {sweep: {r["run"]: r for r in map(json.loads, open(out / f"runs_{sweep}.jsonl"))}
            for sweep in ("cifar10_grid8", "cifar100_permuted")}
    assert sorted(rows["cifar10_grid8"]) == ["full,seed=0", "positional,seed=0"]
    assert sorted(rows["cifar100_permuted"]) == ["cnn_resnet18w4_original,seed=0", "vit_original,seed=0"]
    for r in [*rows["cifar10_grid8"].values(), *rows["cifar100_permuted"].values()]:
        assert r["finished"] and r["steps"] == r["total_steps"] and r["images_per_sec"] > 0 and r["wall_s"] > 0
    assert rows["cifar100_permuted"]["cnn_resnet18w4_original,seed=0"]["total_steps"] == 2  # cnn_steps=2
    # The ViT arms went before the CNN arms, and each sweep printed its aggregate rate.
    log = (out / "log.txt").read_text()
    assert log.index("vit_original,seed=0: running") < log.index("cnn_resnet18w4_original,seed=0: running")
    assert len((out / "aggregate.txt").read_text().splitlines()) == 3  # grid-8, then the two CIFAR-100 passes
    # The report read both roots from the archive (small files only) and judged none of these 4-step runs.
    archived = sorted(os.listdir(out / "runs" / "cifar10_grid8" / "full,seed=0"))
    assert "config.json" in archived and "metrics.jsonl" in archived and "checkpoints" not in archived
    csv_rows = (out / "report" / "runs.csv").read_text().splitlines()[1:]
    assert len(csv_rows) == 4 and all(",True,," in row for row in csv_rows)  # all four are smoke runs
