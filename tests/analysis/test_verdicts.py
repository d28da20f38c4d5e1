"""Representation verdict measures (vit_jax_struct/experiments/verdicts.py) on matrices with known answers."""

import json
import os

import numpy as np
import pytest

from vit_jax_struct.analysis import localization, posemb
from vit_jax_struct.experiments import verdicts


def test_localization_margin_is_own_minus_mean_of_others():
    m = np.full((4, 4), 0.2) + np.eye(4) * 0.5  # own patch 0.7, others 0.2
    assert localization.margin(m) == pytest.approx(0.5)
    assert localization.margin(np.full((4, 4), 0.3)) == pytest.approx(0.0)


def test_cka_split_is_within_minus_across_at_the_block():
    layers = ["stem", "block00", "block01", "block02", "block03", "pre_logits"]
    m = np.ones((6, 6))
    m[1:3, 3:5] = m[3:5, 1:3] = 0.4  # blocks 0-1 vs 2-3 differ
    assert verdicts.cka_split(m, layers, 2) == pytest.approx(0.6)
    assert verdicts.cka_split(np.ones((6, 6)), layers, 2) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="does not split"):
        verdicts.cka_split(m, layers, 0)


def test_uniform_attention_distance_is_the_mean_distance_between_two_patches():
    # 2x2 grid: of the 16 ordered pairs, 4 are a patch with itself, 8 neighbours (1 patch) and 4 diagonals (√2).
    assert verdicts.uniform_attention_distance(2, 10) == pytest.approx(10 * (8 + 4 * np.sqrt(2)) / 16)
    assert verdicts.uniform_attention_distance(1, 8) == 0.0


def test_early_heads_uses_the_first_third_of_the_blocks_and_the_local_threshold():
    uniform = verdicts.uniform_attention_distance(2, 10)  # 8.54 px; local: below 6.40 px
    res = {"model": {"patch_size": 10}, "localization": {"matrix": np.eye(4).tolist()},
           "attention_distance_pixels": {"block00": [2.0, 8.0], "block01": [6.0, 7.0], "block02": [9.0, 9.0],
                                         "block03": [9.0, 9.0], "block04": [9.0, 9.0], "block05": [9.0, 9.0]}}
    mean, local = verdicts.early_heads(res)  # blocks 0-1 of 6
    assert mean == pytest.approx(23.0 / 4) and local == pytest.approx(2 / 4)
    assert 0.75 * uniform == pytest.approx(6.402, abs=1e-3)
    # A run's analysis.json names the patch in the variant (patch_size None unless overridden): the same answer.
    assert verdicts.early_heads({**res, "model": {"patch_size": None, "variant": "Ti/10"}}) == (mean, local)
    with pytest.raises(ValueError, match="lacks attention_distance_pixels"):
        verdicts.early_heads({"model": {"patch_size": 10}})


def _cka_result(value: float, other: str) -> dict:
    return {"cka_across": {"other": other, "layers": ["block00", "block01"], "other_layers": ["block00", "block01"],
                           "matrix": [[0.9, 0.1], [0.2, value]]}}


def test_r7_r8_pairs_share_the_reference_of_their_seed_and_refuse_a_mismatch():
    base = {0: "full0", 1: "full1", 2: "full2"}
    arm = {0: "gap0", 2: "gap2"}  # seed 1 of the arm is missing: only seeds 0 and 2 pair
    ref = {s: verdicts.cross_seed_reference(s, base) for s in base}
    assert ref == {0: "full1", 1: "full2", 2: "full0"}  # never the model's own seed
    results = {"full0": _cka_result(0.80, ref[0]), "full1": _cka_result(0.70, ref[1]),
               "full2": _cka_result(0.75, ref[2]), "gap0": _cka_result(0.60, ref[0]),
               "gap2": _cka_result(0.50, ref[2])}
    t, b = verdicts._paired_cka(arm, base, results)
    assert (t, b) == ([0.60, 0.50], [0.80, 0.75])  # last block vs last block, in seed order
    results["gap2"] = _cka_result(0.50, "full1")  # analysed against another reference than full2 was
    with pytest.raises(ValueError, match="different references"):
        verdicts._paired_cka(arm, base, results)


def test_r7_r8_with_two_full_data_seeds_use_their_one_baseline_pair_once():
    # 0 → 1 and 1 → 0 are the same pair of full-data models (CKA is symmetric): one baseline value, not two seeds.
    base = {0: "full0", 1: "full1"}
    arm = {0: "sub0", 1: "sub1"}
    results = {"full0": _cka_result(0.74, "full1"), "full1": _cka_result(0.74, "full0"),
               "sub0": _cka_result(0.66, "full1"), "sub1": _cka_result(0.65, "full0")}
    assert verdicts._paired_cka(arm, base, results) == ([0.66], [0.74])


def test_r1_pattern_is_vit_block0_with_resnet_middle_minus_early_units_per_seed_pair():
    layers = ["stem", "block00", "block01"]
    others = ["stem"] + [f"block{i:02d}" for i in range(8)]  # ResNet-18: 4 stages of 2 units
    m = np.zeros((3, 9))
    m[1] = [0.2, 0.3, 0.4, 0.7, 0.8, 0.6, 0.5, 0.1, 0.1]  # ViT block00: early = stem, block00-01; middle = block02-05
    assert verdicts.r1_pattern(m, layers, others) == pytest.approx(np.mean([0.7, 0.8, 0.6, 0.5]) - 0.3)
    with pytest.raises(ValueError, match="block00"):
        verdicts.r1_pattern(m[:, :4], layers, others[:4])
    cross = {s: {"matrix": (m + s / 10).tolist(), "layers": layers, "other_layers": others, "workdir": f"vit{s}",
                 "other": f"resnet{s}"} for s in (0, 1, 2)}
    (row,) = verdicts.r1_inputs(cross, " (cifar100)")
    assert row["key"] == "R1" and row["method"] == "one-sample" and row["null"] == 0.0
    assert row["treatment"] == pytest.approx([0.35] * 3)  # adding a constant to every cell leaves the contrast
    assert row["runs"] == ["vit0", "resnet0", "vit1", "resnet1", "vit2", "resnet2"]
    assert verdicts.r1_inputs({}) == []


def test_analysis_plan_reanalyses_only_runs_with_a_checkpoint_and_never_swaps_the_reference():
    fresh = {"posemb": {"locality_null": {"mean": 0.0}}, "cka_across": {"other": "full1"}}
    plan = verdicts.analysis_plan
    # Missing: analysed against the reference where it has a checkpoint, else without a cross-seed CKA.
    assert plan(None, "full1", run_has_checkpoint=True, ref_has_checkpoint=True) == (True, "full1")
    assert plan(None, "full1", run_has_checkpoint=True, ref_has_checkpoint=False) == (True, None)
    # Current (compared with the wanted reference): kept, whether or not the reference still has its checkpoint.
    assert plan(fresh, "full1", run_has_checkpoint=True, ref_has_checkpoint=True) == (False, "full1")
    assert plan(fresh, "full1", run_has_checkpoint=True, ref_has_checkpoint=False) == (False, None)
    # Compared with another reference: redone against the wanted one; an archived run (no checkpoint) keeps it.
    assert plan(fresh, "full2", run_has_checkpoint=True, ref_has_checkpoint=True) == (True, "full2")
    assert plan(fresh, "full2", run_has_checkpoint=False, ref_has_checkpoint=True) == (False, "full2")
    # Made without a reference because it had no checkpoint: current; without the posemb null: stale.
    no_ref = {"posemb": {"locality_null": {"mean": 0.0}}}
    assert plan(no_ref, "full1", run_has_checkpoint=True, ref_has_checkpoint=False) == (False, None)
    assert plan({"posemb": {}}, None, run_has_checkpoint=True, ref_has_checkpoint=False) == (True, None)


def test_r7_r8_pairs_use_retrained_baselines_only_where_the_archived_ones_cannot_pair():
    # Archived full-data runs (no checkpoints) were analysed against each other; gap0 too. gap1 and gap2 came later
    # and could meet only the retrained references r2 and r0, so their pairs' baselines are r1 and r2 (each analysed
    # against the same retrained reference as the GAP model of its seed).
    base = {0: "full0", 1: "full1", 2: "full2"}
    refs = {0: "r0", 1: "r1", 2: "r2"}
    results = {"full0": _cka_result(0.80, "full1"), "full1": _cka_result(0.70, "full2"),
               "full2": _cka_result(0.75, "full0"), "r0": _cka_result(0.79, "r1"), "r1": _cka_result(0.71, "r2"),
               "r2": _cka_result(0.74, "r0"), "gap0": _cka_result(0.60, "full1"), "gap1": _cka_result(0.55, "r2"),
               "gap2": _cka_result(0.50, "r0")}
    arm = {0: "gap0", 1: "gap1", 2: "gap2"}
    used: list = []
    t, b = verdicts._paired_cka(arm, base, results, refs, used)
    assert (t, b) == ([0.60, 0.55, 0.50], [0.80, 0.71, 0.74])
    assert used == ["r1", "r2", "r0"]  # every retrained run that enters a pair, in first use
    # Without the retrained runs the later pairs cannot be formed: a mismatch, never a silent swap.
    with pytest.raises(ValueError, match="different references"):
        verdicts._paired_cka(arm, base, results)


def test_reference_run_takes_the_retrained_run_only_when_the_archived_one_has_no_checkpoint(tmp_path):
    def run(name, ckpt):
        os.makedirs(tmp_path / name / "checkpoints" / ("100" if ckpt else "tmp"))
        return str(tmp_path / name)

    base = {0: run("full0", False), 1: run("full1", False), 2: run("full2", True)}
    refs = {0: run("r0", True), 1: run("r1", True)}
    assert verdicts.reference_run(0, base, refs) == refs[1]  # archived full1 has no checkpoint
    assert verdicts.reference_run(1, base, refs) == base[2]  # full2 still has one: kept
    assert verdicts.reference_run(2, base, refs) == refs[0]
    assert verdicts.reference_run(2, base, None) == base[0]  # no retrained runs: the archived reference
    # A run analysed in another session keeps no checkpoint but its stored last-block Grams: usable on both sides.
    os.makedirs(tmp_path / "full1" / "analysis")
    (tmp_path / "full1" / "analysis" / "last_block_grams.npz").write_bytes(b"")
    assert verdicts.reference_run(0, base, refs) == base[1]
    os.makedirs(tmp_path / "r3" / "analysis")
    (tmp_path / "r3" / "analysis" / "last_block_grams.npz").write_bytes(b"")
    assert verdicts.reference_run(2, {0: base[0], 2: base[2]}, {0: str(tmp_path / "r3")}) == str(tmp_path / "r3")


def test_own_permutation_runs_take_permutation_k_for_seed_k_and_never_another_grain():
    std = ("standard", "token", "-")
    arms = {(*std, "patch", 1.0): {0: "a0", 1: "a1", 2: "a2"}, (*std, "patch, π seed 1", 1.0): {1: "b1"},
            (*std, "patch, π seed 2", 1.0): {2: "b2"}, (*std, "sub-patch", 1.0): {0: "c0"},
            (*std, "patch, π seed 3", 1.0): {0: "d0"}, ("standard", "gap", "-", "patch", 1.0): {0: "e0"}}
    assert verdicts.own_permutation_runs(arms) == {0: "a0", 1: "b1", 2: "b2"}
    assert verdicts.own_permutation_runs({(*std, "patch", 1.0): {0: "a0", 1: "a1"}}) == {0: "a0"}


def test_ensure_analyses_keeps_archived_pairs_and_compares_only_the_others_with_retrained_references(tmp_path,
                                                                                                        monkeypatch):
    from vit_jax_struct.analysis import run as analysis_run

    def run(name, ckpt, other="none"):
        d = tmp_path / name
        os.makedirs(d / "analysis")
        if other != "none":  # analysed before: against `other` (None: without a cross-seed reference)
            got = {"posemb": {"locality_null": {"mean": 0.0}}}
            if other:
                got["cka_across"] = {"other": str(tmp_path / other)}
            (d / "analysis" / "analysis.json").write_text(json.dumps(got))
        if ckpt:
            os.makedirs(d / "checkpoints" / "100")
        return str(d)

    base = {s: run(f"full{s}", False, f"full{(s + 1) % 3}") for s in range(3)}
    gap = {0: run("gap0", True, "full1"),  # still has its checkpoint, paired with the archived full1: kept
           1: run("gap1", True, None)}     # analysed when full2 had no checkpoint left: compared with r2 now
    refs = {s: run(f"r{s}", True) for s in range(3)}
    calls = []
    monkeypatch.setattr(analysis_run, "analyze", lambda w, compare, **kw: calls.append((w, compare)) or {
        "cka_across": {"other": compare}})
    got = verdicts.ensure_analyses({verdicts.BASE: base, ("standard", "gap", "-", "none", 1.0): gap}, 8, 8, refs)
    assert sorted(calls) == sorted([(gap[1], refs[2]), (refs[0], refs[1]), (refs[1], refs[2]), (refs[2], refs[0])])
    assert got[gap[0]]["cka_across"]["other"] == base[1]


def test_distance_rank_kept_is_one_for_grid_symmetries_and_chance_for_random_permutations():
    n = 16
    assert posemb.distance_rank_kept(np.arange(n), (4, 4)) == pytest.approx(1.0)
    assert posemb.distance_rank_kept(np.arange(n)[::-1], (4, 4)) == pytest.approx(1.0)  # a 180° rotation
    transpose = np.arange(n).reshape(4, 4).T.ravel()
    assert posemb.distance_rank_kept(transpose, (4, 4)) == pytest.approx(1.0)
    m, sd = posemb.random_distance_rank_kept((4, 4), draws=300)
    assert abs(m) < 3 * sd / np.sqrt(300) + 1e-9 and 0.03 < sd < 0.3
    with pytest.raises(ValueError, match="permutation of the 16 positions"):
        posemb.distance_rank_kept([0, 0] + list(range(2, 16)), (4, 4))


def test_d1_inputs_judge_the_baseline_outlier_fraction_and_the_register_arm_against_it(monkeypatch):
    from vit_jax_struct.analysis import localization

    def res(frac, diag):
        m = np.full((4, 4), 0.1)
        np.fill_diagonal(m, diag)
        return {"norm_outliers": {"analysis_block": "block05", "blocks": {"block05": {"fraction_above_robust": frac}}},
                "localization": {"matrix": m.tolist()}}

    base = {0: "b0", 1: "b1", 2: "b2"}
    reg = {0: "r0", 1: "r1", 2: "r2"}
    results = {"b0": res(0.001, 0.5), "b1": res(0.002, 0.6), "b2": {"localization": res(0, 0.7)["localization"]},
               "r0": res(0.0, 0.4), "r1": res(0.003, 0.5), "r2": res(0.001, 0.6)}
    arms = {verdicts.BASE: base, (*verdicts.BASE[:5], 4): reg}
    rows = {r["key"]: r for r in verdicts.d1_inputs(arms, results, " (cifar100)")}
    assert sorted(rows) == ["D1", "D1loc", "D1reg"]
    # b2's analysis predates the outlier measures: left out of D1 and D1reg, kept in D1loc.
    assert rows["D1"]["treatment"] == [0.001, 0.002] and rows["D1"]["method"] == "one-sample"
    assert rows["D1"]["runs"] == ["b0", "b1"] and rows["D1"]["null"] == 0.0
    assert rows["D1reg"]["treatment"] == [0.0, 0.003, 0.001] and rows["D1reg"]["baseline"] == [0.001, 0.002]
    assert rows["D1loc"]["treatment"] == pytest.approx([localization.margin(results[w]["localization"]["matrix"])
                                                        for w in ("r0", "r1", "r2")])
    assert rows["D1loc"]["baseline"] == pytest.approx([0.4, 0.5, 0.6])  # own patch 0.1 + d, others 0.1
    assert "4 register tokens vs none" in rows["D1reg"]["comparison"]
    # The register arm is D1's alone: verdict_inputs judges nothing else on it (no R4/R5/J4 entry from it).
    monkeypatch.setattr(verdicts, "sweep_label", lambda w: "cifar100")
    other = [r for r in verdicts.verdict_inputs(arms, results) if any(w.startswith("r") for w in r["runs"])]
    assert sorted(r["key"] for r in other) == ["D1loc", "D1reg"]


def _stored_run(root, name, feats, labels, batch, analysis=None):
    """A run folder holding only what an archive keeps: analysis.json and the stored last-block Grams of `feats`."""
    from vit_jax_struct.analysis import cka
    from vit_jax_struct.analysis import run as analysis_run

    out = os.path.join(root, name, "analysis")
    os.makedirs(out)
    grams = [cka.gram(feats[i:i + batch]) for i in range(0, len(feats), batch)]
    labels = [labels[i:i + batch] for i in range(0, len(feats), batch)]
    analysis_run.save_last_block_grams(out, "block05", grams, labels, 100)
    with open(os.path.join(out, "analysis.json"), "w") as f:
        json.dump(analysis or {"posemb": {"locality_null": {"mean": 0.0}}}, f)
    return os.path.join(root, name)


def test_stored_last_block_grams_give_the_minibatch_cka_of_the_features_and_refuse_other_batches(tmp_path):
    """CKA from the stored Gram files equals `cka.linear_cka` on the features (float32 storage), is 1 for an
    orthogonal transform of the same features (linear CKA's invariance, Kornblith et al. 2019 §3), and refuses two
    runs analysed on other images."""
    from vit_jax_struct.analysis import cka
    from vit_jax_struct.analysis import run as analysis_run

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6, 8))  # 64 examples, 6 tokens × 8 channels
    y = np.tanh(x @ rng.normal(size=(8, 8))) + 0.5 * rng.normal(size=x.shape)
    q, _ = np.linalg.qr(rng.normal(size=(48, 48)))
    labels = rng.integers(0, 10, 64)
    a = _stored_run(tmp_path, "a", x, labels, 16)
    b = _stored_run(tmp_path, "b", y, labels, 16)
    c = _stored_run(tmp_path, "c", x.reshape(64, -1) @ q, labels, 16)
    got = analysis_run.stored_cka_across(a, b)
    np.testing.assert_allclose(got["matrix"][0][0], cka.linear_cka(x, y, batch_size=16), rtol=1e-5)
    assert 0.05 < got["matrix"][0][0] < 0.95 and got["layers"] == got["other_layers"] == ["block05"]
    np.testing.assert_allclose(analysis_run.stored_cka_across(a, c)["matrix"][0][0], 1.0, atol=1e-5)
    assert analysis_run.stored_cka_across(a, str(tmp_path / "none")) is None
    other = _stored_run(tmp_path, "other", y, (labels + 1) % 10, 16)
    with pytest.raises(ValueError, match="analysed on different batches"):
        analysis_run.stored_cka_across(a, other)
    short = _stored_run(tmp_path, "short", y, labels, 32)
    with pytest.raises(ValueError, match=r"sizes \[16, 16, 16, 16\] vs \[32, 32\]"):
        analysis_run.stored_cka_across(a, short)


def test_ensure_analyses_pairs_runs_without_checkpoints_from_their_stored_grams(tmp_path):
    """Runs trained and analysed in different sessions (no checkpoint of any left): each R8 pair's last-block CKA comes
    from the stored Grams, is written into the run's analysis.json, and `_paired_cka` pairs them as analysed live."""
    from vit_jax_struct.analysis import cka

    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10, 32)
    feats = {n: rng.normal(size=(32, 12)) for n in ("full0", "full1", "full2", "gap0", "gap1", "gap2")}
    runs = {n: _stored_run(tmp_path, n, f, labels, 8) for n, f in feats.items()}
    base = {s: runs[f"full{s}"] for s in range(3)}
    gap = {s: runs[f"gap{s}"] for s in range(3)}
    got = verdicts.ensure_analyses({verdicts.BASE: base, ("standard", "gap", "-", "none", 1.0, 0): gap}, 32, 8)
    for s in range(3):
        ref = f"full{(s + 1) % 3}"
        for arm in ("full", "gap"):
            across = got[runs[f"{arm}{s}"]]["cka_across"]
            assert across["other"] == runs[ref]
            np.testing.assert_allclose(across["matrix"][0][0], cka.linear_cka(feats[f"{arm}{s}"], feats[ref], 8),
                                       rtol=1e-5)
            with open(os.path.join(runs[f"{arm}{s}"], "analysis", "analysis.json")) as f:
                assert json.load(f)["cka_across"] == across
    t, b = verdicts._paired_cka(gap, base, got)
    np.testing.assert_allclose(t, [got[gap[s]]["cka_across"]["matrix"][0][0] for s in range(3)])
    np.testing.assert_allclose(b, [got[base[s]]["cka_across"]["matrix"][0][0] for s in range(3)])


def test_a_retrained_reference_analysed_before_its_next_seed_existed_is_paired_again_from_stored_grams(tmp_path):
    """Retrained CLS runs of seeds 0 and 1 analysed against each other (no seed 2 yet), then seed 2 trained: seed 1's
    cross-seed CKA is redone against seed 2 (its cyclic reference now) from the stored Grams, seed 0's kept."""
    from vit_jax_struct.analysis import cka

    rng = np.random.default_rng(2)
    labels = rng.integers(0, 10, 32)
    feats = {s: rng.normal(size=(32, 12)) for s in range(3)}
    refs = {s: _stored_run(tmp_path, f"r{s}", feats[s], labels, 8) for s in range(2)}
    verdicts.ensure_analyses({}, 32, 8, refs=refs)
    old = {}
    for s in range(2):
        with open(os.path.join(refs[s], "analysis", "analysis.json")) as f:
            old[s] = json.load(f)["cka_across"]
    assert old[1]["other"] == refs[0]
    refs[2] = _stored_run(tmp_path, "r2", feats[2], labels, 8)
    got = verdicts.ensure_analyses({}, 32, 8, refs=refs)
    assert [got[refs[s]]["cka_across"]["other"] for s in range(3)] == [refs[1], refs[2], refs[0]]
    assert got[refs[0]]["cka_across"] == old[0]
    np.testing.assert_allclose(got[refs[1]]["cka_across"]["matrix"][0][0], cka.linear_cka(feats[1], feats[2], 8),
                               rtol=1e-5)


def test_a_retrained_gap_run_stands_in_only_for_an_archived_gap_run_that_cannot_pair():
    # gap0 and gap1 were archived before stored Grams (no cross-seed CKA); gap2 has its pair. Retrained GAP runs
    # g0 and g1 (analysed against the retrained references r1, r2) stand in for them; g2 exists but is not used.
    base = {0: "full0", 1: "full1", 2: "full2"}
    refs = {0: "r0", 1: "r1", 2: "r2"}
    results = {"full0": {}, "full1": {}, "full2": {}, "r0": _cka_result(0.79, "r1"), "r1": _cka_result(0.71, "r2"),
               "r2": _cka_result(0.74, "r0"), "gap0": {}, "gap1": {}, "gap2": _cka_result(0.50, "r0"),
               "g0": _cka_result(0.60, "r1"), "g1": _cka_result(0.55, "r2"), "g2": _cka_result(0.99, "r0")}
    arm = {0: "gap0", 1: "gap1", 2: "gap2"}
    alt = {0: "g0", 1: "g1", 2: "g2"}
    used: list = []
    t, b = verdicts._paired_cka(arm, base, results, refs, used, alt)
    assert (t, b) == ([0.60, 0.55, 0.50], [0.79, 0.71, 0.74])
    assert used == ["g0", "r0", "r1", "g1", "r2"]
    note = verdicts._refs_note(used, alt)
    assert "stands in for that pair only (/g0, /g1;" in note and "(/r0, /r1, /r2;" in note
    assert verdicts._paired_cka(arm, base, results, refs, [], None) == ([0.50], [0.74])  # without them: one pair
