"""Workdir integrity under faults and misuse: broken checkpoints, failed saves, pre-emption exit code, metrics after
resume, config validation (and the CLI's one-line errors), high-bit-depth images, unreadable images, verify."""

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from tests.conftest import tiny_config, write_image_folder
from vit_jax_struct.data import sources, verify
from vit_jax_struct.train import checkpoint, metrics, trainer, validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _train_steps(workdir):
    return [r["step"] for r in metrics.read_metrics(str(workdir)) if "train/loss" in r]


def _losses(workdir):
    return {r["step"]: r["train/loss"] for r in metrics.read_metrics(str(workdir)) if "train/loss" in r}


def test_broken_checkpoints_are_skipped_naming_step_and_file_and_none_restoring_fails(tmp_path, caplog):
    cfg = tiny_config(total_steps=6, checkpoint_every_steps=2, eval_every_steps=0)
    trainer.train_and_evaluate(cfg, str(tmp_path / "ref"))  # the uninterrupted reference, 8 steps below
    wd = tmp_path / "w"
    trainer.train_and_evaluate(cfg, str(wd))
    ck = wd / "checkpoints"
    assert sorted(os.listdir(ck)) == ["2", "4", "6"]
    (ck / "999").mkdir()  # empty step folder
    with open(ck / "6" / "state" / "_METADATA", "r+") as f:  # truncated
        f.truncate(20)
    with open(ck / "4" / "data" / "process_0-of-1.json", "r+") as f:
        f.truncate(5)
    longer = tiny_config(total_steps=8, checkpoint_every_steps=2, eval_every_steps=0)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        state, _ = trainer.train_and_evaluate(longer, str(wd))
    log = caplog.text
    assert "checkpoint step 999 in" in log and "999/_CHECKPOINT_METADATA is missing" in log
    assert "checkpoint step 6 in" in log and "6/state/_METADATA is corrupt" in log
    assert "checkpoint step 4 in" in log and "4/data/process_0-of-1.json is corrupt" in log
    assert "resuming from checkpoint" in log and "(step 2 of 8)" in log
    assert {d.split("-")[0] for d in os.listdir(str(ck) + ".broken")} == {"999", "6", "4"}  # set aside, kept
    assert int(state["step"]) == 8 and sorted(os.listdir(ck)) == ["4", "6", "8"]
    assert _train_steps(wd) == list(range(1, 9))  # each step once

    # Every step broken: the run refuses to start over silently and lists what it tried. (A finished run is not
    # restored at all — its final_metrics.json says it is complete — so this one is made unfinished first.)
    (wd / "final_metrics.json").unlink()
    for s in os.listdir(ck):
        with open(ck / s / "_CHECKPOINT_METADATA", "w") as f:
            f.write("{")
    with pytest.raises(checkpoint.CheckpointError, match=r"no checkpoint in .* restores \(tried 3: step 8: .*"
                                                         r"_CHECKPOINT_METADATA is corrupt.*step 6: .*step 4: .*"
                                                         r"Not starting from scratch"):
        trainer.train_and_evaluate(longer, str(wd))


def test_a_regular_file_for_checkpoints_fails_at_once_naming_it(tmp_path):
    wd = tmp_path / "w"
    wd.mkdir()
    (wd / "checkpoints").write_text("not a folder")
    t0 = time.time()
    with pytest.raises(checkpoint.CheckpointError, match=rf"checkpoint folder {wd}/checkpoints cannot be used"):
        trainer.train_and_evaluate(tiny_config(total_steps=2), str(wd))
    assert time.time() - t0 < 30
    assert sorted(os.listdir(wd)) == ["checkpoints", "lock"]  # nothing else written


def _mount_tmpfs(path, size):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       check=False)
    return r.returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a disk to fill) needs root, as CI runs")
@pytest.mark.parametrize("fault", ["disk_full", "read_only"])
def test_a_failed_save_stops_the_run_within_seconds_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch,
                                                                                      fault):
    mnt = tmp_path / "disk"
    assert _mount_tmpfs(mnt, "16m"), "mount -t tmpfs failed"
    try:
        wd = mnt / "run"
        original_save, calls = checkpoint.Checkpointer.save, []

        def save_then_fault(self, step, state, it):
            original_save(self, step, state, it)
            calls.append((step, time.time()))
            if len(calls) == 1:
                self.wait()  # step 2 complete, then the disk fills up / turns read-only
                if fault == "disk_full":
                    with open(mnt / "filler", "wb") as f, pytest.raises(OSError):
                        while True:
                            f.write(b"\0" * (1 << 20))
                            f.flush()
                else:  # the checkpoint folder becomes read-only (a read-only bind mount over it)
                    ck = str(wd / "checkpoints")
                    subprocess.run(["mount", "--bind", ck, ck], check=True)
                    subprocess.run(["mount", "-o", "remount,bind,ro", ck], check=True)

        monkeypatch.setattr(checkpoint.Checkpointer, "save", save_then_fault)
        cfg = tiny_config(total_steps=40, checkpoint_every_steps=2, eval_every_steps=0, log_every_steps=100)
        with pytest.raises((checkpoint.CheckpointError, OSError)) as err:
            trainer.train_and_evaluate(cfg, str(wd))
        stopped = time.time()
        assert str(wd) in str(err.value) and ("No space left" in str(err.value) or "Read-only" in str(err.value)
                                              or "Errno 28" in str(err.value) or "Errno 30" in str(err.value)), \
            str(err.value)
        assert stopped - calls[0][1] < 60  # the next save fails and the run stops (no 300 s barrier timeout)
        assert "2" in os.listdir(wd / "checkpoints")
        assert os.path.exists(wd / "checkpoints" / "2" / "commit_success.txt")
    finally:
        if fault == "read_only":
            subprocess.run(["umount", "-l", str(mnt / "run" / "checkpoints")], check=False)
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a disk to fill) needs root, as CI runs")
def test_a_disk_that_fills_during_a_background_save_is_one_error_line_naming_that_step(tmp_path):
    """The default run on a 4 MB disk: checkpoint 30 (2.6 MB of parameters and Adam moments) fits, the background
    save of step 60 fills the disk. The run exits 1 with one `error:` line naming step 60 (no tracebacks, Orbax's
    and asyncio's errors counted in log.txt), checkpoint 30 stays, and once there is space the same command resumes
    from it and finishes."""
    mnt = tmp_path / "disk"
    assert _mount_tmpfs(mnt, "4m"), "mount -t tmpfs failed"
    try:
        wd = mnt / "w"
        args = [sys.executable, "main.py", "--config=configs/default.py", f"--workdir={wd}",
                "--config.total_steps=120", "--config.checkpoint_every_steps=30", "--config.eval_every_steps=60"]
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": ""}
        r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 1, r.stderr[-3000:]
        other = [line for line in r.stderr.splitlines() if not re.match(r"I\d{4} ", line)]
        assert len(other) <= 5 and "Traceback" not in r.stderr, r.stderr[-3000:]
        error = [line for line in other if line.startswith("error: ")]
        assert len(error) == 1 and error[0].startswith(
            f"error: CheckpointError: saving checkpoint step 60 ({wd}/checkpoints/60) failed: No space left on device; "
            f"its partial folder was moved to {wd}/checkpoints.broken/60-"), error
        assert "the last complete checkpoint is step 30: rerun the same command" in error[0]
        assert max(_train_steps(wd)) <= 61 and os.listdir(wd / "checkpoints") == ["30"], \
            (sorted(os.walk(wd / "checkpoints")), r.stderr[-3000:])
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)  # space is back
        r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"resuming from checkpoint {wd}/checkpoints/30 (step 30 of 120)" in r.stderr
        assert json.loads((wd / "final_metrics.json").read_text())["step"] == 120
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_partial_folder_recreated_after_its_move_is_moved_aside_too(tmp_path, monkeypatch):
    """A writer of a failed save that outlives the manager's futures recreates `<step>.orbax-checkpoint-tmp` after
    the first move (seen once in CI under load): the close-time sweep moves it beside the first, under a name of
    its own, and leaves only complete steps in the checkpoint folder."""
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"), async_save=False)
    (tmp_path / "checkpoints" / "30").mkdir()
    tmp = tmp_path / "checkpoints" / "60.orbax-checkpoint-tmp"
    (tmp / "state").mkdir(parents=True)
    moves = []
    real_move = checkpoint.storage.move

    def move_then_recreate(src, dst):  # the late writer: the folder comes back once, right after the first move
        real_move(src, dst)
        moves.append(dst)
        if len(moves) == 1:
            (tmp / "state" / "late").mkdir(parents=True)

    monkeypatch.setattr(checkpoint.storage, "move", move_then_recreate)
    ckpt._failed_steps.add(60)
    ckpt._sweep_failed(settle_s=0.2)
    ckpt._sweep_failed(settle_s=0.2)  # a second sweep finds nothing more to move
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["30"]
    assert len(moves) == 2 and moves[0] != moves[1], moves
    assert sorted(os.listdir(tmp_path / "checkpoints.broken")) == sorted(os.path.basename(m) for m in moves)
    assert os.path.isdir(os.path.join(moves[1], "state", "late"))
    ckpt.manager.close()


def test_preemption_exits_143_and_the_rerun_logs_each_step_once(tmp_path):
    wd = tmp_path / "w"
    args = [sys.executable, "main.py", "--config=configs/default.py", f"--workdir={wd}", "--config.total_steps=1000",
            "--config.checkpoint_every_steps=200", "--config.eval_every_steps=0", "--config.log_every_steps=10",
            "--config.data.eval_examples=32", "--config.tensorboard=False", "--config.model.depth=1",
            "--config.model.width=32", "--config.model.mlp_dim=64", "--config.model.num_heads=2",
            "--config.data.image_size=8", "--config.pp.pad=1", "--config.batch_size=16"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marker = wd / "checkpoints" / "200" / "commit_success.txt"
    deadline = time.time() + 240
    while not marker.exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 143, err[-3000:]
    assert "pre-empted: saved checkpoint at step" in err
    preempted_at = max(int(s) for s in os.listdir(wd / "checkpoints") if s.isdigit())
    assert preempted_at < 1000 and (wd / "checkpoints" / str(preempted_at) / "commit_success.txt").exists()
    r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"(step {preempted_at} of 1000)" in r.stderr
    assert _train_steps(wd) == list(range(10, 1001, 10))


def test_resume_after_kill_9_drops_the_records_past_the_checkpoint(tmp_path):
    cfg = tiny_config(total_steps=8, checkpoint_every_steps=4, eval_every_steps=4)
    trainer.train_and_evaluate(cfg, str(tmp_path / "a"))
    wd = tmp_path / "b"
    trainer.train_and_evaluate(cfg, str(wd))
    # As if killed right after logging step 8 and before its checkpoint and final_metrics.json were written.
    shutil.rmtree(wd / "checkpoints" / "8")
    (wd / "final_metrics.json").unlink()
    with open(wd / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "train/lo')  # and a line cut short by the kill
    trainer.train_and_evaluate(cfg, str(wd))
    assert _train_steps(wd) == list(range(1, 9))
    assert _losses(wd) == _losses(tmp_path / "a")
    evals = [r["step"] for r in metrics.read_metrics(str(wd)) if "eval/accuracy" in r]
    assert evals == [4, 8]


def test_rerunning_a_finished_run_writes_nothing(tmp_path):
    cfg = tiny_config(total_steps=4, checkpoint_every_steps=2, tensorboard=True)
    _, last = trainer.train_and_evaluate(cfg, str(tmp_path))
    before = {p: p.read_bytes() for p in (tmp_path / "final_metrics.json", tmp_path / "metrics.jsonl")}
    events = sorted(os.listdir(tmp_path / "tensorboard"))
    _, again = trainer.train_and_evaluate(cfg, str(tmp_path))
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(os.listdir(tmp_path / "tensorboard")) == events
    final = json.loads((tmp_path / "final_metrics.json").read_text())
    assert {"train/loss", "eval/accuracy"} <= set(final) and again["eval/accuracy"] == last["eval/accuracy"]


@pytest.mark.parametrize("key,value,message", [
    ("data.image_size", 0, r"config.data.image_size 0 must be ≥ 1"),
    ("model.classifier", "avg", r"config.model.classifier 'avg' is not one of 'token', 'gap'"),
    ("batch_size", -4, r"config.batch_size -4 must be ≥ 1"),
    ("optim.schedule", "cosin", r"config.optim.schedule 'cosin' is not one of 'cosine', 'linear', 'constant'"),
    ("data.decode_errors", "ignore", r"config.data.decode_errors 'ignore' is not one of 'raise', 'skip'"),
    ("pp.crop_area_min", 0.0, r"config.pp.crop_area_min 0.0 must be > 0"),
    ("model.dropout", 1.5, r"config.model.dropout 1.5 must be < 1"),
    ("mesh.fsdp", 0, r"config.mesh.fsdp 0 must be ≥ 1 \(or -1: all remaining devices\)"),
    ("optim.warmup_steps", 50, r"config.optim.warmup_steps 50 must be ≤ config.total_steps 6"),
    ("data.source", "imagenet", r"config.data.source 'imagenet' is not one of 'digits', 'folder', 'tfds'"),
])
def test_config_errors_name_key_value_and_allowed_before_anything_is_written(tmp_path, key, value, message):
    with pytest.raises(validate.ConfigError, match=message):
        trainer.train_and_evaluate(tiny_config(**{key: value}), str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()


def test_in_memory_data_trains_on_the_same_batches_as_the_files(tmp_path, caplog):
    root = write_image_folder(tmp_path / "data", per_class=8, size=8)
    base = dict(total_steps=3, eval_every_steps=3, checkpoint_every_steps=3, **{
        "data.source": "folder", "data.root": root, "data.num_classes": 0, "data.eval_examples": 0,
        "pp.train_crop": "pad"})
    _, files = trainer.train_and_evaluate(tiny_config(**base), str(tmp_path / "files"))
    with caplog.at_level(logging.INFO):  # the host pipeline over the array (data.device_augment=False)
        _, mem = trainer.train_and_evaluate(tiny_config(**base, **{"data.in_memory": True,
                                                                   "data.device_augment": False}),
                                            str(tmp_path / "mem"))
    same = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "goodput", "train/images_per_sec"))}
    assert same(mem) == same(files) and "train/loss" in same(mem)  # bit for bit: train loss, eval accuracy, loss
    assert "held in memory (data.in_memory)" in (tmp_path / "mem" / "log.txt").read_text()
    # By default data held in memory is augmented on the device: the same data, other crop draws, and said so.
    with caplog.at_level(logging.INFO):
        _, dev = trainer.train_and_evaluate(tiny_config(**base, **{"data.in_memory": True}), str(tmp_path / "dev"))
    assert 0 <= dev["eval/accuracy"] <= 1 and np.isfinite(dev["train/loss"])
    assert "train input on the device: pad 1 + random crop, scaling" in (tmp_path / "dev" / "log.txt").read_text()
    with pytest.raises(validate.ConfigError, match=r"config.data.in_memory True needs config.data.decode_errors "
                                                   r"'raise'"):
        trainer.train_and_evaluate(tiny_config(**base, **{"data.in_memory": True, "data.decode_errors": "skip"}),
                                   str(tmp_path / "w"))
    assert not (tmp_path / "w").exists()


def test_cli_prints_one_line_and_exits_2_for_a_config_error_and_shows_the_trace_on_request(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "main.py", "--config=configs/vit_l16.py:runlocal", "--config.data.image_size=0"]
    r = subprocess.run([*cmd, f"--workdir={tmp_path}/w"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and lines == ["error: config.data.image_size 0 must be ≥ 1  (--traceback for the full "
                                           "trace)"], r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not (tmp_path / "w").exists()
    t = subprocess.run([*cmd, f"--workdir={tmp_path}/w", "--traceback"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert t.returncode == 2 and "Traceback" in t.stderr and "ConfigError" in t.stderr  # the same exit code
    # Without --workdir the runlocal run would live in runs/vit_l16_runlocal (not …_runlocal_runlocal).
    d = subprocess.run([sys.executable, "main.py", "--config=configs/vit_l16.py:runlocal", "--config.total_steps=0"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert d.returncode == 2 and f"workdir: {os.path.join(ROOT, 'runs', 'vit_l16_runlocal')}\n" in d.stderr


def test_16_bit_images_are_scaled_not_clipped(tmp_path):
    grey16 = (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) * 16).astype(np.uint16)  # 0 … 65520
    Image.fromarray(grey16).save(tmp_path / "g16.png")
    with open(tmp_path / "g16.png", "rb") as f:
        img = sources.decode_image(f.read(), "g16.png")
    assert Image.open(tmp_path / "g16.png").mode == "I;16"
    expected = np.clip(np.round(grey16.astype(np.float64) * 255 / 65535), 0, 255).astype(np.uint8)
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    np.testing.assert_array_equal(img[..., 0], expected)
    assert abs(img.mean() - grey16.mean() * 255 / 65535) < 0.5  # ≈ 127, not 254.7 as clipping would give


def test_unreadable_images_are_skipped_deterministically_counted_and_found_by_verify(tmp_path):
    root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=4, size=8)
    bad = os.path.join(root, "train", "a", "1.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8 not really a jpeg")
    src = sources.ImageFolderSource(root, "train")
    i = src.paths.index(bad)
    skip = sources.SkipUnreadable(src)
    rec = skip[i]
    assert rec["skipped"] == 1 and rec["label"] == src[i + 1]["label"]
    np.testing.assert_array_equal(rec["image"], src[i + 1]["image"])  # the next example, every time
    assert skip[i + 1]["skipped"] == 0
    cfg = tiny_config(total_steps=4, batch_size=8, eval_every_steps=0, log_every_steps=1, **{
        "data.source": "folder", "data.root": root, "data.num_classes": 0, "data.decode_errors": "skip",
        "data.eval_examples": 0})
    trainer.train_and_evaluate(cfg, str(tmp_path / "w"))
    skipped = [r["data/skipped"] for r in metrics.read_metrics(str(tmp_path / "w")) if "data/skipped" in r]
    assert skipped == [1.0, 1.0, 1.0, 1.0]  # batch 8 = one epoch of the 8 images: the bad one once per step
    cfg.data.decode_errors = "raise"
    with pytest.raises(Exception, match=r"cannot decode image file '.*a/1.jpg'"):
        trainer.train_and_evaluate(cfg, str(tmp_path / "w2"))
    problems = verify.verify_config(cfg, workers=2)
    assert len(problems) == 1 and problems[0].startswith(bad + ": cannot decode image file")


def test_compare_runs_is_exact_and_names_the_first_difference(tmp_path, capsys):
    def run(name, records):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return str(d)

    rec = [{"step": 10, "train/loss": 2.5, "train/grad_norm": 1.25, "time/train_step": 3.0},
           {"step": 20, "train/loss": 2.25, "train/grad_norm": 1.0, "eval/accuracy": 0.5, "eval/loss": 2.0}]
    a = run("a", rec)
    b = run("b", [{**rec[0], "time/train_step": 9.0}, rec[1]])  # timing differs: still the same run
    c = run("c", [rec[0], {**rec[1], "train/loss": 2.2500001}])
    d = run("d", rec[:1])
    assert metrics.compare_runs(a, b) == {"values": 6, "mismatched": [], "only_in_a": [], "only_in_b": [],
                                          "same": True}
    diff = metrics.compare_runs(a, c)
    assert not diff["same"] and diff["mismatched"] == [(20, "train/loss", 2.25, 2.2500001)]
    assert metrics.compare_runs(a, d)["only_in_a"] == [(20, "eval/accuracy"), (20, "eval/loss"),
                                                       (20, "train/grad_norm"), (20, "train/loss")]
    assert metrics.main(["--compare", a, b]) == 0 and metrics.main(["--compare", a, c]) == 1
    assert "1 mismatched" in capsys.readouterr().out
    assert metrics.main(["--compare", a, str(tmp_path)]) == 2
