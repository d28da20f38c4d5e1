"""Scoreboard: knobs read from workdirs, catalog comparisons and verdicts."""

import json
import os

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
    runs = report.find_runs([root])
    assert len(runs) == 10 and {r["model"] for r in runs} == {"ViT-Ti/8", "ResNet-18"}
    rows = {r["comparison"]: r for r in report.compare(runs)}
    j2 = rows["permuted vs original patches (ViT)"]
    assert j2["baseline"] == pytest.approx(0.61) and j2["n_baseline"] == 2
    assert j2["delta_points"] == pytest.approx(-0.5) and j2["verdict"].startswith("same")
    assert rows["positional vs standard attention (ViT)"]["delta_points"] == pytest.approx(-11.0)
    assert rows["positional vs standard attention (ViT)"]["n_treatment"] == 1
    assert rows["permuted vs original patches (CNN)"]["verdict"] == "same direction"
    assert rows["skip connections removed in a middle block (ViT) [skip 3:both]"]["delta_points"] == \
        pytest.approx(-6.0)
    assert rows["train_fraction < 1 vs all data (ViT) [fraction 0.1]"]["verdict"] == "same direction"
    assert rows["train_fraction < 1 vs all data (ViT) [fraction 0.3]"]["verdict"].startswith("no clear effect")
    md, csv_path = report.write(runs, list(rows.values()), str(tmp_path / "out"), "python launch/sweep.py …")
    with open(md) as f:
        text = f.read()
    assert "| J3 |" in text and "python launch/sweep.py" in text
    with open(csv_path) as f:
        assert f.read().count("\n") == 11
    assert report.main(["--runs", root, "--out", str(tmp_path / "out2")]) == 0
