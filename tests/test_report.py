"""Scoreboard: knobs read from workdirs, catalog comparisons and verdicts."""

import json
import os

import numpy as np
import pytest

from vit_jax_struct import report


def _run(root, name, acc, seed=0, steps=100, model=None, **data_model):
    d = os.path.join(root, name)
    os.makedirs(d)
    model = model or {"name": "vit", "variant": "Ti/8", "attention": "standard", "classifier": "token",
                      "skip_ablation": ""}
    data = {"permute_patches": False, "train_fraction": 0.0}
    for k, v in data_model.items():
        (data if k in data else model)[k] = v
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"seed": seed, "model": model, "data": data}, f)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": steps // 2, "eval/accuracy": 0.1}) + "\n")
        f.write(json.dumps({"step": steps, "eval/accuracy": acc, "eval/loss": 1.0}) + "\n")


def test_scoreboard_compares_arms_and_writes_tables(tmp_path):
    root = str(tmp_path / "runs")
    _run(root, "base0", 0.60, seed=0)
    _run(root, "base1", 0.62, seed=1)
    _run(root, "perm0", 0.605, permute_patches=True)
    _run(root, "pos0", 0.50, attention="positional")
    _run(root, "skip0", 0.55, skip_ablation="3:both")
    _run(root, "frac0", 0.40, train_fraction=0.1)
    _run(root, "frac3", 0.605, train_fraction=0.3)  # -0.5 points: within the noise band
    _run(root, "other_budget", 0.9, steps=999, attention="positional")  # no baseline with 999 steps
    cnn = {"name": "resnet", "depth": 18}
    _run(root, "rn", 0.7, model=dict(cnn))
    _run(root, "rn_perm", 0.5, model=dict(cnn), permute_patches=True)
    _run(root, "rn1", 0.72, seed=1, model=dict(cnn))
    _run(root, "rn_perm1", 0.46, seed=1, model=dict(cnn), permute_patches=True)
    runs = report.find_runs([root])
    assert len(runs) == 12 and {r["model"] for r in runs} == {"ViT-Ti/8", "ResNet-18"}
    rows = {r["comparison"]: r for r in report.compare(runs)}
    j2 = rows["permuted vs original patches (ViT)"]
    assert j2["baseline"] == pytest.approx(0.61) and j2["n_baseline"] == 2
    # Seed spread: only the baseline has two seeds, s = sd(0.60, 0.62) = 1.414 points; 2·s = 2.83 > |−0.5|.
    assert j2["spread_points"] == pytest.approx(100 * np.std([0.60, 0.62], ddof=1))
    assert j2["delta_points"] == pytest.approx(-0.5) and j2["verdict"] == "no effect beyond seed noise (as the paper)"
    assert rows["positional vs standard attention (ViT)"]["verdict"].startswith("differs (-11.0 points")
    assert rows["positional vs standard attention (ViT)"]["delta_points"] == pytest.approx(-11.0)
    assert rows["positional vs standard attention (ViT)"]["n_treatment"] == 1
    j3 = rows["permuted vs original patches (CNN)"]
    # Pooled over both arms: variances of (0.70, 0.72) and (0.50, 0.46), one degree of freedom each.
    pooled = np.sqrt((np.var([0.70, 0.72], ddof=1) + np.var([0.50, 0.46], ddof=1)) / 2)
    assert j3["spread_points"] == pytest.approx(100 * pooled)
    assert j3["delta_points"] == pytest.approx(-23.0) and j3["verdict"] == "same direction"
    assert rows["skip connections removed in a middle block (ViT) [skip 3:both]"]["delta_points"] == \
        pytest.approx(-6.0)
    assert rows["train_fraction < 1 vs all data (ViT) [fraction 0.1]"]["verdict"] == "same direction"
    assert rows["train_fraction < 1 vs all data (ViT) [fraction 0.3]"]["verdict"] == "no effect beyond seed noise"
    md, csv_path = report.write(runs, list(rows.values()), str(tmp_path / "out"), "python launch/sweep.py …")
    with open(md) as f:
        text = f.read()
    assert "| J3 |" in text and "python launch/sweep.py" in text
    with open(csv_path) as f:
        assert f.read().count("\n") == 13
    assert report.main(["--runs", root, "--out", str(tmp_path / "out2"), "--no-curves"]) == 0


def test_each_cnn_model_gets_its_own_comparison(tmp_path):
    root = str(tmp_path)
    for model, accs in (({"name": "resnet", "depth": 18, "width": 16}, (0.40, 0.35)),
                        ({"name": "vgg", "width": 16}, (0.50, 0.30))):
        for seed in (0, 1):
            _run(root, f"{model['name']}{seed}", accs[0] + seed / 100, seed=seed, model=dict(model))
            _run(root, f"{model['name']}_perm{seed}", accs[1], seed=seed, model=dict(model), permute_patches=True)
    rows = {r["comparison"]: r for r in report.compare(report.find_runs([root]))}
    assert sorted(rows) == ["permuted vs original patches (CNN) [ResNet-18 (width 16)]",
                            "permuted vs original patches (CNN) [VGG-19 (width 16)]"]
    vgg = rows["permuted vs original patches (CNN) [VGG-19 (width 16)]"]
    assert vgg["delta_points"] == pytest.approx(-20.5) and vgg["n_baseline"] == 2 and vgg["models"] == \
        "VGG-19 (width 16)"


def test_verdict_rule_needs_two_seeds_and_twice_the_spread():
    assert report.seed_spread([0.5], [0.4]) is None
    assert report.verdict(-10.0, None, "negative") == "not judged (one seed per arm)"
    assert report.verdict(-3.0, 1.4, "negative") == "same direction"
    assert report.verdict(+3.0, 1.4, "negative") == "opposite direction"
    assert report.verdict(-2.8, 1.4, "negative") == "no effect beyond seed noise"
    assert report.verdict(2.8, 1.4, "small") == "no effect beyond seed noise (as the paper)"


def _curve_run(root, name, seed=0, **model_kw):
    """A workdir whose metrics.jsonl has train loss, eval accuracy and few-shot accuracy at several steps."""
    d = os.path.join(root, name)
    os.makedirs(d)
    model = {"name": "vit", "variant": "Ti/8", "attention": "standard", "classifier": "token", "skip_ablation": "",
             **model_kw}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"seed": seed, "model": model, "data": {"permute_patches": False, "train_fraction": 0.0}}, f)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for step in (10, 20, 30, 40):
            f.write(json.dumps({"step": step, "train/loss": 2.3 - step / 40}) + "\n")
            if step % 20 == 0:
                f.write(json.dumps({"step": step, "eval/accuracy": step / 100, "eval/loss": 2.0,
                                    "fewshot/cifar10_1shot": step / 200, "fewshot/cifar10_10shot": step / 150}) + "\n")


def test_report_writes_training_curve_pngs(tmp_path):
    from vit_jax_struct.analysis import plots
    from vit_jax_struct.train import metrics

    root = str(tmp_path / "runs")
    _curve_run(root, "base0")
    _curve_run(root, "gap0", classifier="gap")
    recs = metrics.read_metrics(os.path.join(root, "base0"))
    assert plots.fewshot_keys(recs) == ["fewshot/cifar10_1shot", "fewshot/cifar10_10shot"]
    steps, acc = plots._series(recs, "fewshot/cifar10_10shot")
    assert steps.tolist() == [20, 40] and acc.tolist() == pytest.approx([20 / 150, 40 / 150])
    out = str(tmp_path / "out")
    assert report.main(["--runs", root, "--out", out]) == 0
    files = sorted(os.listdir(os.path.join(out, "curves")))
    assert files == ["R5_GAP_vs_CLS_classifier_ViT.png", "base0.png", "gap0.png"]
    for f in files:
        with open(os.path.join(out, "curves", f), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(os.path.join(out, "curves", "base0.png"))
    assert img.shape[1] > 1000 and img[..., :3].std() > 0.05  # three panels drawn, not a blank canvas
    with open(os.path.join(out, "scoreboard.md")) as f:
        assert "(curves/R5_GAP_vs_CLS_classifier_ViT.png)" in f.read()
    with pytest.raises(ValueError, match="at least one run"):
        plots.training_curves({}, os.path.join(out, "x.png"), "empty")


def test_data_size_rows_apply_the_verdict_rule_to_each_measure():
    def seed(dist, shot, cka):
        return {"early_mean_distance_px": dist, "fewshot": {"digits_10shot": shot},
                "cka_to_reference": None if cka is None else {"stem": 0.99, "block00": cka}}

    summary = {"fractions": [
        {"fraction": 0.1, "seeds": [seed(15.0, 0.70, 0.60), seed(15.2, 0.72, 0.62)]},
        {"fraction": 1.0, "seeds": [seed(14.0, 0.80, 0.75), seed(14.2, 0.82, None)]}]}
    rows = {r["id"]: r for r in report.datasize_rows(summary)}
    # R2: +1.0 px against 2·s = 2 · 0.141 px: the paper's direction (less data, more global early attention).
    assert rows["R2"]["delta"] == pytest.approx(1.0) and rows["R2"]["verdict"] == "same direction"
    assert rows["R6"]["delta"] == pytest.approx(-10.0) and rows["R6"]["verdict"] == "same direction"
    # R7 reads the last layer; the full-data pair is counted once (one value), the spread comes from the subset.
    assert rows["R7"]["baseline"] == [75.0] and rows["R7"]["delta"] == pytest.approx(-14.0)
    assert rows["R7"]["spread"] == pytest.approx(100 * np.std([0.60, 0.62], ddof=1))
    assert report.datasize_rows({"fractions": summary["fractions"][:1]}) == []  # no full-data arm
