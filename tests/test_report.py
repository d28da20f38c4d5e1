"""Scoreboard: knobs read from workdirs, accuracy comparisons with Welch intervals, statuses, smoke runs."""

import csv
import json
import os

import pytest
import scipy.stats

from vit_jax_struct.experiments import report


def _run(root, name, acc, seed=0, steps=1000, model=None, **data_model):
    d = os.path.join(root, name)
    os.makedirs(d)
    model = model or {"name": "vit", "variant": "Ti/8", "attention": "standard", "classifier": "token",
                      "skip_ablation": ""}
    data = {"permute_patches": False, "train_fraction": 0.0, "permutation_patch_size": 0, "permutation_seed": 0}
    for k, v in data_model.items():
        (data if k in data else model)[k] = v
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"seed": seed, "total_steps": steps, "model": model, "data": data}, f)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": steps // 2, "eval/accuracy": 0.1}) + "\n")
        f.write(json.dumps({"step": steps, "eval/accuracy": acc, "eval/loss": 1.0}) + "\n")


def test_scoreboard_compares_arms_with_welch_intervals_and_statuses(tmp_path, monkeypatch):
    root = str(tmp_path / "runs")
    for seed, acc in enumerate((0.60, 0.62, 0.61)):
        _run(root, f"base{seed}", acc, seed=seed)
    for seed, acc in enumerate((0.605, 0.612, 0.615)):
        _run(root, f"perm{seed}", acc, seed=seed, permute_patches=True)
    # Another permutation (J4's per-seed arm) is its own arm: never pooled into J2's as a fourth seed.
    _run(root, "perm_pi1", 0.10, seed=1, permute_patches=True, permutation_seed=1)
    for seed, acc in enumerate((0.50, 0.52, 0.49)):
        _run(root, f"sub{seed}", acc, seed=seed, permute_patches=True, permutation_patch_size=4)
    _run(root, "pos0", 0.50, attention="positional")
    for seed, acc in enumerate((0.58, 0.63, 0.60)):  # D1acc: 4 register tokens, never part of the baseline arm
        _run(root, f"reg{seed}", acc, seed=seed, num_registers=4)
    _run(root, "other_budget", 0.9, steps=999, attention="positional")  # a budget nobody declared: smoke
    cnn = {"name": "resnet", "depth": 18}
    for seed, (a, b) in enumerate(((0.70, 0.50), (0.72, 0.46), (0.71, 0.48))):
        _run(root, f"rn{seed}", a, seed=seed, model=dict(cnn))
        _run(root, f"rn_perm{seed}", b, seed=seed, model=dict(cnn), permute_patches=True,
             permutation_patch_size=8)
        # J3fine: finer (4-px) blocks, compared with the 8-px arm, not with the unpermuted one.
        _run(root, f"rn_perm4_{seed}", (0.40, 0.38, 0.41)[seed], seed=seed, model=dict(cnn), permute_patches=True,
             permutation_patch_size=4)
    runs = report.mark(report.find_runs([root]))
    assert len(runs) == 24 and {r["model"] for r in runs} == {"ViT-Ti/8", "ResNet-18"}
    perms = {os.path.basename(r["run"]): r["permutation"] for r in runs}
    assert (perms["perm0"], perms["perm_pi1"], perms["rn_perm0"]) == ("patch", "patch, π seed 1", "8px")
    assert [r["run"] for r in runs if r["smoke"]] == [os.path.join(root, "other_budget")]
    compared = report.compare(runs)
    j3 = {r["comparison"].split("] [")[1].split("]")[0]: r for r in compared if r["id"] == "J3"}
    assert set(j3) == {"4px", "8px"}  # one J3 comparison per block size, each against the unpermuted arm
    assert j3["4px"]["effect"].delta == pytest.approx((40 + 38 + 41 - 70 - 72 - 71) / 3)
    rows = {r["id"]: r for r in compared}
    fine = scipy.stats.ttest_ind([40.0, 38.0, 41.0], [50.0, 46.0, 48.0], equal_var=False)
    assert rows["J3fine"]["effect"].delta == pytest.approx((40 + 38 + 41 - 50 - 46 - 48) / 3)
    assert rows["J3fine"]["effect"].df == pytest.approx(fine.df) and rows["J3fine"]["status"] == "reproduced"
    fine_ci = fine.confidence_interval(0.95)
    assert (rows["J3fine"]["effect"].low, rows["J3fine"]["effect"].high) == (pytest.approx(fine_ci.low),
                                                                            pytest.approx(fine_ci.high))
    assert sorted(os.path.basename(w) for w in rows["J3fine"]["runs"][:3]) == ["rn_perm0", "rn_perm1", "rn_perm2"]
    j2 = rows["J2"]
    ref = scipy.stats.ttest_ind([60.5, 61.2, 61.5], [60.0, 62.0, 61.0], equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert j2["effect"].delta == pytest.approx((60.5 + 61.2 + 61.5 - 60.0 - 62.0 - 61.0) / 3)
    assert (j2["effect"].low, j2["effect"].high, j2["effect"].df) == (
        pytest.approx(ci.low), pytest.approx(ci.high), pytest.approx(ref.df))
    assert j2["status"] == "inconclusive" and "margin" in j2["reason"]  # the interval crosses ±1 point
    assert rows["J2+"]["status"] == "reproduced"
    assert rows["D1acc"]["effect"].delta == pytest.approx((58 + 63 + 60 - 60 - 62 - 61) / 3)
    assert sorted(os.path.basename(w) for w in rows["D1acc"]["runs"]) == ["base0", "base1", "base2", "reg0", "reg1",
                                                                          "reg2"]
    assert rows["J2+"]["effect"].delta == pytest.approx((50 + 52 + 49 - 60 - 62 - 61) / 3)
    assert rows["J1"]["status"] == "inconclusive" and rows["J1"]["effect"] is None  # one seed: no interval
    assert j3["8px"]["status"] == "reproduced" and j3["8px"]["effect"].delta == pytest.approx(-23.0)
    assert "[ResNet-18" in j3["8px"]["comparison"]  # a CNN comparison names its model even when it is the only one
    md, csv_path = report.write(runs, list(rows.values()), str(tmp_path / "out"), "python launch/sweep.py …")
    with open(md) as f:
        text = f.read()
    assert "| J3 |" in text and "python launch/sweep.py" in text and "**reproduced**" in text
    assert "1 smoke or unfinished run(s)" in text
    with open(csv_path) as f:
        assert f.read().count("\n") == 25
    with open(os.path.join(tmp_path, "out", "verdicts.json")) as f:
        assert {v["id"] for v in json.load(f)} == set(rows)
    monkeypatch.chdir(tmp_path)  # published run paths are relative to where the command ran, as runs.csv's
    published = {v["id"]: v for v in report.verdicts_json(list(rows.values()))}
    assert sorted(published["D1acc"]["runs"]) == [f"runs/{a}{s}" for a in ("base", "reg") for s in range(3)]
    assert report.main(["--runs", root, "--out", str(tmp_path / "out2"), "--no-curves"]) == 0
    assert report.main(["--runs", root, "--no-curves"]) == 0  # without --out: beside the runs, never docs/results
    assert sorted(os.listdir(os.path.join(root, "report"))) == ["runs.csv", "scoreboard.md", "verdicts.json"]


def test_row_status_combines_the_claims_comparisons_and_checks_are_never_reproduced():
    def v(key, status):
        return {"key": key, "status": status}

    assert report.row_status("R6", [v("R6", "reproduced"), v("R6", "reproduced")]) == (
        "reproduced", "2 of 2 comparisons reproduced")
    # one reproduced, one inconclusive: the row is inconclusive; a contradiction anywhere wins
    assert report.row_status("R6", [v("R6", "reproduced"), v("R6", "inconclusive")]) == (
        "inconclusive", "1 of 2 comparisons reproduced")
    assert report.row_status("J4", [v("J4", "reproduced"), v("J4order", "contradicts")])[0] == "contradicts"
    # J4 has two designs (one shared permutation; one per seed), each against its null and token order
    assert report.row_status("J4", [v("J4", "reproduced"), v("J4order", "reproduced")]) == (
        "inconclusive", "2 of 4 comparisons reproduced, 2 not yet run")
    assert report.row_status("J4", [v(k, "reproduced") for k in ("J4", "J4order", "J4pi", "J4piorder")]) == (
        "reproduced", "4 of 4 comparisons reproduced")
    # controls, checks and exploratory measures are not the row's claim: J2+ alone leaves J2 not run
    assert report.row_status("J2", [v("J2+", "reproduced")]) == ("not run", "")
    assert report.row_status("J5", [v("J5", "inconclusive"), v("J5sets", "reproduced"), v("J5err", "reproduced")]) \
        == ("inconclusive", "1 of 2 comparisons reproduced")
    # J5's claim includes the paper's own association count (J5assoc): a contradiction there is the row's
    assert report.row_status("J5", [v("J5", "reproduced"), v("J5err", "reproduced"), v("J5assoc", "contradicts")]) \
        == ("contradicts", "2 of 3 comparisons reproduced")
    # J3 names two CNNs, each at 8-px and 4-px blocks vs unpermuted and 4-px vs 8-px: the 8-px comparisons alone
    # cannot make the row reproduced
    assert report.row_status("J3", [v("J3", "reproduced")] * 2) == (
        "inconclusive", "2 of 6 comparisons reproduced, 4 not yet run")
    assert report.row_status("J3", [v("J3", "reproduced")] * 4 + [v("J3fine", "reproduced")] * 2) == (
        "reproduced", "6 of 6 comparisons reproduced")
    assert report.row_status("J3", [v("J3", "reproduced")] * 4 + [v("J3fine", "reproduced"),
                                                                  v("J3fine", "inconclusive")])[0] == "inconclusive"
    assert report.shown_status("J2+", "reproduced") == "check: as expected"
    assert report.shown_status("J7rand", "contradicts") == "check: not as expected"
    assert report.shown_status("J2", "reproduced") == "reproduced"


def test_smoke_sweep_judges_nothing_and_counts_identical_runs_once(tmp_path, capsys):
    """`--set=total_steps=20`: every arm is smoke; two arms that became the same training run are one run."""
    root = str(tmp_path / "smoke")
    _run(root, "base_500", 0.1, seed=0, steps=20)
    _run(root, "base_4000", 0.1, seed=0, steps=20)   # the same training config as base_500
    _run(root, "perm", 0.1, seed=0, steps=20, permute_patches=True)
    runs = report.mark(report.find_runs([root]))
    assert all(r["smoke"] for r in runs)
    assert sum(bool(r["duplicate_of"]) for r in runs) == 1
    assert report.compare(runs) == []
    assert report.main(["--runs", root, "--out", str(tmp_path / "out"), "--no-curves"]) == 0
    err = capsys.readouterr().err
    assert err.count("smoke run") == 3 and "counted once" in err


def test_result_file_verdicts_are_judged_by_their_catalog_key(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(json.dumps([{"key": "J5", "comparison": "x", "treatment": [0.5, 0.6, 0.55, 0.52, 0.58],
                                 "null": 0.25, "method": "one-sample"},
                                {"key": "J10rand", "comparison": "y", "treatment": [0.3, 0.31, 0.29, 0.3, 0.3],
                                 "baseline": [0.3, 0.305, 0.295, 0.3, 0.3], "method": "welch"},
                                {"key": "J10rand", "comparison": "y3", "treatment": [0.3, 0.31, 0.29],
                                 "baseline": [0.3, 0.305, 0.295], "method": "welch"}]))
    rows = report.verdicts_from_file(str(path))
    assert rows[0]["status"] == "reproduced" and rows[0]["effect"].delta == pytest.approx(0.3)
    assert rows[1]["status"] == "reproduced"  # inside the ±0.05 margin
    assert "a check the paper did not run, not its claim" in rows[1]["reason"]  # J10rand: a control of ours
    # A theory row needs 5 seeds per arm: the same interval from 3 seeds is not judged.
    assert (rows[2]["status"], rows[2]["reason"]) == (
        "inconclusive", "n = 3 < 5 per arm: not judged; a check the paper did not run, not its claim")
    path.write_text(json.dumps([{"key": "nope", "comparison": "z", "treatment": [1, 2]}]))
    with pytest.raises(ValueError, match="verdict key 'nope'"):
        report.verdicts_from_file(str(path))


def _curve_run(root, name, seed=0, **model_kw):
    """A workdir whose metrics.jsonl has train loss, eval accuracy and few-shot accuracy at several steps."""
    d = os.path.join(root, name)
    os.makedirs(d)
    model = {"name": "vit", "variant": "Ti/8", "attention": "standard", "classifier": "token", "skip_ablation": "",
             **model_kw}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"seed": seed, "total_steps": 1000, "model": model,
                   "data": {"permute_patches": False, "train_fraction": 0.0, "source": "folder",
                            "root": "/data/cifar10"}}, f)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for step in (250, 500, 750, 1000):
            f.write(json.dumps({"step": step, "train/loss": 2.3 - step / 1000}) + "\n")
            if step % 500 == 0:
                f.write(json.dumps({"step": step, "eval/accuracy": step / 2500 + seed / 100, "eval/loss": 2.0,
                                    "fewshot/cifar10_1shot": step / 5000,
                                    "fewshot/cifar10_10shot": step / 3750}) + "\n")


def test_report_writes_training_curve_pngs(tmp_path, monkeypatch):
    from vit_jax_struct.analysis import plots
    from vit_jax_struct.train import metrics

    root = str(tmp_path / "runs")
    _curve_run(root, "base0")
    _curve_run(root, "base1", seed=1)
    _curve_run(root, "gap0", classifier="gap")
    _curve_run(root, "gap1", seed=1, classifier="gap")
    recs = metrics.read_metrics(os.path.join(root, "base0"))
    assert plots.fewshot_keys(recs) == ["fewshot/cifar10_1shot", "fewshot/cifar10_10shot"]
    steps, acc = plots._series(recs, "fewshot/cifar10_10shot")
    assert steps.tolist() == [500, 1000] and acc.tolist() == pytest.approx([500 / 3750, 1000 / 3750])
    out = str(tmp_path / "out")
    assert report.main(["--runs", root, "--out", out]) == 0
    files = sorted(os.listdir(os.path.join(out, "curves")))
    comparison = "R5acc_GAP_vs_CLS_classifier_ViT_accuracy_cifar10_1000_steps.png"
    assert files == [comparison, "base0.png", "base1.png", "gap0.png", "gap1.png"]
    for f in files:
        with open(os.path.join(out, "curves", f), "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(os.path.join(out, "curves", "base0.png"))
    assert img.shape[1] > 1000 and img[..., :3].std() > 0.05  # three panels drawn, not a blank canvas
    with open(os.path.join(out, "scoreboard.md")) as f:
        assert f"(curves/{comparison})" in f.read()
    with pytest.raises(ValueError, match="at least one run"):
        plots.training_curves({}, os.path.join(out, "x.png"), "empty")
    # A comparison figure an earlier scoreboard drew under another label is removed, and a run's figure under its
    # other name (with its sweep's); other files stay.
    for stale in ("R5acc_GAP_vs_CLS_old_label.png", "notes.png", f"{os.path.basename(root)}_base0.png"):
        with open(os.path.join(out, "curves", stale), "wb") as fh:
            fh.write(b"x")
    assert report.main(["--runs", root, "--out", out]) == 0
    assert sorted(os.listdir(os.path.join(out, "curves"))) == sorted([*files, "notes.png"])
    # The comparison's legend says which arm is the baseline and which the treatment.
    drawn = {}
    monkeypatch.setattr(plots, "training_curves",
                        lambda runs, path, title: drawn.setdefault(os.path.basename(path), list(runs)))
    assert report.main(["--runs", root, "--out", out]) == 0
    assert drawn[comparison] == ["baseline: base0", "baseline: base1", "treatment: gap0", "treatment: gap1"]
    assert drawn["base0.png"] == ["base0"]
    # A run of the same name in a second sweep (trained again there): each file is named with its sweep.
    again = str(tmp_path / "again")
    _curve_run(again, "base0")
    drawn.clear()
    assert report.main(["--runs", root, "--runs", again, "--out", out]) == 0
    assert drawn["runs_base0.png"] == drawn["again_base0.png"] == ["base0"] and "base0.png" not in drawn



def test_block_size_figure_draws_each_cnns_loss_beside_the_papers(tmp_path, monkeypatch):
    """J3 as the paper's Fig. 5: accuracy − the mean unpermuted accuracy per block side, the unpermuted arm at 32 px."""
    from vit_jax_struct.analysis import plots
    from vit_jax_struct.experiments import catalog

    root = str(tmp_path / "runs")
    cnn = {"name": "resnet", "depth": 18}
    for seed, (a, b, c) in enumerate(((0.70, 0.50, 0.40), (0.72, 0.46, 0.38))):
        _run(root, f"rn{seed}", a, seed=seed, model=dict(cnn))
        _run(root, f"rn_perm8_{seed}", b, seed=seed, model=dict(cnn), permute_patches=True, permutation_patch_size=8)
        _run(root, f"rn_perm4_{seed}", c, seed=seed, model=dict(cnn), permute_patches=True, permutation_patch_size=4)
    # Another permutation seed is not a point of the curve.
    _run(root, "rn_pi1", 0.1, seed=1, model=dict(cnn), permute_patches=True, permutation_seed=1)
    runs = report.mark(report.find_runs([root]))
    assert [report._block_px(p) for p in ("none", "8px", "4px", "8px, π seed 1")] == [32, 8, 4, None]
    drawn = {}
    monkeypatch.setattr(plots, "block_size_curves", lambda models, path, title: drawn.update(models=models, path=path))
    paths = report.write_block_size(runs, str(tmp_path))
    assert paths == [str(tmp_path / "J3_block_size_unknown_dataset_1000_steps.png")] == [drawn["path"]]
    label, ref, ours = drawn["models"]["ResNet-18"]["ours"]
    assert label == "ours: ResNet-18, unpermuted 71.0 %" and ref == pytest.approx(71.0)
    assert sorted(ours) == [4, 8, 32]
    assert ours[4] == pytest.approx([40.0, 38.0]) and ours[8] == pytest.approx([50.0, 46.0])
    assert ours[32] == pytest.approx([70.0, 72.0])
    assert "VGG-19" not in drawn["models"]  # the paper's CIFAR-100 curves: not beside runs of another data set
    for r in runs:
        r["dataset"] = "cifar100"
    report.write_block_size(runs, str(tmp_path))
    assert drawn["models"]["VGG-19"]["paper"][1:] == (catalog.J3_PAPER_FIG5["VGG-19"][32],
                                                      catalog.J3_PAPER_FIG5["VGG-19"])
    monkeypatch.undo()
    path = report.write_block_size(runs, str(tmp_path))[0]
    assert path.endswith("J3_block_size_cifar100_1000_steps.png")
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="at least one series of ours"):
        plots.block_size_curves({"VGG-19": {"paper": ("p", 76.0, {32: 76.0})}}, str(tmp_path / "x.png"), "empty")


def test_archive_keeps_each_sweep_in_its_own_folder_and_skips_unfinished_runs(tmp_path):
    a, b = str(tmp_path / "sweepA"), str(tmp_path / "sweepB")
    for root, name in ((a, "r0"), (b, "r0"), (b, "r1")):
        _run(root, name, 0.5)
        with open(os.path.join(root, name, "final_metrics.json"), "w") as f:
            json.dump({"eval/accuracy": 0.5}, f)
    _run(b, "unfinished", 0.4)
    os.makedirs(os.path.join(b, "r1", "analysis", "cross_cka"))
    with open(os.path.join(b, "r1", "analysis", "analysis.json"), "w") as f:
        f.write("{}")
    with open(os.path.join(b, "r1", "analysis", "cross_cka", "cnn,seed=0.json"), "w") as f:
        f.write('{"matrix": []}')
    dest = str(tmp_path / "archive")
    assert report.archive([a, b + "/"], dest) == [os.path.join(dest, "sweepA"), os.path.join(dest, "sweepB")]
    assert sorted(os.listdir(os.path.join(dest, "sweepB"))) == ["r0", "r1"]
    assert sorted(os.listdir(os.path.join(dest, "sweepB", "r1"))) == ["analysis", "config.json",
                                                                       "final_metrics.json", "metrics.jsonl"]
    with open(os.path.join(dest, "sweepA", "r0", "metrics.jsonl")) as f, open(os.path.join(a, "r0",
                                                                                          "metrics.jsonl")) as g:
        assert f.read() == g.read()
    with open(os.path.join(dest, "sweepB", "r1", "analysis", "cross_cka", "cnn,seed=0.json")) as f:
        assert f.read() == '{"matrix": []}'  # R1's cross-model CKA travels with its ViT run
    with pytest.raises(ValueError, match="two sweep roots named 'sweepA'"):
        report.archive([a, a], dest)


def test_an_archived_reports_analysis_verdicts_name_the_archived_runs_not_the_live_ones(tmp_path):
    root = str(tmp_path / "runs" / "sweepA")
    names = ["gap,seed=0", "cls,seed=0", "cls,seed=1"]
    for i, name in enumerate(names):
        _run(root, name, 0.5, seed=i)
        with open(os.path.join(root, name, "final_metrics.json"), "w") as f:
            json.dump({"eval/accuracy": 0.5}, f)
    other = str(tmp_path / "elsewhere" / "x,seed=0")  # a run outside the archived sweep keeps its path
    verdicts = str(tmp_path / "verdicts.json")
    with open(verdicts, "w") as f:
        json.dump([{"key": "R8", "comparison": "GAP vs CLS", "treatment": [0.6], "baseline": [0.7],
                    "method": "paired", "runs": [os.path.join(root, n) for n in names] + [other]}], f)
    dest, out = str(tmp_path / "archive"), str(tmp_path / "out")
    assert report.main(["--runs", root + "/", "--archive", dest, "--out", out, "--verdicts", verdicts,
                        "--no-curves"]) == 0
    with open(os.path.join(out, "verdicts.json")) as f:
        (r8,) = [v for v in json.load(f) if v["key"] == "R8"]
    assert r8["runs"] == [os.path.join(dest, "sweepA", n) for n in names] + [other]
    assert report.archived_path(root + "A/r", {root: dest}) == root + "A/r"  # a sibling folder is not below root
    # the verdicts command names runs by absolute path, the report's --runs is often relative to the working directory
    rel = os.path.relpath(root)
    assert report.archived_path(os.path.join(root, names[0]), {rel: dest}) == os.path.join(dest, names[0])
    assert report.archived_path(os.path.join(rel, names[0]) + "/", {root: dest}) == os.path.join(dest, names[0])


def test_runs_csv_names_the_device_and_dtype_a_run_trained_on(tmp_path):
    root = str(tmp_path / "runs")
    _run(root, "gpu0", 0.6, dtype="bfloat16")
    _run(root, "old0", 0.6, seed=1)  # trained before final_metrics.json named the device
    with open(os.path.join(root, "gpu0", "final_metrics.json"), "w") as f:
        json.dump({"step": 1000, "code": "abc", "device": "gpu: NVIDIA H200 × 1"}, f)
    runs = report.mark(report.find_runs([root]))
    report.write(runs, [], str(tmp_path / "out"))
    with open(tmp_path / "out" / "runs.csv") as f:
        rows = {os.path.basename(r["run"]): r for r in csv.DictReader(f)}
    assert (rows["gpu0"]["device"], rows["gpu0"]["dtype"], rows["gpu0"]["code"]) == ("gpu: NVIDIA H200 × 1",
                                                                                      "bfloat16", "abc")
    assert (rows["old0"]["device"], rows["old0"]["dtype"]) == ("not recorded", "not recorded")


def test_listed_adds_another_settings_runs_to_runs_csv_without_judging_them(tmp_path, monkeypatch, capsys):
    """`--listed=FOLDER`: FOLDER's runs.csv rows join OUT/runs.csv with `scoreboard` = FOLDER (the own runs name
    OUT); they enter no verdict and the scoreboard counts them by folder; a folder without runs.csv: one line, rc 2,
    nothing written."""
    monkeypatch.chdir(tmp_path)
    for name, acc, seed in (("a0", 0.5, 0), ("a1", 0.52, 1)):
        _run("other", name, acc, seed=seed)
    assert report.main(["--runs", "other", "--out", "setting", "--no-curves"]) == 0
    _run("mine", "b0", 0.3)
    assert report.main(["--runs", "mine", "--out", "index", "--no-curves", "--listed", "setting"]) == 0
    with open(tmp_path / "index" / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(os.path.basename(r["run"]), r["scoreboard"]) for r in rows] == [
        ("b0", "index"), ("a0", "setting"), ("a1", "setting")]
    with open(tmp_path / "setting" / "runs.csv") as f:  # the setting's own runs.csv names its own scoreboard
        assert {r["scoreboard"] for r in csv.DictReader(f)} == {"setting"}
    with open(tmp_path / "index" / "verdicts.json") as f:
        assert all("other/" not in run for v in json.load(f) for run in v.get("runs") or ())
    with open(tmp_path / "index" / "scoreboard.md") as f:
        text = f.read()
    assert "2 in setting/scoreboard.md" in text and "| a0 |" not in text
    capsys.readouterr()
    assert report.main(["--runs", "mine", "--out", "index2", "--no-curves", "--listed", "nowhere"]) == 2
    assert "--listed=nowhere: no runs.csv there" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "index2")


def test_step_ticks_of_a_long_run_are_few_and_short():
    """16,000 steps once drew "10000120001400016000" under the panel: at most 7 ticks, labels of ≤ 4 characters."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from vit_jax_struct.train import curves

    fig, ax = plt.subplots()
    ax.plot([0, 16000], [1.0, 0.0])
    curves._step_axis(ax)
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    labels = [ax.xaxis.get_major_formatter()(t, i) for i, t in enumerate(ax.get_xticks()) if lo <= t <= hi]
    plt.close(fig)
    assert labels == ["0", "5000", "10k", "15k"], labels


def test_a_flat_accuracy_curve_is_drawn_on_at_least_ten_points_of_axis_and_a_wide_one_as_it_is(monkeypatch,
                                                                                               tmp_path):
    from vit_jax_struct import storage
    from vit_jax_struct.train import curves

    drawn = []
    monkeypatch.setattr(storage, "savefig", lambda fig, path, dpi: drawn.append([ax.get_ylim() for ax in fig.axes]))
    flat = [{"step": s, "train/loss": 1.0 / s, "eval/accuracy": a, "fewshot/x_10shot": a + 0.3}
            for s, a in ((4000, 0.4884), (8000, 0.4858), (12000, 0.481), (16000, 0.4918))]
    rising = [{"step": s, "train/loss": 1.0 / s, "eval/accuracy": a} for s, a in ((1000, 0.1), (2000, 0.6))]
    curves.training_curves({"flat": flat}, str(tmp_path / "a.png"), "flat")
    curves.training_curves({"flat,seed=0": flat, "rising,seed=0": rising}, str(tmp_path / "b.png"), "two arms")
    top = [dict(r, **{"eval/accuracy": 0.97 + 0.005 * i}) for i, r in enumerate(flat)]
    curves.training_curves({"top": top}, str(tmp_path / "c.png"), "near 100 %")
    (_, acc, fewshot), (_, acc2, _) = drawn[0], drawn[1]
    assert acc[1] - acc[0] == pytest.approx(0.1) and acc[0] < 0.481 and acc[1] > 0.4918
    assert fewshot[1] - fewshot[0] == pytest.approx(0.1)
    assert acc2[1] - acc2[0] > 0.5  # the comparison's wide range is left to matplotlib
    assert drawn[2][1] == pytest.approx((0.9, 1.0))  # never above 100 %
