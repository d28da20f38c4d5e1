"""gs:// workdirs against a real GCS API on loopback (fake-gcs-server): training, resume, metrics on an object store,
the workdir lock, faults (missing bucket, no credentials, the store going away mid-run), the TPU VM launcher."""

import json
import logging
import os
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import sigterm_after_first_save, tiny_config, write_image_folder
from tests.gcs_emulator import Emulator
from vit_jax_struct import storage
from vit_jax_struct.train import lock, metrics, trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _losses(workdir):
    return {r["step"]: r["train/loss"] for r in metrics.read_metrics(workdir) if "train/loss" in r}


def _outage_run(workdir: str, *, total: int, every: int, depth: int, width: int, mlp_dim: int) -> list[str]:
    """The command line of a small default-config run into `workdir` that checkpoints every `every` steps."""
    return [sys.executable, "main.py", "--config=configs/default.py", f"--workdir={workdir}",
            f"--config.total_steps={total}", f"--config.checkpoint_every_steps={every}", "--config.log_every_steps=50",
            "--config.eval_every_steps=0", "--config.data.eval_examples=32", "--config.tensorboard=False",
            "--config.metrics_flush_secs=0", "--config.checkpoint_timeout_s=60", f"--config.model.depth={depth}",
            f"--config.model.width={width}", f"--config.model.mlp_dim={mlp_dim}", "--config.model.num_heads=2",
            "--config.data.image_size=8", "--config.pp.pad=1", "--config.batch_size=16"]


def _bucket_steps(ckpts: str, *, done: bool) -> list[int]:
    """Step folders under `ckpts` (the emulator's bucket) whose checkpoint is complete (done) or being written."""
    names = os.listdir(ckpts) if os.path.isdir(ckpts) else []
    return sorted(int(s) for s in names if s.isdigit()
                  and os.path.exists(os.path.join(ckpts, s, "commit_success.txt")) == done)


def _assert_quiet(out: str):
    """Apart from the I/W progress log and the one error: line, at most 4 lines and no traceback."""
    other = [line for line in out.splitlines() if not re.match(r"[IW]\d{4} ", line) and not line.startswith("error: ")]
    assert len(other) <= 4 and "Traceback" not in out, out[-3000:]


def _resume_when_back(emu, args: list[str], env: dict) -> str:
    """Bring the bucket back, run the same command to the end; returns its 'resuming from checkpoint' line."""
    emu.start()
    t0 = time.time()
    r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    emu.stop()
    print(f"resumed run: {time.time() - t0:.1f} s")
    assert r.returncode == 0, r.stderr[-3000:]
    m = [line for line in r.stderr.splitlines() if "resuming from checkpoint" in line]
    assert m, r.stderr[-2000:]
    return m[0]


def test_train_into_a_bucket_preempt_resume_bitwise_then_analyse_and_report(gcs, tmp_path, monkeypatch, caplog):
    bucket = gcs.bucket("train-bkt")
    url = f"{bucket}/runs/tiny"
    cfg = tiny_config(total_steps=8, checkpoint_every_steps=4, eval_every_steps=4, tensorboard=True,
                      **{"profile.start_step": 6, "profile.num_steps": 1})  # traced by the resumed run
    trainer.train_and_evaluate(cfg, str(tmp_path / "local"))

    sigterm_after_first_save(monkeypatch)  # pre-emption notice right after the first checkpoint
    with pytest.raises(trainer.Preempted):
        trainer.train_and_evaluate(cfg, url)
    monkeypatch.undo()
    with caplog.at_level(logging.INFO):
        _, last = trainer.train_and_evaluate(cfg, url)
    assert "resuming from checkpoint gs://train-bkt/runs/tiny/checkpoints/5 (step 5 of 8)" in caplog.text

    records = metrics.read_metrics(url)
    train_steps = [r["step"] for r in records if "train/loss" in r]
    assert train_steps == list(range(1, 9))  # each step once, though steps 5.. ran in two processes' lifetimes
    assert _losses(url) == _losses(str(tmp_path / "local"))  # bitwise
    names = gcs.objects("train-bkt", "runs/tiny/")
    for need in ("config.json", "metrics.jsonl", "final_metrics.json", "checkpoints/8/commit_success.txt",
                 "log.txt", "curves.png"):
        assert f"runs/tiny/{need}" in names, names
    assert any(n.startswith("runs/tiny/tensorboard/events.out.tfevents") for n in names)
    assert any(n.startswith("runs/tiny/tensorboard/plugins/profile/") and n.endswith(".xplane.pb") for n in names)
    log = storage.read_text(f"{url}/log.txt")  # both lifetimes of the run, in order
    assert log.index("pre-empted: saved checkpoint at step 5") < log.index("resuming from checkpoint") < \
        log.index("done: step 8; ")
    assert json.loads(storage.read_text(f"{url}/final_metrics.json"))["eval/accuracy"] == last["eval/accuracy"]
    assert not os.path.exists(os.path.join(os.getcwd(), "gs:")) and not os.path.exists(os.path.join(ROOT, "gs:"))
    # The lock is released (deleted) at the end of each run.
    assert "runs/tiny/lock" not in names

    # Analysis and the report read the run from the bucket and write there.
    from vit_jax_struct.experiments import report
    from vit_jax_struct.analysis import run as analysis_run

    analysis_run.run_from_flags(url, None, None, 32, 16)
    assert {"runs/tiny/analysis/analysis.json", "runs/tiny/analysis/report.md", "runs/tiny/analysis/cka.png"} <= \
        set(gcs.objects("train-bkt", "runs/tiny/analysis/"))
    assert report.main(["--runs", f"{bucket}/runs", "--out", f"{bucket}/report"]) == 0
    assert "gs://train-bkt/runs/tiny" in storage.read_text(f"{bucket}/report/runs.csv")

    # init_from a checkpoint step in the bucket (warm start), and data read from an image folder in the bucket.
    root = write_image_folder(tmp_path / "imgs", classes=tuple("abcdefghij"), per_class=2, size=8)  # 10: as digits
    for d, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), root)
            with open(os.path.join(d, f), "rb") as fh:
                storage.write_bytes(f"{bucket}/data/{rel}", fh.read())
    warm = tiny_config(total_steps=1, init_from=f"{url}/checkpoints/8", **{
        "data.source": "folder", "data.root": f"{bucket}/data", "data.num_classes": 0, "optim.warmup_steps": 0})
    state, _ = trainer.train_and_evaluate(warm, str(tmp_path / "warm"))
    assert int(state["step"]) == 1


def test_metric_writer_on_a_bucket_rewrites_whole_objects_and_loses_only_unflushed_records(gcs):
    url = gcs.bucket("metrics-bkt") + "/run"
    w = metrics.MetricWriter(url, tensorboard=True, flush_secs=1e9)
    for s in (1, 2, 3):
        w.write(s, {"train/loss": 1.0 / s})
    assert not storage.exists(f"{url}/metrics.jsonl")  # buffered: nothing uploaded before a flush
    w.flush()
    assert [r["step"] for r in metrics.read_metrics(url)] == [1, 2, 3]
    assert any(n.startswith("run/tensorboard/events.out.tfevents") for n in gcs.objects("metrics-bkt", "run/"))
    w.write(4, {"train/loss": 0.25})  # then the process dies without flushing (kill -9): step 4 is lost
    w.active = False
    assert [r["step"] for r in metrics.read_metrics(url)] == [1, 2, 3]
    # A run resuming from step 2 drops the records past it (they are logged again), in one rewrite.
    w2 = metrics.MetricWriter(url, tensorboard=False, resume_step=2, flush_secs=0)
    assert [r["step"] for r in metrics.read_metrics(url)] == [1, 2]
    w2.write(3, {"train/loss": 0.5})  # flush_secs=0: uploaded at once
    assert [r["step"] for r in metrics.read_metrics(url)] == [1, 2, 3]
    w2.close()


def test_workdir_lock_on_a_bucket_refuses_a_second_run_and_takes_over_a_stale_one(gcs):
    url = gcs.bucket("lock-bkt") + "/run"
    a = lock.WorkdirLock(url, stale_s=60, heartbeat_s=60).acquire()
    with pytest.raises(lock.WorkdirBusyError, match=rf"in use by another run \(host \S+, PID {os.getpid()}, since "):
        lock.WorkdirLock(url).acquire()
    a.release()
    assert "run/lock" not in gcs.objects("lock-bkt")
    # A holder killed without releasing: its heartbeat stops and the lock goes stale.
    dead = lock.WorkdirLock(url, stale_s=0.5, heartbeat_s=3600).acquire()
    time.sleep(0.7)
    b = lock.WorkdirLock(url, stale_s=0.5, heartbeat_s=3600).acquire()  # takes it over
    assert not dead.refresh() and "taken over" in dead.lost  # the old holder notices at its next heartbeat
    with pytest.raises(lock.WorkdirBusyError, match="taken over by another run; stopping"):
        dead.check()
    b.check()
    b.release()
    dead._thread = None  # never started a second time; nothing to join


def test_local_lock_names_the_holder_and_is_freed_by_kill_9(tmp_path):
    wd = tmp_path / "w"
    code = ("import sys, time; from vit_jax_struct.train import lock; lock.WorkdirLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(wd)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(lock.WorkdirBusyError, match=rf"PID {holder.pid}, since 20"):
            lock.WorkdirLock(str(wd)).acquire()
        with pytest.raises(lock.WorkdirBusyError, match=rf"workdir {wd} is in use by another run"):
            trainer.train_and_evaluate(tiny_config(total_steps=2), str(wd))  # a second run fails at once
        assert sorted(os.listdir(wd)) == ["lock"]  # and wrote nothing
    finally:
        holder.kill()  # SIGKILL: no clean-up ran, the kernel dropped the flock
        holder.wait()
    lock.WorkdirLock(str(wd)).acquire().release()


def test_missing_bucket_and_missing_credentials_fail_at_start_naming_the_url(gcs, tmp_path, monkeypatch):
    with pytest.raises(storage.StorageError, match=r"workdir gs://no-such-bucket/run: bucket gs://no-such-bucket "
                                                   r"does not exist"):
        trainer.train_and_evaluate(tiny_config(total_steps=2), "gs://no-such-bucket/run")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-key.json"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # never probe a metadata server
    with pytest.raises(storage.StorageError, match=r"workdir gs://some-bucket/run: no Google Cloud credentials"):
        storage.check_workdir("gs://some-bucket/run")


def test_store_going_away_stops_the_run_and_the_same_command_resumes(tmp_path):
    emu = Emulator(root=str(tmp_path / "gcs")).start()
    emu.bucket("outage")
    env = {**os.environ, **emu.env(), "JAX_PLATFORMS": "cpu"}
    args = _outage_run("gs://outage/run", total=750, every=250, depth=1, width=32, mlp_dim=64)
    ckpts = os.path.join(emu.root, "data", "outage", "run", "checkpoints")

    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while not _bucket_steps(ckpts, done=True) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if not _bucket_steps(ckpts, done=True):
            early = p.communicate(timeout=60)[0] if p.poll() is not None else "(still running)"
            raise AssertionError(f"no checkpoint reached the bucket; exit {p.poll()}:\n{early[-3000:]}")
        emu.stop()  # the store goes away mid-run
        t0 = time.time()
        out, _ = p.communicate(timeout=300)
        stopped_after = time.time() - t0
    finally:
        if p.poll() is None:
            p.kill()
        emu.stop()  # also when the test failed: no server left behind
    assert p.returncode == 1, out[-3000:]
    err = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "gs://outage/run" in err[0], out[-3000:]
    _assert_quiet(out)  # library errors are counted in log.txt instead
    assert stopped_after < 60, stopped_after  # gcsfs retries for about 35 s, then the run stops (no second round)
    print(f"stopped {stopped_after:.1f} s after the store went away")
    m = _resume_when_back(emu, args, env)
    assert re.search(r"\(step (250|500) of 750\)", m), m


def test_store_going_away_during_an_asynchronous_save_names_that_step_and_the_run_resumes(tmp_path):
    """The store goes away while a checkpoint is being written (its step folder in the bucket, no
    commit_success.txt yet): one error line naming that step and its folder, the last complete step, no traceback;
    the same command resumes from that step once the store is back."""
    emu = Emulator(root=str(tmp_path / "gcs")).start()
    emu.bucket("inflight")
    env = {**os.environ, **emu.env(), "JAX_PLATFORMS": "cpu"}
    # width 256: a checkpoint of ≈ 19 MB, long enough in flight through the emulator to be caught mid-write
    args = _outage_run("gs://inflight/run", total=400, every=100, depth=2, width=256, mlp_dim=1024)
    ckpts = os.path.join(emu.root, "data", "inflight", "run", "checkpoints")

    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    caught = None
    try:
        deadline = time.time() + 300
        while p.poll() is None and time.time() < deadline:
            complete, writing = _bucket_steps(ckpts, done=True), _bucket_steps(ckpts, done=False)
            later = [s for s in writing if complete and s > complete[-1]]
            if later:  # a save after a complete one is in flight: the store goes away now
                emu.stop()
                caught = (later[0], complete[-1])
                break
            time.sleep(0.005)
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
        emu.stop()
    assert caught is not None, f"no save was caught in flight; exit {p.returncode}:\n{out[-3000:]}"
    step, last = caught
    assert p.returncode == 1, out[-3000:]
    err = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and f"saving checkpoint step {step} (gs://inflight/run/checkpoints/{step}) failed" in err[0] \
        and f"the last complete checkpoint is step {last}" in err[0], out[-3000:]
    _assert_quiet(out)
    m = _resume_when_back(emu, args, env)
    assert f"(step {last} of 400)" in m, m


def test_tpu_vm_launcher_issues_the_commands_for_every_worker_and_refuses_a_local_workdir(tmp_path):
    stub = tmp_path / "bin" / "gcloud"
    stub.parent.mkdir()
    log = tmp_path / "calls.txt"
    stub.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n'
                    'case "$*" in *describe*) echo "10.0.0.1;10.0.0.2;10.0.0.3;10.0.0.4";; esac\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}"}
    sh = os.path.join(ROOT, "launch", "tpu_vm.sh")

    def run(*a):
        return subprocess.run(["bash", sh, *a], env=env, capture_output=True, text=True, timeout=120, check=False)

    assert run("create", "vit-l", "us-central2-b", "v4-32").returncode == 0
    assert run("setup", "vit-l", "us-central2-b").returncode == 0
    assert run("run", "vit-l", "us-central2-b", "configs/vit_l16.py", "gs://bkt/runs/l16",
               "--config.seed=1").returncode == 0
    assert run("delete", "vit-l", "us-central2-b").returncode == 0
    calls = log.read_text().splitlines()
    assert calls[0] == ("compute tpus tpu-vm create vit-l --accelerator-type=v4-32 --version=tpu-ubuntu2204-base "
                        "--zone=us-central2-b")
    assert calls[1].startswith("compute tpus tpu-vm scp /tmp/vit_jax_struct.tgz vit-l:/tmp/ --worker=all")
    assert calls[2].startswith("compute tpus tpu-vm ssh vit-l --worker=all --command=mkdir -p ~/vit_jax_struct")
    assert "pip install -q -r requirements.txt" in calls[2]
    assert calls[3].startswith("compute tpus tpu-vm describe vit-l")
    assert calls[4].startswith("compute tpus tpu-vm ssh vit-l --worker=all --command=cd ~/vit_jax_struct && nohup")
    assert "--config=configs/vit_l16.py --workdir=gs://bkt/runs/l16 --config.multihost=True --config.seed=1" \
        in calls[4]
    assert calls[5] == "compute tpus tpu-vm delete vit-l --quiet --zone=us-central2-b"
    bad = run("run", "vit-l", "us-central2-b", "configs/vit_l16.py", "/tmp/runs/l16")
    assert bad.returncode == 2 and "has 4 hosts" in bad.stderr and "separate disk on each" in bad.stderr
    assert len(log.read_text().splitlines()) == 7  # only the describe: nothing was started


def test_tensorboard_on_a_bucket_rolls_over_into_new_files_and_keeps_every_scalar(gcs):
    from tensorboardX.proto import event_pb2

    from vit_jax_struct.data import tfrecord

    url = gcs.bucket("tb-roll") + "/run"
    w = metrics.MetricWriter(url, tensorboard=True, flush_secs=0, tb_chunk_bytes=2000)
    for s in range(1, 200):
        w.write(s, {"train/loss": 1.0 / s})
    w.close()
    files = [n for n in gcs.objects("tb-roll", "run/tensorboard/")]
    assert len(files) > 3 and len(set(files)) == len(files)  # rolled over, never overwriting an earlier file
    steps = []
    for name in files:
        for rec in tfrecord.read_records(f"gs://tb-roll/{name}"):
            ev = event_pb2.Event.FromString(rec)
            steps += [ev.step for v in ev.summary.value if v.tag == "train/loss"]
    assert sorted(steps) == list(range(1, 200))


def test_basename_and_dirname_split_local_paths_and_urls_alike():
    assert (storage.basename("gs://b/runs/vit/"), storage.dirname("gs://b/runs/vit/")) == ("vit", "gs://b/runs")
    assert (storage.basename("/w/sweep/full,seed=0"), storage.dirname("/w/sweep/full,seed=0")) == (
        "full,seed=0", "/w/sweep")
    assert storage.dirname("run") == ""


def test_makedirs_names_the_file_in_the_way(tmp_path):
    (tmp_path / "f").write_text("")
    for target in (tmp_path / "f", tmp_path / "f" / "a" / "b"):
        with pytest.raises(storage.StorageError) as e:
            storage.makedirs(target)
        assert str(e.value) == f"cannot create the folder {target}: {tmp_path / 'f'} is a file, not a folder"
    storage.makedirs(tmp_path / "ok" / "x")  # and a plain new folder is made
    assert (tmp_path / "ok" / "x").is_dir()
