"""`main.py --mode=predict`: a trained run's top-k on image files, checked against its own eval step; bad input."""

import csv
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from tests.conftest import tiny_config
from vit_jax_struct import predict
from vit_jax_struct.data import sources
from vit_jax_struct.train import checkpoint, trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": ""}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny digits run (30 steps) and its eval split written as PNG files, one folder per class."""
    tmp = tmp_path_factory.mktemp("predict")
    cfg = tiny_config(total_steps=30, checkpoint_every_steps=30, eval_every_steps=30, log_every_steps=30)
    cfg.data.eval_examples = 0
    trainer.train_and_evaluate(cfg, str(tmp / "run"))
    src = sources.get_source(cfg.data, cfg.data.eval_split)
    for i in range(len(src)):
        ex = src[i]
        os.makedirs(tmp / "images" / src.class_names[ex["label"]], exist_ok=True)
        Image.fromarray(ex["image"]).save(tmp / "images" / src.class_names[ex["label"]] / f"{i:04d}.png")
    return cfg, tmp, src


def _eval_logits(cfg, workdir, src):
    """The run's own eval path: its eval preprocessing and the eval step's forward pass, on the eval split."""
    parts = trainer.build(cfg)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True)
    state = ckpt.restore(ckpt.latest_step(), parts["abstract_state"])
    ckpt.close()
    images = np.stack([parts["eval_pp"](src[i])["image"] for i in range(len(src))])
    from vit_jax_struct.data import preprocess

    x = preprocess.to_value_range(images, cfg.pp.value_range)
    logits, _ = parts["model"].apply(trainer.model_variables(state), x, train=False)
    return np.asarray(logits)


def test_predictions_are_the_eval_steps_argmax_and_agree_with_the_runs_eval_accuracy(trained, tmp_path):
    cfg, tmp, src = trained
    out = tmp_path / "pred.csv"
    rows = predict.run_from_flags(str(tmp / "run"), None, [str(tmp / "images")], 3, str(out), 64)
    assert len(rows) == len(src) == 360
    index = {str(tmp / "images" / src.class_names[src[i]["label"]] / f"{i:04d}.png"): i for i in range(len(src))}
    logits = _eval_logits(cfg, str(tmp / "run"), src)
    top1 = np.array([t[0][0] for _, t in rows])
    order = np.array([index[p] for p, _ in rows])
    np.testing.assert_array_equal(top1, logits[order].argmax(-1))
    labels = np.array([src[i]["label"] for i in order])
    final = json.loads((tmp / "run" / "final_metrics.json").read_text())
    assert np.mean(top1 == labels) == pytest.approx(final["eval/accuracy"], abs=1e-6)
    with open(out, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["path", "class_1", "probability_1", "class_2", "probability_2", "class_3", "probability_3"]
    assert len(table) == 361 and [r[0] for r in table[1:]] == [p for p, _ in rows]
    probs = np.array([[float(r[2]), float(r[4]), float(r[6])] for r in table[1:]])
    assert np.all(np.diff(probs, axis=1) <= 0) and np.all(probs.sum(1) <= 1 + 1e-5)
    assert [r[1] for r in table[1:]] == [src.class_names[k] for k in top1]


def test_json_output_and_globs(trained, tmp_path):
    _, tmp, _ = trained
    out = tmp_path / "p.json"
    predict.run_from_flags(str(tmp / "run"), None, [str(tmp / "images" / "3" / "*.png")], 2, str(out), 16)
    data = json.loads(out.read_text())
    assert len(data) == len(os.listdir(tmp / "images" / "3")) and len(data[0]["top"]) == 2
    assert set(data[0]["top"][0]) == {"class", "label", "probability"}


def test_a_bad_image_and_a_workdir_without_checkpoint_are_one_line_and_write_nothing(trained, tmp_path):
    _, tmp, _ = trained
    bad = tmp_path / "imgs"
    bad.mkdir()
    for i in range(3):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(bad / f"{i}.png")
    (bad / "1.png").write_bytes(b"not a png")
    out = tmp_path / "p.csv"
    cases = [([f"--workdir={tmp / 'run'}", f"--images={bad}"], f"{bad}/1.png"),
             ([f"--workdir={tmp_path / 'empty'}", f"--images={bad}"], "no checkpoint in"),
             ([f"--workdir={tmp / 'run'}", f"--images={tmp_path / 'nothing'}"], "does not exist")]
    for args, message in cases:
        r = subprocess.run([sys.executable, "main.py", "--mode=predict", *args, f"--out={out}"], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=300, check=False)
        lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
        assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr[-2000:]
        assert not [line for line in r.stderr.splitlines() if not line[:1] in "IWE" and "error:" not in line], \
            r.stderr[-2000:]
        assert not out.exists() and not [f for f in os.listdir(tmp_path) if f.startswith("p.csv")]


def test_a_checkpoint_given_as_init_from_predicts_as_its_run_and_imagenet_has_its_class_names(trained):
    cfg, tmp, src = trained
    files = predict.find_images([str(tmp / "images" / "7")])
    by_run = list(predict.predict(predict.load(str(tmp / "run")), files, top=2, batch=32))
    c = cfg.copy_and_resolve_references()
    c.init_from = str(tmp / "run")
    by_file = list(predict.predict(predict.load(None, c), files, top=2, batch=32))
    assert [t for _, t in by_run] == [t for _, t in by_file]
    names = predict.imagenet_class_names()
    assert len(names) == 1000 and names[0] == "tench" and names[1] == "goldfish" and names[999] == "toilet tissue"


def test_a_published_npz_predicts_timms_probabilities_on_the_fixture_images():
    """The random tiny ViT of tests/fixtures (vit_jax .npz layout) and the logits timm computed from it: predict's
    probabilities are their softmax, in timm's order (the same preprocessing: 64 px, no crop, (-1, 1))."""
    fixtures = os.path.join(ROOT, "tests", "fixtures")
    with open(os.path.join(fixtures, "reference_logits.json")) as f:
        ref = json.load(f)
    v = ref["vit"]
    cfg = tiny_config(**{"model.variant": f"mu/{v['patch']}", "model.width": v["width"], "model.depth": v["depth"],
                         "model.num_heads": v["heads"], "model.mlp_dim": v["mlp"], "data.image_size": 64,
                         "data.num_classes": v["classes"], "pp.eval_crop_fraction": 1.0,
                         "init_from": os.path.join(fixtures, v["file"])})
    files = [os.path.join(fixtures, p) for p in ref["images"]]
    rows = list(predict.predict(predict.load(None, cfg), files, top=10, batch=4))
    logits = np.asarray(v["logits"])
    want = np.exp(logits - logits.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    for (path, top), p in zip(rows, want, strict=True):
        got = np.zeros(10)
        for k, prob in top:
            got[k] = prob
        np.testing.assert_allclose(got, p, atol=1e-4)
        assert top[0][0] == int(p.argmax())
