"""Multi-host for real: `main.py` as 2 processes x 4 CPU devices on 127.0.0.1 (gloo collectives).

A 2-process run, rolled back to its step-2 checkpoint and relaunched, resumes and logs the same losses and eval
results as its uninterrupted self, bitwise; only process 0 writes metrics, TensorBoard and INFO logs; the processes
write each Orbax checkpoint together (the grain iterator state once per process). A run with one of its two
processes missing fails with a clear error within `config.distributed.initialization_timeout`.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from vit_jax_struct import storage
from vit_jax_struct.train import distributed, metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tests/conftest.py::tiny_config as flags, on a 1 x 8 mesh: parameters and optimizer state sharded over the devices
# of both processes (FSDP), the batch split over all 8.
TINY = ["--config=configs/default.py", "--config.batch_size=16", "--config.log_every_steps=1",
        "--config.eval_every_steps=0", "--config.checkpoint_every_steps=2",
        "--config.data.image_size=8", "--config.data.eval_examples=32", "--config.data.num_threads=1",
        "--config.model.variant=mu/4", "--config.model.width=32", "--config.model.depth=1",
        "--config.model.mlp_dim=64", "--config.model.num_heads=2", "--config.pp.pad=1",
        "--config.optim.warmup_steps=1", "--config.mesh.data=1",
        "--config.mesh.fsdp=8", "--config.multihost=True", "--config.distributed.num_processes=2"]
# Each process its own 4 fake CPU devices (not conftest's 8); cheap XLA CPU compiles (same flags for every run, so
# runs stay bitwise comparable). No persistent compilation cache: only process 0 writes it, and one process
# compiling > 30 s longer than the other trips gloo's fixed context-setup timeout.
XLA_FLAGS = ("--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
             "--xla_llvm_disable_expensive_passes=true")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(workdir, total_steps, ids=(0, 1), timeout_s=60, limit_s=600, log_dir=None):
    """Runs `main.py` as processes `ids` of a 2-process run; returns `[(returncode, log text)]` per process.
    Logs go beside a local workdir, or into `log_dir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(XLA_FLAGS=XLA_FLAGS, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    port = _free_port()
    procs, logs = [], []
    for i in ids:
        logs.append(f"{log_dir}/p{i}.log" if log_dir else f"{workdir}.p{i}.log")
        with open(logs[-1], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "main.py", *TINY, f"--workdir={workdir}", f"--config.total_steps={total_steps}",
                 f"--config.distributed.coordinator_address=127.0.0.1:{port}", f"--config.distributed.process_id={i}",
                 f"--config.distributed.initialization_timeout={timeout_s}"], cwd=ROOT, env=env, stdout=log,
                stderr=subprocess.STDOUT))
    deadline = time.time() + limit_s
    try:
        for p in procs:
            p.wait(timeout=max(deadline - time.time(), 1))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = []
    for p, path in zip(procs, logs, strict=True):
        with open(path) as f:
            out.append((p.returncode, f.read()))
    return out


def _ok(results):
    for i, (rc, log) in enumerate(results):
        assert rc == 0, f"process {i} exited {rc}:\n{log[-4000:]}"
    return [log for _, log in results]


def _train_losses(workdir):
    return [(r["step"], r["train/loss"]) for r in metrics.read_metrics(str(workdir)) if "train/loss" in r]


def test_two_processes_train_checkpoint_and_resume_bitwise(tmp_path):
    wd = tmp_path / "run"
    t0 = time.time()
    log_a0, log_a1 = _ok(_launch(wd, 4))  # uninterrupted: checkpoints at steps 2 and 4
    t1 = time.time()
    la = _train_losses(wd)
    fa = json.loads((wd / "final_metrics.json").read_text())
    assert [s for s, _ in la] == [1, 2, 3, 4]  # each step once: only process 0 writes metrics.jsonl
    # Only process 0 logs at INFO; every process sees its 4 devices of the 8 the mesh spans.
    assert "distributed: 2 processes, 8 devices (4 per process), this is process 0" in log_a0
    assert "step 4/4: loss" in log_a0 and "step 4/4" not in log_a1
    # One checkpoint per step, written by both processes together (parameters sharded across them); the data
    # iterator's position once per process.
    ckpts = wd / "checkpoints"
    assert sorted(os.listdir(ckpts)) == ["2", "4"]
    assert sorted(f for f in os.listdir(ckpts / "4" / "data") if f.endswith(".json")) == [
        "process_0-of-2.json", "process_1-of-2.json"]
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(os.listdir(ckpts / "4" / "state"))
    assert sorted(os.listdir(wd)) == ["checkpoints", "class_names.json", "config.json", "curves.png",
                                      "final_metrics.json", "lock", "log.txt", "metrics.jsonl", "tensorboard"]
    assert "done: step 4; " in (wd / "log.txt").read_text()  # process 0's log
    assert len(os.listdir(wd / "tensorboard")) == 1  # one event file: process 0's

    # Roll the run back to its step-2 checkpoint, as if both hosts had died right after writing it, and relaunch.
    shutil.rmtree(ckpts / "4")
    (wd / "final_metrics.json").unlink()
    records = metrics.read_metrics(str(wd))
    (wd / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["step"] <= 2))
    log_b0, log_b1 = _ok(_launch(wd, 4))
    print(f"2 processes: uninterrupted {t1 - t0:.0f} s, resumed {time.time() - t1:.0f} s")
    assert "resuming from checkpoint" in log_b0 and "(step 2 of 4)" in log_b0 and "resuming" not in log_b1
    lb = _train_losses(wd)
    assert lb == la, (la, lb)  # bitwise: steps 3 and 4 repeat the uninterrupted run's
    fb = json.loads((wd / "final_metrics.json").read_text())
    assert fb["step"] == 4 and (fa["eval/accuracy"], fa["eval/loss"]) == (fb["eval/accuracy"], fb["eval/loss"])
    assert sorted(os.listdir(ckpts)) == ["2", "4"]


def test_missing_process_fails_clearly_within_the_timeout(tmp_path):
    t0 = time.time()
    [(rc, log)] = _launch(tmp_path / "w", 2, ids=(0,), timeout_s=3, limit_s=120)  # process 1 never starts
    elapsed = time.time() - t0
    assert rc != 0, log[-3000:]
    assert "distributed start-up timed out" in log and "not every process joined" in log, log[-3000:]
    assert "expected 2 processes, this process id 0" in log and "coordinator 127.0.0.1:" in log
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert rc == 1 and len(errors) == 1 and "config.distributed.initialization_timeout=3" in errors[0], log[-3000:]
    assert "Traceback" not in log
    assert elapsed < 60, elapsed  # ours (3 s) and not the library's deadline (63 s), which would abort instead
    assert not (tmp_path / "w").exists()


def test_check_joined_names_what_was_expected_and_found():
    distributed.check_joined(None, [0], [8])  # this pytest process: 1 process, 8 devices
    with pytest.raises(RuntimeError, match=r"expected 2 processes with indices 0..1, but jax.process_count\(\) is 1; "
                                           r"the process indices are \[0, 0\]"):
        distributed.check_joined(2, [0, 0], [4, 4])
    with pytest.raises(RuntimeError, match=r"different local device counts \[4, 8\]"):
        distributed.check_joined(None, [0], [4, 8])
    with pytest.raises(ValueError, match=r"config.distributed.process_id 2 must be in \[0, 2\)"):
        distributed.initialize({"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 2})
    with pytest.raises(ValueError, match=r"config.distributed.initialization_timeout 0 must be positive"):
        distributed.initialize({"initialization_timeout": 0})


def test_two_processes_on_a_bucket_resume_bitwise_and_only_process_0_writes_metrics(gcs, tmp_path):
    """The pod set-up: both processes write one checkpoint into a gs:// workdir (the GCS emulator), then the run is
    rolled back to its step-2 checkpoint as if both hosts had died after writing it, and relaunched."""
    url = gcs.bucket("multihost") + "/run"
    _ok(_launch(url, 4, log_dir=tmp_path))
    la = _train_losses(url)
    fa = json.loads(storage.read_text(f"{url}/final_metrics.json"))
    assert [s for s, _ in la] == [1, 2, 3, 4]
    names = gcs.objects("multihost", "run/")
    assert {"run/checkpoints/4/data/process_0-of-2.json", "run/checkpoints/4/data/process_1-of-2.json",
            "run/checkpoints/4/commit_success.txt", "run/config.json", "run/metrics.jsonl"} <= set(names)
    assert any(n.startswith("run/checkpoints/4/state/ocdbt.process_1/") for n in names)
    assert len([n for n in names if n.startswith("run/tensorboard/")]) == 1  # process 0's event file only
    # Both hosts die after checkpoint 2: step 4's checkpoint and final_metrics.json never reached the bucket; the
    # records of steps 3 and 4 did (the relaunch drops and rewrites them).
    storage.remove(f"{url}/final_metrics.json")
    import gcsfs

    gcsfs.GCSFileSystem().rm(f"{url}/checkpoints/4", recursive=True)
    log_b0, _ = _ok(_launch(url, 4, log_dir=tmp_path))
    assert "resuming from checkpoint gs://multihost/run/checkpoints/2 (step 2 of 4)" in log_b0
    assert _train_losses(url) == la  # bitwise, each step once
    fb = json.loads(storage.read_text(f"{url}/final_metrics.json"))
    assert (fa["eval/accuracy"], fa["eval/loss"]) == (fb["eval/accuracy"], fb["eval/loss"])
