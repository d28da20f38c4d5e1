"""The verdict statistics (vit_jax_struct/experiments/stats.py) against scipy.stats and by hand on fixed numbers."""

import math

import numpy as np
import pytest
import scipy.stats

from vit_jax_struct.experiments import stats

A = [36.2, 36.8, 37.1]      # e.g. per-seed accuracies (points) of a treatment arm
B = [35.0, 35.5, 34.1, 35.9]  # the baseline arm


def test_welch_interval_and_df_match_scipy_and_the_formula():
    e = stats.welch(A, B)
    ref = scipy.stats.ttest_ind(A, B, equal_var=False)
    ci = ref.confidence_interval(0.95)
    assert e.delta == pytest.approx(np.mean(A) - np.mean(B))
    assert (e.low, e.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    # Welch–Satterthwaite by hand: df = (va/na + vb/nb)² / ((va/na)²/(na−1) + (vb/nb)²/(nb−1)).
    va, vb = np.var(A, ddof=1) / 3, np.var(B, ddof=1) / 4
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)
    assert e.df == pytest.approx(df)
    half = scipy.stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert e.high - e.delta == pytest.approx(half)
    assert (e.n_treatment, e.n_baseline, e.method) == (3, 4, "Welch t")
    assert "Welch t, df" in e.interval()


def test_welch_needs_two_values_per_arm_and_handles_zero_variance():
    assert stats.welch([1.0], [1.0, 2.0]) is None
    e = stats.welch([2.0, 2.0], [1.0, 1.0])
    assert (e.delta, e.low, e.high, e.df) == (1.0, 1.0, 1.0, None)
    assert e.method == "Welch t" + stats.NO_SPREAD and e.interval() == "(no interval; no spread: every value in each arm equal)"
    assert stats.status(e, "positive", min_seeds=2) == ("inconclusive", "no spread in either arm: a point, not an "
                                                        "interval; not judged")


def test_a_measure_equal_in_every_run_of_both_arms_is_never_judged():
    # e.g. the fraction of local early heads when no run has one: Δ = 0 with no spread says nothing either way.
    for make in (lambda: stats.welch([0.0] * 3, [0.0] * 3), lambda: stats.paired([0.5] * 3, [0.5] * 3),
                 lambda: stats.one_sample([0.25] * 5, null=0.25)):
        e = make()
        assert (e.delta, e.low, e.high) == (0.0, 0.0, 0.0) and e.method.endswith(stats.NO_SPREAD)
        for expect in ("positive", "negative"):
            st, reason = stats.status(e, expect)
            assert st == "inconclusive" and "does not separate" in reason


def test_one_sample_interval_matches_scipy():
    v = [0.31, 0.27, 0.35, 0.30, 0.29]
    e = stats.one_sample(v, null=0.25)
    ci = scipy.stats.ttest_1samp(v, 0.25).confidence_interval(0.95)
    assert e.delta == pytest.approx(np.mean(v) - 0.25)
    assert (e.low, e.high) == (pytest.approx(ci.low - 0.25), pytest.approx(ci.high - 0.25))
    assert e.df == 4 and e.mean_baseline == 0.25


def test_paired_interval_matches_scipy_ttest_rel():
    t, b = [0.61, 0.58, 0.66, 0.70], [0.55, 0.57, 0.60, 0.61]
    e = stats.paired(t, b)
    ref = scipy.stats.ttest_rel(t, b).confidence_interval(0.95)
    assert e.method == "paired t" and e.df == 3 and (e.n_treatment, e.n_baseline) == (4, 4)
    assert e.low == pytest.approx(ref.low) and e.high == pytest.approx(ref.high)
    d = np.subtract(t, b)  # the textbook formula: mean ± t(0.975, n−1) · sd / √n
    half = scipy.stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (e.low, e.high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert stats.paired([1.0], [0.5]) is None
    with pytest.raises(ValueError, match="3 treatment values but 2 baseline"):
        stats.paired([1, 2, 3], [1, 2])


def test_bootstrap_interval_brackets_the_difference_and_is_reproducible():
    e = stats.bootstrap(A, B, n_resamples=2000, seed=3)
    assert e.low < e.delta < e.high and e.method.startswith("bootstrap")
    assert stats.bootstrap(A, B, n_resamples=2000, seed=3) == e


def _effect(low, high, n=3):
    return stats.Effect((low + high) / 2, low, high, 3.0, "Welch t", n, n, 0.0, 0.0)


def test_status_vocabulary():
    assert stats.status(_effect(-3.0, -1.0), "negative") == (
        "reproduced", "95 % interval excludes 0 in the paper's direction")
    assert stats.status(_effect(1.0, 3.0), "negative")[0] == "contradicts"
    assert stats.status(_effect(-1.0, 3.0), "negative")[0] == "inconclusive"
    assert stats.status(_effect(0.5, 3.0), "positive")[0] == "reproduced"
    assert stats.status(_effect(-0.6, 0.8), "none", margin=1.0)[0] == "reproduced"
    assert stats.status(_effect(-0.2, 1.5), "none", margin=1.0) == (
        "inconclusive", "95 % interval crosses the margin ±1")   # crosses the margin
    assert stats.status(_effect(0.2, 1.5), "none", margin=1.0)[1].endswith(
        "excludes 0: the arms differ, by how much relative to the margin is not resolved")
    assert stats.status(_effect(1.2, 3.0), "none", margin=1.0)[0] == "contradicts"    # wholly outside
    assert stats.status(_effect(-5.0, -1.0, n=2), "negative") == ("inconclusive", "n = 2 < 3 per arm: not judged")
    assert stats.status(None, "negative")[0] == "inconclusive"
    with pytest.raises(ValueError, match="equivalence margin"):
        stats.status(_effect(0, 1), "none")
    with pytest.raises(ValueError, match="is not one of"):
        stats.status(_effect(0, 1), "up")


def test_equal_training_configs_are_one_run():
    base = {"seed": 0, "total_steps": 20, "model": {"name": "vit"}, "data": {"root": "/a", "eval_examples": 256},
            "fewshot": {"every_steps": 0}}
    other_eval = {**base, "data": {"root": "/b", "eval_examples": 1000}, "fewshot": {"every_steps": 5}}
    other_seed = {**base, "seed": 1}
    runs = [{"run": "r0", "training_key": stats.training_key(base), "eval_examples": 256},
            {"run": "r1", "training_key": stats.training_key(other_eval), "eval_examples": 1000},
            {"run": "r2", "training_key": stats.training_key(other_seed), "eval_examples": 256}]
    kept, dropped = stats.dedupe_runs(runs)
    assert [r["run"] for r in kept] == ["r1", "r2"] and dropped == [("r0", "r1")]


def test_a_key_added_later_at_its_old_behaviour_is_the_same_training():
    old = {"seed": 0, "data": {"root": "/a"}, "distributed": {"timeout_s": 300}}  # written before data.in_memory
    new = {"seed": 0, "data": {"root": "/a", "in_memory": False}, "distributed": {"initialization_timeout": 1800}}
    assert stats.training_key(old) == stats.training_key(new)
    assert stats.training_key(old) != stats.training_key({**new, "data": {"root": "/a", "in_memory": True}})
    # The published-family layout keys (added with DINOv2 / DeiT III / CLIP imports) at the plain ViT's values: a run
    # trained again after they existed duplicates its archived original (never a second seed of it).
    before = {"seed": 0, "model": {"width": 128}, "pp": {"crop": True}}
    after = {"seed": 0, "model": {"width": 128, "layer_norm_eps": 1e-6, "layerscale": None, "norm_pre": False},
             "pp": {"crop": True, "normalize": ""}}
    assert stats.training_key(before) == stats.training_key(after)
    assert stats.training_key(before) != stats.training_key({**after, "model": {**after["model"], "norm_pre": True}})


def test_smoke_runs_are_those_off_the_declared_budgets():
    assert stats.is_smoke(20, (500, 1000, 4000))
    assert not stats.is_smoke(1000, (500, 1000, 4000))
    assert not stats.is_smoke(20, ())


def test_half_width_and_seeds_for_a_no_effect_margin_match_welch():
    # Two arms with the same s.d. and n: the Welch interval of Δ = 0 has exactly this half-width (df = 2n − 2).
    a, b = np.array([-0.5, 0.0, 0.5]), np.array([0.5, 0.0, -0.5])
    e = stats.welch(a, b)
    assert e.df == pytest.approx(4.0) and e.high == pytest.approx(stats.half_width(0.5, 3))
    assert stats.half_width(0.5, 3) == pytest.approx(scipy.stats.t.ppf(0.975, 4) * 0.5 * math.sqrt(2 / 3))
    n = stats.seeds_for_margin(0.5, 1.0)
    assert stats.half_width(0.5, n) < 1.0 <= stats.half_width(0.5, n - 1)
    assert stats.seeds_for_margin(10.0, 0.1) is None
    with pytest.raises(ValueError, match="n >= 2"):
        stats.half_width(0.5, 1)
