"""launch/sweep.py's local runner: concurrent runs pinned to disjoint shares of the CPU cores."""

import os
import sys

from launch import sweep


def test_core_slots_split_the_cores_into_disjoint_contiguous_shares():
    assert sweep.core_slots(2, [0, 1]) == [{0}, {1}]
    assert sweep.core_slots(3, range(8)) == [{0, 1, 2}, {3, 4, 5}, {6, 7}]
    assert sweep.core_slots(1, [0, 1]) is None  # one run at a time: all cores
    assert sweep.core_slots(4, [0, 1]) is None  # more runs than cores: no pinning


def test_a_run_given_cores_runs_on_exactly_them(tmp_path):
    core = min(os.sched_getaffinity(0))
    cmd = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    assert sweep.run_one("probe", str(tmp_path / "probe"), cmd, cores={core}) == 0
    assert (tmp_path / "probe" / "console.txt").read_text().strip() == f"[{core}]"
    assert sweep.run_one("all", str(tmp_path / "all"), cmd) == 0
    assert (tmp_path / "all" / "console.txt").read_text().strip() == str(sorted(os.sched_getaffinity(0)))


import subprocess  # noqa: E402
import textwrap  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# tests/conftest.py::tiny_config as overrides of configs/default.py (one device, seconds per run)
TINY = {"total_steps": 4, "batch_size": 16, "log_every_steps": 1, "eval_every_steps": 0, "checkpoint_every_steps": 0,
        "data.image_size": 8, "data.eval_examples": 32, "model.variant": "mu/4", "model.width": 32,
        "model.depth": 1, "model.mlp_dim": 64, "model.num_heads": 2, "pp.pad": 1, "optim.warmup_steps": 1,
        "mesh.data": 1, "tensorboard": False}


def _sweep_file(tmp_path, runs):
    path = tmp_path / "sweep_def.py"
    path.write_text(textwrap.dedent(f"""
        def get_sweep(arg=None):
            return {{"config": "configs/default.py", "overrides": {TINY!r}, "runs": {runs!r}}}
    """))
    return str(path)


def _sweep(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": ""}
    return subprocess.run([sys.executable, "launch/sweep.py", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600, check=False)


def test_total_steps_set_on_the_command_line_shows_in_the_run_names():
    sets = {"total_steps": "20"}
    assert sweep.run_name("train_fraction=0.1,steps=4000,seed=0", sets) == "train_fraction=0.1,steps=20,seed=0"
    assert sweep.run_name("classifier=gap,seed=1", sets) == "classifier=gap,seed=1,steps=20"
    assert sweep.run_name("classifier=gap,seed=1", {"eval_every_steps": "10"}) == "classifier=gap,seed=1"
    names = [n for n, _, _ in sweep.commands(sweep.load_sweep("configs/sweeps/cifar_ablations.py"), "/r", sets=sets)]
    assert len(names) == 25 and all("steps=20" in n and "steps=4000" not in n for n in names)


def test_a_missing_data_root_stops_the_sweep_before_any_run_naming_the_folder_and_the_prepare_command(tmp_path):
    r = _sweep(f"--sweep=configs/sweeps/cifar_ablations.py:root={tmp_path}/cifar10", f"--root={tmp_path}/runs",
               "--run", "--set=total_steps=20")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: data.root {tmp_path}/cifar10 does not exist (25 of the sweep's runs read "
                               "it); make it with: python -m vit_jax_struct.data.prepare "
                               f"--cifar=PATH/cifar-10-python.tar.gz --out={tmp_path}/cifar10"), lines[0]
    assert not (tmp_path / "runs").exists() and r.stdout == ""


def test_a_run_exiting_2_stops_the_sweep_with_its_error_line_and_one_exiting_1_does_not(tmp_path):
    bad = {"name": "bad_config", "overrides": {"model.classifier": "bogus"}}
    nan = {"name": "nan", "overrides": {"optim.lr": 1e30, "optim.warmup_steps": 0, "optim.grad_clip_norm": 0.0}}
    ok = {"name": "ok", "overrides": {}}
    r = _sweep(f"--sweep={_sweep_file(tmp_path, [bad, nan, ok])}", f"--root={tmp_path}/a", "--run")
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip().splitlines()
    assert err[0].startswith("[sweep] bad_config: error: ") and "bogus" in err[0], err
    assert err[-1].startswith("error: a run exited 2") and "2 run(s) not started" in err[-1], err
    assert not (tmp_path / "a" / "nan").exists() and not (tmp_path / "a" / "ok").exists()
    r = _sweep(f"--sweep={_sweep_file(tmp_path, [nan, ok])}", f"--root={tmp_path}/b", "--run")
    assert r.returncode == 1, r.stderr
    err = r.stderr.strip().splitlines()
    assert err[0].startswith("[sweep] nan: error: FloatingPointError: the train loss became NaN or inf"), err
    assert err[-1] == "[sweep] failed runs: ['nan']"
    assert (tmp_path / "b" / "ok" / "final_metrics.json").exists()  # the sweep went on


def test_concurrent_runs_on_gpus_get_a_gpu_each_round_robin_and_their_share_of_its_memory(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert sweep.slot_envs(3, 0) == [{}, {}, {}]  # CPU: nothing set (cores are pinned instead)
    assert sweep.slot_envs(1, 1) == [{}]  # one run: the whole GPU
    one = sweep.slot_envs(4, 1)
    assert one == [{"CUDA_VISIBLE_DEVICES": "0", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.225"}] * 4
    two = sweep.slot_envs(3, 2)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in two] == ["0", "1", "0"]
    assert [e["XLA_PYTHON_CLIENT_MEM_FRACTION"] for e in two] == ["0.450", "0.900", "0.450"]
    cmd = [sys.executable, "-c", "import os; print(os.environ['XLA_PYTHON_CLIENT_MEM_FRACTION'])"]
    assert sweep.run_one("probe", str(tmp_path / "probe"), cmd, env=one[0]) == 0
    assert (tmp_path / "probe" / "console.txt").read_text().strip() == "0.225"


def test_the_aggregate_line_counts_the_images_of_the_runs_finished_in_this_invocation(tmp_path):
    import json
    import time

    started = time.time()
    runs = []
    for name, step, batch, rate in (("a", 100, 128, 400.0), ("b", 50, 64, 250.0)):
        wd = tmp_path / name
        wd.mkdir()
        (wd / "config.json").write_text(json.dumps({"batch_size": batch}))
        (wd / "final_metrics.json").write_text(json.dumps({"step": step, "train/images_per_sec": rate}))
        runs.append(str(wd))
    old = tmp_path / "old"  # finished before this invocation: skipped, not counted
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"batch_size": 128}))
    (old / "final_metrics.json").write_text(json.dumps({"step": 999, "train/images_per_sec": 1.0}))
    os.utime(old / "final_metrics.json", (started - 60, started - 60))
    line = sweep.throughput_line([*runs, str(old), str(tmp_path / "missing")], started, started + 20.0, jobs=2)
    # 100·128 + 50·64 = 16,000 images in 20 s
    assert line == ("[sweep] aggregate: 2 run(s) finished here, 16,000 training images in 20 s = 800 img/s with "
                    "--jobs=2 (each run's own train rate: 250–400 img/s)")
    assert sweep.throughput_line([str(old)], started, started + 20.0, jobs=1) is None
    # a run resumed from its step-40 checkpoint counts only the 60 steps it trained in this invocation
    (tmp_path / "a" / "checkpoints" / "40").mkdir(parents=True)
    (tmp_path / "a" / "checkpoints" / "80.orbax-checkpoint-tmp-1").mkdir()  # unfinished: not a resume point
    assert sweep.checkpoint_step(runs[0]) == 40 and sweep.checkpoint_step(runs[1]) == 0
    resumed = {wd: sweep.checkpoint_step(wd) for wd in runs}
    # (100 - 40)·128 + 50·64 = 10,880 images in 20 s
    assert sweep.throughput_line(runs, started, started + 20.0, jobs=2, resumed_from=resumed) == (
        "[sweep] aggregate: 2 run(s) finished here, 1 of them resumed: their steps before this invocation not "
        "counted, 10,880 training images in 20 s = 544 img/s with --jobs=2 (each run's own train rate: 250–400 img/s)")


def test_two_sweeps_share_one_gpu_by_their_memory_fraction():
    assert sweep.slot_envs(2, gpus=1, memory=0.45) == [
        {"CUDA_VISIBLE_DEVICES": "0", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.225"},
        {"CUDA_VISIBLE_DEVICES": "0", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.225"}]


def test_the_regime_setting_sets_the_budgets_and_explicit_arguments_win():
    grid8 = sweep.load_sweep("configs/sweeps/cifar10_grid8.py:regime")
    assert grid8["config"] == "configs/cifar10_vit.py:steps=16000,fewshot" and len(grid8["runs"]) == 15
    assert sweep.load_sweep("configs/sweeps/cifar10_grid8.py")["config"] == "configs/cifar10_vit.py:steps=2000,fewshot"
    c100 = sweep.load_sweep("configs/sweeps/cifar100_permuted.py:regime,seeds=1,cnn_steps=2")
    configs = {r["name"]: r.get("config") for r in c100["runs"]}
    assert configs["vit_original,seed=0"] == "configs/cifar10_vit.py:steps=16000"
    assert configs["cnn_resnet18w32_original,seed=0"] == "configs/cifar10_vit.py:model=resnet18,steps=2"
    assert c100["overrides"]["data.in_memory"] is True
    assert "data.in_memory" not in sweep.load_sweep("configs/sweeps/cifar100_permuted.py")["overrides"]
