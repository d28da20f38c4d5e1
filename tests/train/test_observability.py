"""What a run tells its user: log.txt with the start-up and closing lines, curves.png, file modes, time accounting
and goodput, the profiler hook, the compilation cache, Ctrl-C, and one-line errors with the right exit codes."""

import errno
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests.conftest import tiny_config, write_image_folder
from vit_jax_struct import storage
from vit_jax_struct.models import official
from vit_jax_struct.train import checkpoint, metrics, timing, trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": ""}
# tests/conftest.py::tiny_config as main.py flags (one device).
TINY = ["--config=configs/default.py", "--config.batch_size=16", "--config.log_every_steps=1",
        "--config.eval_every_steps=0", "--config.data.image_size=8", "--config.data.eval_examples=32",
        "--config.model.variant=mu/4", "--config.model.width=32", "--config.model.depth=1",
        "--config.model.mlp_dim=64", "--config.model.num_heads=2", "--config.pp.pad=1",
        "--config.optim.warmup_steps=1", "--config.mesh.data=1", "--config.tensorboard=False"]


def _main(*args, timeout=300):
    r = subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=timeout, check=False)
    return r.returncode, r.stderr


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_run_writes_log_curves_time_accounting_and_a_trace_all_readable_by_others(tmp_path, caplog):
    wd = tmp_path / "w"
    cfg = tiny_config(total_steps=6, checkpoint_every_steps=3, eval_every_steps=3, tensorboard=True,
                      **{"profile.start_step": 4, "profile.num_steps": 2})
    old = os.umask(0o022)
    try:
        with caplog.at_level(logging.INFO):
            _, last = trainer.train_and_evaluate(cfg, str(wd))
    finally:
        os.umask(old)
    log = (wd / "log.txt").read_text()
    # Start-up lines: the data found and the augmentation in force; a closing line with the metrics and outputs.
    assert ("data: digits; 10 classes; train split 'train': 1,437 examples; eval split 'test': 32 examples "
            "(evenly spread subset); images 8x8 px") in log
    assert "preprocessing: train pad 1 + random crop, no flip, no RandAugment, no mixup/CutMix" in log
    done = [line for line in log.splitlines() if "] done: step 6; " in line]
    assert len(done) == 1 and f"eval/accuracy {last['eval/accuracy']:.4g}" in done[0] and \
        f"outputs in {wd}: config.json, metrics.jsonl, final_metrics.json, log.txt" in done[0], log[-2000:]
    assert "step 6/6: loss" in log and "time: wall" in log and "profiler: tracing steps 4 to 5" in log
    assert "Closing _NonBlockingMetadataStore" not in log  # orbax's INFO chatter stays out

    png = (wd / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    # Time accounting: per log interval, and the totals with goodput in final_metrics.json.
    final = json.loads((wd / "final_metrics.json").read_text())
    # The code it trained with: this checkout's commit (+modified when tracked files differ), also in the log.
    assert re.fullmatch(r"[0-9a-f]{12}(\+modified)?|unknown", final["code"]) and f"code: {final['code']}" in log
    # What it trained on (runs.csv's device column: a GPU run and a CPU run of one config are one setting).
    assert re.fullmatch(rf"cpu: .+, {len(os.sched_getaffinity(0))} cores × \d+", final["device"]), final["device"]
    cats = [f"time/{c}" for c in timing.CATEGORIES]
    assert set(cats) | {"time/wall", "goodput"} <= set(final)
    assert 0 < final["goodput"] < 1 and final["time/compile"] > 0 and final["time/eval"] > 0 and \
        final["time/checkpoint"] > 0 and final["time/profile"] > 0
    assert final["goodput"] == pytest.approx(final["time/train_step"] / final["time/wall"])
    assert sum(final[c] for c in cats) == pytest.approx(final["time/wall"], rel=0.05)  # every second accounted
    records = [r for r in metrics.read_metrics(str(wd)) if "train/loss" in r]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6] and all(set(cats) <= set(r) for r in records)
    assert records[0]["time/compile"] == final["time/compile"] and records[1]["time/compile"] == 0.0
    assert sum(r["time/train_step"] for r in records) == pytest.approx(final["time/train_step"])
    # images/s counts the interval's time in train steps and data waits only (not eval, checkpoint, compile).
    assert all(r["train/images_per_sec"] == pytest.approx(cfg.batch_size / (r["time/train_step"] +
                                                                            r["time/data_wait"])) for r in records)

    # The profiler's trace, where TensorBoard's profile plugin looks.
    traces = [f for d, _, fs in os.walk(wd / "tensorboard" / "plugins" / "profile") for f in fs]
    assert any(f.endswith(".xplane.pb") for f in traces), traces

    # Every file readable by others (0644 under umask 022), folders 0755: config.json, final_metrics.json (atomic
    # writes), log.txt, curves.png, Orbax's checkpoint files, the trace.
    modes = {}
    for d, dirs, files in os.walk(wd):
        for name in dirs + files:
            p = os.path.join(d, name)
            modes[os.path.relpath(p, wd)] = stat.S_IMODE(os.stat(p).st_mode)
    assert all(m == (0o755 if os.path.isdir(wd / p) else 0o644) for p, m in modes.items()), \
        {p: oct(m) for p, m in modes.items() if m not in (0o644, 0o755)}
    assert {"config.json", "final_metrics.json", "log.txt", "curves.png", "checkpoints/6/state/_METADATA"} <= \
        set(modes)


def test_atomic_writes_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        storage.write_text(str(tmp_path / "a.json"), "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.json").st_mode) == 0o640


def test_rerunning_a_finished_run_restores_nothing_and_leaves_the_lock_alone(tmp_path, monkeypatch):
    cfg = tiny_config(total_steps=2, checkpoint_every_steps=2, eval_every_steps=0)
    _, last = trainer.train_and_evaluate(cfg, str(tmp_path))
    lock_mtime = os.stat(tmp_path / "lock").st_mtime_ns
    log = (tmp_path / "log.txt").read_text()

    def refuse(*a, **k):
        raise AssertionError("a finished run must not restore its checkpoint")

    monkeypatch.setattr(checkpoint.Checkpointer, "restore_latest", refuse)
    state, again = trainer.train_and_evaluate(cfg, str(tmp_path))
    assert state is None and again["eval/accuracy"] == last["eval/accuracy"] and again["goodput"] == last["goodput"]
    assert os.stat(tmp_path / "lock").st_mtime_ns == lock_mtime and (tmp_path / "log.txt").read_text() == log


def test_a_run_without_checkpoints_creates_no_checkpoint_folder(tmp_path):
    trainer.train_and_evaluate(tiny_config(total_steps=1, save_checkpoints=False, eval_every_steps=0,
                                           **{"optim.warmup_steps": 0}), str(tmp_path))
    assert "checkpoints" not in os.listdir(tmp_path) and (tmp_path / "final_metrics.json").exists()


def test_compilation_cache_is_written_then_hit(tmp_path):
    cache = tmp_path / "cache"
    cfg = tiny_config(total_steps=1, save_checkpoints=False, eval_every_steps=0, compilation_cache_dir=str(cache),
                      **{"optim.warmup_steps": 0})
    try:
        assert trainer.configure_compilation_cache(str(cache)) == str(cache)
        trainer.train_and_evaluate(cfg, str(tmp_path / "a"))
        written = set(os.listdir(cache))
        assert len(written) >= 3, written  # init, train step, eval step: small CPU programs are cached too
        hits = trainer.CACHE_EVENTS["/jax/compilation_cache/cache_hits"]
        trainer.train_and_evaluate(cfg, str(tmp_path / "b"))  # the same programs, traced anew: loaded, not compiled
        assert trainer.CACHE_EVENTS["/jax/compilation_cache/cache_hits"] - hits >= 3
        assert set(os.listdir(cache)) == written
    finally:
        trainer.configure_compilation_cache("auto")  # back to the environment's setting ("" here: off)
    assert trainer.configure_compilation_cache("") is None
    assert trainer.default_compilation_cache_dir().endswith(os.path.join(".cache", "vit_jax_struct",
                                                                         "jax_compilation_cache"))


class _FailedWrite:
    """A commit future of Orbax's background save whose write fails as a full disk does (ENOSPC)."""

    def result(self, timeout=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def cancel(self):
        pass


@pytest.mark.parametrize("noticed", [True, False], ids=["noticed_at_next_step", "noticed_by_the_next_save"])
def test_a_failed_background_save_stops_the_run_naming_its_step_and_the_last_good_checkpoint_resumes(
        tmp_path, monkeypatch, caplog, noticed):
    """Disk full during the background save of step 4 (its array write fails inside Orbax's save thread, the step's
    temporary folder is left behind). Noticed at the next step, the run stops at step 5 (or, if the failure is not
    known yet, at the save of step 6 at the latest) naming step 4, the partial folder is moved aside, log.txt ends
    with the one error line, and the same run resumes from checkpoint 2."""
    original_async_save = ocp.StandardCheckpointHandler.async_save

    async def async_save(self, directory, *a, **k):
        futures = list(await original_async_save(self, directory, *a, **k) or [])
        if os.path.basename(os.path.dirname(str(directory))).startswith("4."):
            futures.append(_FailedWrite())
        return futures

    monkeypatch.setattr(ocp.StandardCheckpointHandler, "async_save", async_save)
    original_check = checkpoint.Checkpointer.check

    def check(self, step=None):
        if noticed and step == 5:  # the failed save has ended before step 5 is checked
            while self.manager.is_saving_in_progress():
                time.sleep(0.01)
        elif not noticed:  # a check never sees it in time: the next save waits for it and reports it
            return None
        return original_check(self, step)

    monkeypatch.setattr(checkpoint.Checkpointer, "check", check)
    wd = tmp_path / "w"
    cfg = tiny_config(total_steps=10, checkpoint_every_steps=2, eval_every_steps=0)
    with pytest.raises(checkpoint.CheckpointError) as err:
        trainer.train_and_evaluate(cfg, str(wd))
    text = str(err.value)
    broken = os.listdir(wd / "checkpoints.broken")
    assert len(broken) == 1 and broken[0].startswith("4-"), broken
    assert text == (f"saving checkpoint step 4 ({wd}/checkpoints/4) failed: No space left on device; its partial "
                    f"folder was moved to {wd}/checkpoints.broken/{broken[0]}; the last complete checkpoint is step 2: "
                    "rerun the same command to resume from it once the fault is fixed"
                    + ("; the run stopped at step 5" if noticed else ""))
    last = 4 if noticed else 6  # step 5's check stops it before its record; step 6's save after its record
    assert [r["step"] for r in metrics.read_metrics(str(wd)) if "train/loss" in r] == list(range(1, last + 1))
    assert sorted(os.listdir(wd / "checkpoints")) == ["2"] and (wd / "checkpoints/2/commit_success.txt").exists()
    log = (wd / "log.txt").read_text().splitlines()
    assert log[-1] == f"error: CheckpointError: {text}"
    assert log[-2].startswith("library errors held back from stderr: ") and "No space left on device" in log[-2]
    assert not any(line.startswith("Traceback") for line in log)
    monkeypatch.undo()
    with caplog.at_level(logging.INFO):
        trainer.train_and_evaluate(cfg, str(wd))  # space is back: the same run resumes from step 2 and finishes
    assert f"resuming from checkpoint {wd}/checkpoints/2 (step 2 of 10)" in caplog.text
    assert [r["step"] for r in metrics.read_metrics(str(wd)) if "train/loss" in r] == list(range(1, 11))
    assert sorted(os.listdir(wd / "checkpoints"), key=int)[-1] == "10"


def test_when_log_txt_fills_with_the_failed_save_the_save_is_the_error_and_log_calls_never_raise(
        tmp_path, monkeypatch, capfd):
    """The disk that fails the background save of step 4 fails log.txt too (CI saw the final `error:` line's own
    write to log.txt replace the checkpoint error). The run still stops with the `CheckpointError` naming step 4,
    stderr says once, in one `warning:` line, that log.txt cannot be written (no logging traceback)."""
    original_async_save = ocp.StandardCheckpointHandler.async_save
    full = []

    async def async_save(self, directory, *a, **k):
        futures = list(await original_async_save(self, directory, *a, **k) or [])
        if os.path.basename(os.path.dirname(str(directory))).startswith("4."):
            futures.append(_FailedWrite())
            full.append(True)
        return futures

    original_append = storage.append_line

    def append_line(f, p, line):
        if full and str(p).endswith("log.txt"):
            raise storage.StorageError(f"cannot write {p}: [Errno 28] No space left on device")
        return original_append(f, p, line)

    monkeypatch.setattr(ocp.StandardCheckpointHandler, "async_save", async_save)
    monkeypatch.setattr(storage, "append_line", append_line)
    wd = tmp_path / "w"
    with pytest.raises(checkpoint.CheckpointError) as err:
        trainer.train_and_evaluate(tiny_config(total_steps=10, checkpoint_every_steps=2, eval_every_steps=0), str(wd))
    assert str(err.value).startswith(f"saving checkpoint step 4 ({wd}/checkpoints/4) failed: No space left on device")
    stderr = capfd.readouterr().err
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: StorageError: cannot write {wd}/log.txt: [Errno 28] No space left on device; "
                        "later lines are not written to it"], warnings
    assert "Logging error" not in stderr and "Traceback" not in stderr
    assert "error:" not in (wd / "log.txt").read_text()  # the final line could not be written: nothing half-written


def test_library_errors_are_counted_once_per_message_whatever_the_names_and_numbers():
    from vit_jax_struct.train import runlog

    d = runlog.LibraryErrors()
    first = [d.add(f'[process=0][thread=t{i}] Error writing "params.block_{i}.kernel" at file {i}: No space left')
             for i in range(40)]
    assert first == [True] + [False] * 39
    assert d.add("RuntimeError: Event loop is closed") and not d.add("RuntimeError: Event loop is closed")
    summary = d.summary()
    assert summary.startswith("library errors held back from stderr: 42 records, 2 distinct: 40x [process=0]"
                              "[thread=t0] Error writing \"params.block_0.kernel\" at file 0: No space left | "
                              "2x RuntimeError: Event loop is closed"), summary


def test_nan_before_any_checkpoint_says_there_is_none(tmp_path):
    cfg = tiny_config(total_steps=6, checkpoint_every_steps=0, log_every_steps=3,
                      **{"optim.lr": 1e30, "optim.warmup_steps": 0, "optim.grad_clip_norm": 0.0})
    with pytest.raises(FloatingPointError) as err:
        trainer.train_and_evaluate(cfg, str(tmp_path))
    assert "between steps 1 and 3; no checkpoint was written before it" in str(err.value)
    assert "None" not in str(err.value)


@pytest.mark.parametrize("content", [b"", b"<html>not found</html>"], ids=["empty", "html"])
def test_a_local_file_that_is_no_npz_says_so(tmp_path, content):
    p = tmp_path / "ViT-B_16.npz"
    p.write_bytes(content)
    with pytest.raises(ValueError) as err:
        official.read_npz(str(p))
    assert str(err.value).startswith(f"checkpoint '{p}' is not an .npz archive (" +
                                     ("an empty file, 0 bytes)" if not content else "22 bytes: "))
    assert "gsutil" not in str(err.value)


def test_every_checkpoint_corrupt_is_one_short_line(tmp_path, caplog):
    cfg = tiny_config(total_steps=4, checkpoint_every_steps=2, eval_every_steps=0)
    trainer.train_and_evaluate(cfg, str(tmp_path))
    (tmp_path / "final_metrics.json").unlink()
    for step in ("2", "4"):  # the array data, not the JSON metadata: TensorStore fails with its whole spec
        for d, _, files in os.walk(tmp_path / "checkpoints" / step / "state"):
            for f in files:
                if "/d/" in os.path.join(d, f) + "/" or f.endswith(".ocdbt"):
                    with open(os.path.join(d, f), "wb") as fh:
                        fh.write(b"garbage")
    with caplog.at_level(logging.WARNING), pytest.raises(checkpoint.CheckpointError) as err:
        trainer.train_and_evaluate(cfg, str(tmp_path))
    text = str(err.value)
    assert text.startswith(f"no checkpoint in {tmp_path}/checkpoints restores (tried 2: step 4: ") and \
        "Not starting from scratch" in text
    assert "\n" not in text and len(text) < 1200 and '"driver"' not in text, text
    skips = [r.getMessage() for r in caplog.records if "skipping it" in r.getMessage()]
    assert len(skips) == 2 and all(len(s) < 500 and "\n" not in s and '"driver"' not in s for s in skips), skips


def test_cli_usage_errors_are_one_line_exit_2_and_write_nothing(tmp_path):
    wd = tmp_path / "w"
    cases = {
        "--config=configs/nonexistent.py":
            "error: cannot load --config=configs/nonexistent.py: [Errno 2] No such file or directory: "
            "'configs/nonexistent.py'",
        "--config.modle.classifier=gap":
            'error: unknown config key --config.modle.classifier: Did you mean "model" instead of "modle"?',
        "--config.profile.num_steps=-1": "error: config.profile.num_steps -1 must be ≥ 0",
        # no field close enough for a suggestion: ml_collections' text is the bare quoted key
        "--config.model.qqqq=1": "error: unknown config key --config.model.qqqq: this config has no such field",
    }
    for flag, expected in cases.items():
        args = [flag, f"--workdir={wd}"] if flag.startswith("--config=") else [
            "--config=configs/default.py", flag, f"--workdir={wd}"]
        rc, err = _main(*args)
        assert rc == 2 and _error_lines(err) == [expected + "  (--traceback for the full trace)"], err[-2000:]
        assert "Traceback" not in err and not wd.exists()


def _read_only(path) -> bool:
    """Makes folder `path` read-only for this process; False if that is impossible here (root ignores modes and
    needs a read-only bind mount, which a container may not allow)."""
    os.chmod(path, 0o555)
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, check=False)
        if r.returncode or subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True,
                                          check=False).returncode:
            return False
    return True


def test_cli_unwritable_workdir_is_one_line_exit_1(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if not _read_only(ro):  # no read-only folder to be had: a workdir below a regular file cannot be written either
        (tmp_path / "file").write_text("")
        rc, err = _main(*TINY, "--config.total_steps=1", f"--workdir={tmp_path}/file/w")
        assert rc == 1 and _error_lines(err) == [
            f"error: StorageError: cannot create the folder {tmp_path}/file/w: {tmp_path}/file is a file, not a "
            f"folder  (--traceback for the full trace)"], err[-2000:]
        assert "Traceback" not in err
        return
    try:
        rc, err = _main(*TINY, "--config.total_steps=1", f"--workdir={ro}")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(ro)], check=False)
    assert rc == 1 and _error_lines(err) == [
        f"error: StorageError: cannot create the workdir lock {ro}/lock: Read-only file system (the workdir must "
        "be writable)  (--traceback for the full trace)" if os.geteuid() == 0 else
        f"error: StorageError: cannot create the workdir lock {ro}/lock: Permission denied (the workdir must be "
        "writable)  (--traceback for the full trace)"], err[-2000:]
    assert "Traceback" not in err


def test_cli_bad_image_found_mid_run_is_a_run_error_exit_1_and_in_the_log(tmp_path):
    root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=4, size=8)
    with open(os.path.join(root, "train", "b", "3.jpg"), "wb") as f:
        f.write(b"not an image")
    wd = tmp_path / "w"
    rc, err = _main(*TINY, "--config.total_steps=4", "--config.batch_size=4", "--config.data.source=folder",
                    f"--config.data.root={root}", "--config.data.num_classes=0", "--config.data.num_threads=1",
                    "--config.data.eval_examples=0", "--config.checkpoint_every_steps=0", f"--workdir={wd}")
    lines = _error_lines(err)
    assert rc == 1 and len(lines) == 1 and "cannot decode image file" in lines[0] and "b/3.jpg" in lines[0], \
        err[-3000:]
    assert "Traceback" not in err
    assert (wd / "log.txt").read_text().splitlines()[-1] == lines[0].split("  (--traceback")[0]


def test_cli_ctrl_c_saves_a_checkpoint_at_the_next_step_and_exits_130(tmp_path):
    wd = tmp_path / "w"
    args = [sys.executable, "main.py", *TINY, "--config.total_steps=100000", "--config.log_every_steps=5",
            "--config.checkpoint_every_steps=0", f"--workdir={wd}"]
    p = subprocess.Popen(args, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while p.poll() is None and time.time() < deadline and not (
            (wd / "metrics.jsonl").exists() and (wd / "metrics.jsonl").read_text().count("\n") >= 2):
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130, err[-3000:]
    assert "received SIGINT (Ctrl-C; press again to stop at once)" in err and "Traceback" not in err
    saved = [int(s) for s in os.listdir(wd / "checkpoints")]
    assert len(saved) == 1 and (wd / "checkpoints" / str(saved[0]) / "commit_success.txt").exists()
    assert f"interrupted: saved checkpoint at step {saved[0]} of 100000" in err


def test_a_second_ctrl_c_stops_at_once():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background shell starts us with SIG_IGN
    stops = trainer._StopSignals()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert stops.signum == signal.SIGINT and stops.reached(1)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs here
    finally:
        stops.close()
        restored = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, before)
    assert restored is signal.default_int_handler  # the handler in force before, put back


def test_posemb_resize_logs_only_when_the_grid_changes(caplog):
    posemb = np.random.default_rng(0).normal(size=(1, 1 + 16, 4)).astype(np.float32)
    with caplog.at_level(logging.INFO):
        same = official.resize_posemb(posemb, (4, 4), num_prefix=1)
        assert "posemb: resampled" not in caplog.text
        official.resize_posemb(posemb, (2, 2), num_prefix=1)
    np.testing.assert_array_equal(same, posemb)
    assert "posemb: resampled grid 4x4 -> 2x2" in caplog.text


def test_time_account_adds_up():
    acct = timing.TimeAccount(start=time.time() - 2.0)  # two seconds of start-up
    acct.add("restore", 0.5)
    acct.start_loop()
    with acct.measure("data_wait"):
        pass
    interval = acct.interval()
    assert interval["time/startup"] == pytest.approx(1.5, abs=0.05) and interval["time/restore"] == 0.5
    assert interval["time/train_step"] == pytest.approx(0.0, abs=0.05)
    s = acct.summary()
    assert sum(s[f"time/{c}"] for c in timing.CATEGORIES) == pytest.approx(s["time/wall"], abs=0.05)
    assert s["goodput"] == pytest.approx(s["time/train_step"] / s["time/wall"])
    assert timing.format_summary(s).startswith("wall 2.")
    with pytest.raises(KeyError, match="not one of"):
        acct.add("lunch", 1.0)


def test_quiet_libraries_drops_orbax_chatter_and_its_expected_read_only_warnings_only():
    import logging as logging_std

    from vit_jax_struct.train import runlog

    def record(level, path, msg, *args):
        return logging_std.LogRecord("x", level, path, 1, msg, args, None)

    orbax = "/site-packages/orbax/checkpoint/checkpoint_manager.py"
    keep = runlog.QuietLibraries().filter
    assert not keep(record(logging_std.INFO, orbax, "saving step 3"))
    assert not keep(record(logging_std.WARNING, orbax, "Given directory is read only=%s", "/w/checkpoints"))
    read_only = "CheckpointManagerOptions.read_only=True, setting create=False."
    assert not keep(record(logging_std.WARNING, orbax, read_only))
    assert keep(record(logging_std.WARNING, orbax, "save of step 3 failed"))
    assert keep(record(logging_std.INFO, "/repo/vit_jax_struct/train/trainer.py", "step 3"))
