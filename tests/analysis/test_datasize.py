"""Data-size study (R2/R6/R7): run discovery, CKA references, local-head shares and the page, on written workdirs."""

import json
import os

import numpy as np
import pytest

from vit_jax_struct.experiments import datasize

LAYERS = ["stem", "block00", "block01", "block02", "block03", "block04", "block05"]


def _run(root, name, fraction, seed, distances, cka_diag=None, other=None, steps=4000, **model):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "analysis"))
    cfg = {"seed": seed, "total_steps": steps,
           "model": {"name": "vit", "variant": "Ti/8", "classifier": "token", "attention": "standard",
                     "skip_ablation": "", **model},
           "data": {"train_fraction": fraction, "permute_patches": False, "image_size": 32}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "final_metrics.json"), "w") as f:
        json.dump({"step": steps, "eval/accuracy": 0.5 + fraction / 10, "fewshot/digits_10shot": 0.6 + seed / 100},
                  f)
    a = {"step": steps, "examples": 64,
         "attention_distance_pixels": {f"block{i:02d}": h for i, h in enumerate(distances)}}
    if cka_diag is not None:
        m = np.full((7, 7), 0.1)
        np.fill_diagonal(m, cka_diag)
        a["cka_across"] = {"other": other, "layers": LAYERS, "other_layers": LAYERS, "matrix": m.tolist()}
    with open(os.path.join(d, "analysis", "analysis.json"), "w") as f:
        json.dump(a, f)
    return d


def test_data_size_study_finds_runs_pairs_references_and_counts_local_heads(tmp_path):
    root = str(tmp_path)
    far = [[16.0] * 4] * 6
    # Two of the 8 heads of blocks 0–1 (the first third of 6 blocks) lie below 0.75 × 16 = 12 px.
    near = [[4.0, 16.0, 16.0, 16.0], [11.9, 12.0, 16.0, 16.0]] + [[16.0] * 4] * 4
    full0 = _run(root, "full0", 0.0, 0, near, [0.99, 0.98, 0.97, 0.9, 0.8, 0.7, 0.6],
                 other=os.path.join(root, "full1"))
    full1 = _run(root, "full1", 0.0, 1, near, [0.99] * 7, other=full0)
    _run(root, "sub0", 0.1, 0, far, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4], other=full1)
    _run(root, "gap", 0.0, 0, near, classifier="gap")          # another knob: not a data-size run
    _run(root, "short", 0.0, 0, near, steps=500)               # another budget
    os.remove(os.path.join(root, "short", "final_metrics.json"))
    runs = datasize.find_runs(root, 4000)
    assert [(r["name"], r["fraction"], r["seed"]) for r in runs] == [("sub0", 0.1, 0), ("full0", 1.0, 0),
                                                                    ("full1", 1.0, 1)]
    assert datasize.reference_for(runs[0], runs) == full1      # subset of seed 0: the full-data model of seed 1
    assert datasize.reference_for(runs[1], runs) == full1      # full data: another seed's full-data model
    assert datasize.reference_for(runs[2], runs) == full0
    s = datasize.summarize(runs, 16.0)
    assert s["local_threshold_px"] == 12.0
    sub, full = s["fractions"]
    assert sub["fraction"] == 0.1 and [x["seed"] for x in full["seeds"]] == [0, 1]
    assert sub["seeds"][0]["early_blocks"] == ["block00", "block01"]
    assert sub["seeds"][0]["local_heads_early"] == 0.0
    assert full["seeds"][0]["local_heads_early"] == pytest.approx(2 / 8)
    assert full["seeds"][0]["early_mean_distance_px"] == pytest.approx(np.mean(near[0] + near[1]))
    assert sub["seeds"][0]["cka_to_reference"]["block05"] == pytest.approx(0.4)
    # The pair of full-data seeds is counted once (the first seed that names it), not once per direction.
    assert full["seeds"][0]["cka_to_reference"]["block03"] == pytest.approx(0.8)
    assert full["seeds"][1]["cka_to_reference"] is None
    text = datasize.render(s, "python -m vit_jax_struct.experiments.datasize …")
    # Columns: accuracy, early blocks, mean distance, most local early head (4.0 px of `near`), local share.
    assert "| 0.1 | 0.5100 (n=1) | block00, block01 | 16.00 (n=1) | 16.00 (n=1) | 0.00 (n=1) |" in text
    assert ("| 1 | 0.5000 ± 0.0000 (n=2) | block00, block01 | 13.49 ± 0.00 (n=2) | 4.00 ± 0.00 (n=2) | "
            "0.25 ± 0.00 (n=2) |") in text
    assert "| 1 | 2 | 0.605 ± 0.007 |" in text  # digits 10-shot: 0.60 and 0.61 over the two full-data seeds, n = 2
    assert "| 1 (another seed's full-data model) | 1 | 0.990 |" in text  # one distinct pair of full-data seeds
    out = str(tmp_path / "out")
    paths = datasize.write(s, out, "cmd")
    assert all(os.path.getsize(p) > 0 for p in paths)
    with open(os.path.join(out, "datasize.json")) as f:
        assert json.load(f)["fractions"][0]["seeds"][0]["run"] == "sub0"


def test_data_size_study_refuses_what_it_cannot_compare_with_one_line(tmp_path, capsys):
    root = str(tmp_path / "runs")
    _run(root, "sub0", 0.1, 0, [[16.0] * 4] * 6)
    out = str(tmp_path / "o")

    def error(*args):
        assert datasize.main(["--runs", root, "--out", out, *args]) == 2
        return capsys.readouterr().err.strip()

    assert error("--steps", "4000").startswith("error: no full-data run (train_fraction 0 or 1) of 4000 steps")
    assert "no finished data-size run of 10 steps" in error("--steps", "10") and "total_steps [4000]" in \
        capsys.readouterr().err + error("--steps", "10")
    (tmp_path / "afile").write_text("x")
    assert datasize.main(["--runs", root, "--out", str(tmp_path / "afile"), "--steps", "4000"]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert datasize.main(["--runs", str(tmp_path / "nope"), "--out", out, "--steps", "4000"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_data_size_study_leaves_out_runs_that_differ_in_other_keys(tmp_path, capsys):
    root = str(tmp_path)
    d = [[16.0] * 4] * 6
    _run(root, "full0", 0.0, 0, d)
    _run(root, "full1", 0.0, 1, d)
    _run(root, "sub0", 0.1, 0, d)
    lr = _run(root, "full_lr", 0.0, 0, d)   # another learning rate, same seed: not a seed of the same study
    with open(os.path.join(lr, "config.json")) as f:
        c = json.load(f)
    c["optim"] = {"lr": 3e-3}
    for name in ("full0", "full1", "sub0"):
        with open(os.path.join(root, name, "config.json")) as f:
            other = json.load(f)
        other["optim"] = {"lr": 1e-3}
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(other, f)
    with open(os.path.join(lr, "config.json"), "w") as f:
        json.dump(c, f)
    runs = datasize.find_runs(root, 4000)
    assert [r["name"] for r in runs] == ["sub0", "full0", "full1"]
    assert "full_lr: left out (its config differs from full0's in optim.lr)" in capsys.readouterr().out
    # A key only one config has (written by an older version, before the key existed) is not a difference.
    assert datasize.differing_keys({"seed": 0, "pp": {"flip": True}}, {"seed": 1, "pp": {"flip": True, "new": 1}}) == []
    twin = _run(root, "full0_again", 0.0, 0, d)
    with pytest.raises(ValueError, match="two runs of train fraction 1 and seed 0"):
        datasize.find_runs(root, 4000)
    os.remove(os.path.join(twin, "config.json"))
    # Without few-shot metrics or a CKA reference the page still has R2 and says why the other figures are missing.
    s = datasize.summarize(datasize.find_runs(root, 4000)[1:2], 16.0)
    s["fractions"][0]["seeds"][0]["fewshot"] = {}
    paths = datasize.write(s, str(tmp_path / "out"), "cmd")
    assert [os.path.basename(p) for p in paths] == ["attention_distance.png", "README.md", "datasize.json"]
    text = (tmp_path / "out" / "README.md").read_text()
    assert "no subset model and no second full-data seed" in text and "no few-shot evaluator" in text


def test_fewshot_at_init_is_the_runs_own_evaluator_on_its_initial_parameters(tmp_path):
    from tests.conftest import tiny_config
    from vit_jax_struct.train import trainer

    # lr 0: the parameters never move, so the run's logged few-shot accuracy is the one of its initialization.
    cfg = tiny_config(total_steps=2, **{"optim.lr": 0.0, "fewshot.every_steps": 2, "fewshot.shots": (1, 5),
                                        "fewshot.train_examples": 200, "fewshot.holdout_examples": 50,
                                        "fewshot.test_examples": 100})
    _, last = trainer.train_and_evaluate(cfg, str(tmp_path))
    got = datasize.fewshot_at_init(str(tmp_path))
    assert sorted(got) == ["digits_1shot", "digits_5shot"]
    assert got == {k.removeprefix("fewshot/"): v for k, v in last.items() if k.startswith("fewshot/")}
    cfg.fewshot.every_steps = 0
    trainer.train_and_evaluate(cfg, str(tmp_path / "off"))
    with pytest.raises(ValueError, match="no few-shot evaluator"):
        datasize.fewshot_at_init(str(tmp_path / "off"))
