"""End-to-end training: bitwise resume after SIGTERM, meshes, resharded restores, warm start, bad input."""

import logging
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.conftest import sigterm_after_first_save, tiny_config, write_image_folder
from vit_jax_struct.data import pipeline
from vit_jax_struct.train import checkpoint, metrics, trainer
from vit_jax_struct.train.sharding import path_str, tree_paths

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _losses(workdir):
    return {r["step"]: r["train/loss"] for r in metrics.read_metrics(workdir) if "train/loss" in r}


def _snapshot(folder):
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            if f == "lock":  # the workdir lock is taken (and released) by every run, even one that fails
                continue
            p = os.path.join(d, f)
            out[p] = (os.path.getsize(p), os.path.getmtime(p))
    return out


@pytest.mark.parametrize("device_augment", [True, False])  # input on the device (digits' default); the host path
def test_sigterm_then_rerun_resumes_bitwise(tmp_path, monkeypatch, caplog, device_augment):
    cfg = tiny_config(total_steps=10, checkpoint_every_steps=4, eval_every_steps=5,
                      **{"data.device_augment": device_augment, "pp.flip": True})
    assert trainer.build(cfg)["device_input"] is device_augment
    state_a, last_a = trainer.train_and_evaluate(cfg, str(tmp_path / "a"))

    sent = sigterm_after_first_save(monkeypatch)  # pre-emption notice right after the first checkpoint
    with pytest.raises(trainer.Preempted, match=r"saved checkpoint at step 5 of 10") as stop:
        trainer.train_and_evaluate(cfg, str(tmp_path / "b"))
    monkeypatch.undo()
    assert sent == [4] and stop.value.step == 5  # stopped one step after the SIGTERM, checkpointed there
    assert trainer.Preempted.EXIT_CODE == 143
    assert sorted(os.listdir(tmp_path / "b" / "checkpoints")) == ["4", "5"]

    with caplog.at_level(logging.INFO):
        state_b, last_b = trainer.train_and_evaluate(cfg, str(tmp_path / "b"))
    assert "resuming from checkpoint" in caplog.text and "(step 5 of 10)" in caplog.text
    la, lb = _losses(tmp_path / "a"), _losses(tmp_path / "b")
    assert sorted(la) == list(range(1, 11)) and sorted(lb) == sorted(la)
    assert all(la[s] == lb[s] for s in la), {s: (la[s], lb[s]) for s in la if la[s] != lb[s]}
    assert checkpoint.params_equal(state_a["params"], state_b["params"])
    assert last_a["eval/accuracy"] == last_b["eval/accuracy"]


def test_fsdp_mesh_trains_and_init_is_mesh_independent(tmp_path):
    one = tiny_config(batch_size=16)
    eight = tiny_config(batch_size=16, **{"mesh.data": 2, "mesh.fsdp": 4})
    p1 = trainer.build(one)["init_state"](jax.random.key(3))["params"]
    built = trainer.build(eight)
    p8 = built["init_state"](jax.random.key(3))["params"]
    assert checkpoint.params_equal(p1, p8)  # partitionable threefry: same parameters on any mesh
    specs = [leaf.sharding.spec for leaf in jax.tree.leaves(p8)]
    assert any("fsdp" in tuple(s) for s in specs)
    _state1, _ = trainer.train_and_evaluate(one, str(tmp_path / "one"))
    state8, _ = trainer.train_and_evaluate(eight, str(tmp_path / "eight"))
    l1, l8 = _losses(tmp_path / "one"), _losses(tmp_path / "eight")
    np.testing.assert_allclose([l8[s] for s in sorted(l8)], [l1[s] for s in sorted(l1)], rtol=1e-4)
    assert state8["params"]["Transformer"]["encoderblock_0"]["MlpBlock_3"]["Dense_0"]["kernel"].sharding.spec \
        == jax.sharding.PartitionSpec(None, "fsdp")


@pytest.mark.parametrize("write_mesh,read_mesh", [((2, 4), (1, 1)), ((1, 1), (2, 4))])
def test_checkpoint_restores_on_another_device_count(tmp_path, write_mesh, read_mesh):
    mesh = lambda m: {"mesh.data": m[0], "mesh.fsdp": m[1]}
    wcfg = tiny_config(total_steps=2, **mesh(write_mesh))
    state, _ = trainer.train_and_evaluate(wcfg, str(tmp_path))
    rcfg = tiny_config(total_steps=2, **mesh(read_mesh))
    parts = trainer.build(rcfg)
    it = trainer.make_train_iterator(rcfg, parts)  # the digits' input on the device: its state is the step
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
    restored = ckpt.restore(2, parts["abstract_state"], it)
    ckpt.close()
    assert int(restored["step"]) == 2 and it.step == 2
    grain_it = pipeline.train_iterator(parts["train_source"], parts["train_pp"], parts["per_host_batch"], rcfg.seed)
    with pytest.raises(checkpoint.DataStateMismatch, match=r"written by the input on the device.*"
                                                           r"--config.data.device_augment=True"):
        checkpoint.Checkpointer(str(tmp_path / "checkpoints")).restore(2, parts["abstract_state"], grain_it, 0)
    assert checkpoint.params_equal(state["params"], restored["params"])
    assert checkpoint.params_equal(state["opt_state"], restored["opt_state"])
    n_devices = {leaf.sharding.mesh.devices.size for leaf in jax.tree.leaves(restored["params"])}
    assert n_devices == {read_mesh[0] * read_mesh[1]}


def test_checkpoint_of_another_model_size_is_rejected_and_left_intact(tmp_path):
    trainer.train_and_evaluate(tiny_config(total_steps=2), str(tmp_path))
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"first mismatch at 'params/.*': checkpoint shape \(.*32.*\) vs model "
                                         r"shape \(.*48.*\)"):
        trainer.train_and_evaluate(tiny_config(total_steps=4, **{"model.width": 48}), str(tmp_path))
    assert _snapshot(tmp_path) == before


def test_bad_input_fails_before_writing(tmp_path, image_folder):
    wd = tmp_path / "w"
    with pytest.raises(ValueError, match=r"config.batch_size 12 is not divisible by the number of devices 8"):
        trainer.train_and_evaluate(tiny_config(batch_size=12, **{"mesh.data": -1}), str(wd))
    with pytest.raises(FileNotFoundError, match=r"data.root '/no/such/folder' does not exist"):
        trainer.train_and_evaluate(tiny_config(**{"data.source": "folder", "data.root": "/no/such/folder"}), str(wd))
    with pytest.raises(ValueError, match=r"image size 10x10 is not divisible by the patch size 4"):
        trainer.train_and_evaluate(tiny_config(**{"data.image_size": 10}), str(wd))
    with pytest.raises(ValueError, match=r"model.variant 'Q/4' is not one of"):
        trainer.train_and_evaluate(tiny_config(**{"model.variant": "Q/4"}), str(wd))
    os.makedirs(os.path.join(image_folder, "train", "empty"))
    with pytest.raises(ValueError, match=r"class folder '.*empty' has no images"):
        trainer.train_and_evaluate(tiny_config(**{"data.source": "folder", "data.root": image_folder,
                                                  "data.num_classes": 0}), str(wd))
    assert not wd.exists()


def test_corrupt_image_stops_training_naming_the_file(tmp_path):
    root = write_image_folder(tmp_path / "data", classes=("a", "b"), per_class=4, size=8)
    bad = os.path.join(root, "train", "a", "zz_corrupt.jpg")
    with open(bad, "wb") as f:
        f.write(b"not an image")
    cfg = tiny_config(total_steps=4, batch_size=8, **{"data.source": "folder", "data.root": root,
                                                      "data.num_classes": 0})
    with pytest.raises(Exception, match=r"cannot decode image file '.*zz_corrupt.jpg'"):
        trainer.train_and_evaluate(cfg, str(tmp_path / "w"))


def test_nan_loss_stops_with_the_step_range_and_no_nan_checkpoint(tmp_path):
    cfg = tiny_config(total_steps=20, checkpoint_every_steps=1, log_every_steps=5,
                      **{"optim.lr": 1e30, "optim.warmup_steps": 0, "optim.grad_clip_norm": 0.0})
    with pytest.raises(FloatingPointError, match=r"NaN or inf between steps \d+ and \d+; the last good checkpoint"):
        trainer.train_and_evaluate(cfg, str(tmp_path))
    ckpts = [int(s) for s in os.listdir(tmp_path / "checkpoints") if s.isdigit()]
    parts = trainer.build(cfg)
    it = trainer.make_train_iterator(cfg, parts)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
    for s in ckpts:
        st = ckpt.restore(s, parts["abstract_state"], it)
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(st["params"]))
    ckpt.close()


def test_init_from_warm_starts_parameters_only(tmp_path):
    src, _ = trainer.train_and_evaluate(tiny_config(total_steps=3), str(tmp_path / "src"))
    cfg = tiny_config(total_steps=1, init_from=str(tmp_path / "src"),
                      **{"optim.lr": 0.0, "optim.warmup_steps": 0, "optim.schedule": "constant"})
    warm, _ = trainer.train_and_evaluate(cfg, str(tmp_path / "warm"))
    assert checkpoint.params_equal(src["params"], warm["params"])  # lr 0: the loaded parameters, unchanged
    assert int(warm["step"]) == 1
    bad = tiny_config(total_steps=1, init_from=str(tmp_path / "src"), **{"model.depth": 2, "optim.warmup_steps": 0})
    with pytest.raises(ValueError, match=r"first mismatch at 'params/Transformer/encoderblock_1/.*in the model"):
        trainer.train_and_evaluate(bad, str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()  # read before the workdir is touched: no lock, no checkpoints/
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        missing = tiny_config(total_steps=1, init_from=str(tmp_path / "nope"), **{"optim.warmup_steps": 0})
        trainer.train_and_evaluate(missing, str(tmp_path / "b2"))
    assert not (tmp_path / "b2").exists()


def test_a_warm_start_onto_other_classes_reinitialises_the_head_and_says_so(tmp_path, caplog):
    """A 10-class digits run fine-tuned on a 3-class image folder: every parameter but the head is the source's,
    the head keeps its fresh init (`init_reinit`), and one `init:` line names what was re-initialised."""
    src, _ = trainer.train_and_evaluate(tiny_config(total_steps=3), str(tmp_path / "src"))
    root = write_image_folder(tmp_path / "data", size=8)
    over = {"data.source": "folder", "data.root": root, "data.num_classes": 0, "optim.lr": 0.0,
            "optim.warmup_steps": 0, "optim.schedule": "constant", "pp.train_crop": "none"}
    fresh, _ = trainer.train_and_evaluate(tiny_config(total_steps=1, **over), str(tmp_path / "scratch"))
    with caplog.at_level(logging.INFO):
        warm, _ = trainer.train_and_evaluate(tiny_config(total_steps=1, init_from=str(tmp_path / "src"), **over),
                                             str(tmp_path / "warm"))
    flat = lambda t: {path_str(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(t)[0]}
    s, w, f = flat(src["params"]), flat(warm["params"]), flat(fresh["params"])
    assert w["head/kernel"].shape == (32, 3) and s["head/kernel"].shape == (32, 10)
    np.testing.assert_array_equal(w["head/kernel"], f["head/kernel"])  # the same seed's fresh head (lr 0)
    assert all(np.array_equal(w[k], s[k]) for k in w if not k.startswith("head/"))
    line = [r.getMessage() for r in caplog.records if r.getMessage().startswith("init: loaded")]
    assert line == [f"init: loaded {len(w) - 2} parameters from {tmp_path}/src/checkpoints step 3, re-initialised "
                    "['head/bias', 'head/kernel'] (checkpoint shapes [(10,), (32, 10)], model [(3,), (32, 3)])"]


def test_cli_unknown_config_key_fails_with_its_name(tmp_path):
    r = subprocess.run([sys.executable, "main.py", "--config=configs/default.py", "--config.model.widht=3",
                        f"--workdir={tmp_path}/w"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 2 and 'error: unknown config key --config.model.widht: Did you mean "width"' in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "w").exists()


def test_default_workdir_names():
    sys.path.insert(0, ROOT)
    import main

    assert main.default_workdir("configs/vit_l16.py:runlocal") == os.path.join("runs", "vit_l16_runlocal")
    assert main.default_workdir("configs/default.py") == os.path.join("runs", "default")
    assert tree_paths({"a": {"b": 1}}) == ["a/b"]
