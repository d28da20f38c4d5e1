"""Statistics of the verdicts, in one place: effects with 95 % intervals, the status vocabulary, run deduplication.

Every judged catalog row (the scoreboard `vit_jax_struct/experiments/report.py` and the catalog page
`vit_jax_struct/experiments/catalog_page.py` both call this module) reports an `Effect`: Δ = mean(treatment) − mean(baseline) of a
measure that is one number per seed, with the 95 % confidence interval of Welch's unequal-variance t (degrees of
freedom by Welch–Satterthwaite; `scipy.stats.ttest_ind(equal_var=False).confidence_interval()`), or a one-sample t
interval of per-seed differences against a null, a paired t interval where treatment and baseline share a unit
(`paired`: R7/R8, whose two arms are compared with the same reference model), or a percentile bootstrap where a
measure is not one number per seed (`Effect.method` says which). The status of a row (`status`):

- `reproduced`: the interval excludes 0 in the paper's direction; for a "no effect" claim, it lies inside the
  equivalence margin stated in the catalog (±`margin`);
- `contradicts`: the interval excludes 0 in the other direction; for a "no effect" claim, it lies wholly outside the
  margin (the effect is larger than the margin for certain);
- `inconclusive`: neither, or fewer seeds per arm than `MIN_SEEDS`, or no spread at all (every value in each arm
  equal: a point, not an interval) (the reason is given);
- `not run`: no runs.

Runs whose effective configs are equal are one run, never two seeds (`dedupe_runs`), and a run shorter than its
arm's declared step budget is *smoke* and never judged (`is_smoke`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import numpy as np
import scipy.stats

CONFIDENCE = 0.95
MIN_SEEDS = 3  # seeds per arm below which an empirical row is not judged (its status says so)
STATUSES = ("reproduced", "contradicts", "inconclusive", "not run")
# Appended to an Effect's method when every value in each arm is equal: the "interval" is the point Δ, no spread.
NO_SPREAD = ", no spread: every value in each arm equal"
EXPECTATIONS = ("positive", "negative", "none")  # the paper's claim: the treatment raises / lowers / leaves it

# Config keys that change how a run is measured or stored, not what is trained: two runs equal but for these are
# the same training run (one run, never two seeds). Prefix match on the flattened key.
NOT_TRAINING = ("fewshot.", "log_every_steps", "eval_every_steps", "checkpoint_every_steps", "save_checkpoints",
                "keep_checkpoints", "eval_batch_size", "data.eval_examples", "data.root", "data.num_threads",
                "data.eval_split", "profile.", "compilation_cache_dir", "name", "distributed.timeout_s",
                "distributed.initialization_timeout")
# Training keys added to the config after runs existed, with the value that reproduces what a run without the key
# did: a config.json that lacks the key and one that has this value describe the same training.
ADDED_KEYS = {"data.in_memory": False, "data.device_augment": False,
              # the layouts of published ViT families (DINOv2, DeiT III, CLIP): at these values the plain ViT
              "model.layer_norm_eps": 1e-6, "model.layerscale": None, "model.norm_pre": False, "pp.normalize": ""}


def _inert_keys(flat: dict) -> set:
    """Keys of a flattened config that change nothing in its training: `data.device_augment` where the data is
    read from files (`data.in_memory` False, not the digits) or RandAugment keeps the host pipeline
    (`data/device_input.unsupported_reason`)."""
    in_memory = flat.get("data.in_memory", False) or flat.get("data.source") == "digits"
    if not in_memory or flat.get("pp.randaug_layers", 0):
        return {"data.device_augment"}
    return set()


@dataclasses.dataclass(frozen=True)
class Effect:
    """Δ = mean(treatment) − mean(baseline) with its 95 % interval [low, high].

    `df`: the interval's degrees of freedom (t intervals) or None; `method`: "Welch t", "one-sample t" or
    "bootstrap (B resamples)"; `n_treatment`, `n_baseline`: values per arm (seeds); `mean_*`, `sd_*`: per arm.
    """

    delta: float
    low: float
    high: float
    df: float | None
    method: str
    n_treatment: int
    n_baseline: int
    mean_treatment: float
    mean_baseline: float
    sd_treatment: float | None = None
    sd_baseline: float | None = None

    def interval(self, digits: int = 2, scale: float = 1.0) -> str:
        """`[low, high]` (scaled), then the method and df: `[-1.23, 0.45], Welch t, df 3.3`."""
        how = self.method + (f", df {self.df:.1f}" if self.df is not None else "")
        if self.method.endswith(NO_SPREAD):  # a point: no interval to print
            return f"(no interval; {how.split(', ', 1)[1]})"
        return f"[{scale * self.low:+.{digits}f}, {scale * self.high:+.{digits}f}], {how}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def sample_sd(x) -> float | None:
    """Sample standard deviation (ddof 1) of `x`; None for fewer than 2 values."""
    return float(np.std(x, ddof=1)) if len(x) > 1 else None


def welch(treatment, baseline, confidence: float = CONFIDENCE) -> Effect | None:
    """Welch's t interval of mean(treatment) − mean(baseline), per-seed values `[n_t]`, `[n_b]` (floats, any unit).

    Returns None when an arm has fewer than 2 values (no variance estimate). When both arms have zero variance the
    interval is the point Δ (df undefined: None).
    Source: Welch (1947); scipy.stats.ttest_ind(equal_var=False) and its `confidence_interval`.
    """
    t, b = np.asarray(treatment, float), np.asarray(baseline, float)
    if len(t) < 2 or len(b) < 2:
        return None
    delta = float(t.mean() - b.mean())
    with warnings.catch_warnings():  # an arm of identical values (e.g. a censored count) is a valid Welch input;
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)  # scipy warns all the same
        res = scipy.stats.ttest_ind(t, b, equal_var=False)
    if (np.var(t) == 0 and np.var(b) == 0) or not np.isfinite(res.df):
        low = high = delta
        df = None
    else:
        ci = res.confidence_interval(confidence_level=confidence)
        low, high, df = float(ci.low), float(ci.high), float(res.df)
    return Effect(delta, low, high, df, "Welch t" + (NO_SPREAD if df is None else ""), len(t), len(b),
                  float(t.mean()), float(b.mean()), sample_sd(t), sample_sd(b))


def one_sample(values, null: float = 0.0, confidence: float = CONFIDENCE, n_baseline: int = 0,
               baseline_mean: float | None = None) -> Effect | None:
    """t interval of mean(values) − `null` (`values` `[n]`: per-seed numbers, e.g. paired differences or a measure
    minus its per-seed null). None for fewer than 2 values. Source: scipy.stats.ttest_1samp."""
    v = np.asarray(values, float)
    if len(v) < 2:
        return None
    res = scipy.stats.ttest_1samp(v, null)
    delta = float(v.mean() - null)
    if np.std(v) == 0:
        low = high = delta
        df = None
    else:
        ci = res.confidence_interval(confidence_level=confidence)
        low, high, df = float(ci.low) - null, float(ci.high) - null, float(res.df)
    return Effect(delta, low, high, df, "one-sample t" + (NO_SPREAD if df is None else ""), len(v), n_baseline,
                  float(v.mean()), null if baseline_mean is None else baseline_mean, sample_sd(v), None)


def paired(treatment, baseline, confidence: float = CONFIDENCE) -> Effect | None:
    """Paired t interval of mean(treatment − baseline): `treatment[i]` and `baseline[i]` share a unit (e.g. the same
    reference model in a cross-seed CKA, so the reference's own variation cancels). `[n]` each, in unit order.
    None for fewer than 2 pairs. Source: scipy.stats.ttest_rel and its `confidence_interval`.

    Raises:
      ValueError: the two lists differ in length.
    """
    t, b = np.asarray(treatment, float), np.asarray(baseline, float)
    if len(t) != len(b):
        raise ValueError(f"paired: {len(t)} treatment values but {len(b)} baseline values; pairs need equal counts")
    if len(t) < 2:
        return None
    d = t - b
    delta = float(d.mean())
    if np.std(d) == 0:
        low = high = delta
        df = None
    else:
        ci = scipy.stats.ttest_rel(t, b).confidence_interval(confidence_level=confidence)
        low, high, df = float(ci.low), float(ci.high), float(len(d) - 1)
    return Effect(delta, low, high, df, "paired t" + (NO_SPREAD if df is None else ""), len(t), len(b),
                  float(t.mean()), float(b.mean()), sample_sd(t), sample_sd(b))


def bootstrap(treatment, baseline, n_resamples: int = 9999, seed: int = 0,
              confidence: float = CONFIDENCE) -> Effect | None:
    """Percentile bootstrap interval of mean(treatment) − mean(baseline), resampling each arm independently
    (`scipy.stats.bootstrap`, method "percentile"); for measures that are not one number per seed (e.g. pairs of
    seeds). None when an arm is empty or both have one value."""
    t, b = np.asarray(treatment, float), np.asarray(baseline, float)
    if not len(t) or not len(b) or (len(t) < 2 and len(b) < 2):
        return None
    delta = float(t.mean() - b.mean())
    if np.std(t) == 0 and np.std(b) == 0:
        low = high = delta
    else:
        res = scipy.stats.bootstrap((t, b), lambda x, y, axis=-1: x.mean(axis) - y.mean(axis),
                                    n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                                    rng=np.random.default_rng(seed), vectorized=True)
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    how = f"bootstrap ({n_resamples} resamples)" if low != high or np.std(t) or np.std(b) else "bootstrap" + NO_SPREAD
    return Effect(delta, low, high, None, how, len(t), len(b),
                  float(t.mean()), float(b.mean()), sample_sd(t), sample_sd(b))


def status(effect: Effect | None, expect: str, margin: float | None = None,
           min_seeds: int = MIN_SEEDS) -> tuple[str, str]:
    """`(status, reason)` of an effect against the paper's claim.

    Args:
      effect: the `Effect` (None: no comparison possible; "not run" if `min_seeds` is 0 else "inconclusive").
      expect: "positive" / "negative" (the paper finds the treatment raises / lowers the measure) or "none" (no
        effect; needs `margin`).
      margin: the equivalence margin (same unit as Δ), stated in the catalog before the runs.
      min_seeds: fewer values in an arm than this: "inconclusive" whatever the interval.

    Raises:
      ValueError: `expect` not in EXPECTATIONS, or "none" without a positive margin.
    """
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect {expect!r} is not one of {EXPECTATIONS}")
    if expect == "none" and not (margin and margin > 0):
        raise ValueError(f"a 'no effect' claim needs a positive equivalence margin, got {margin!r}")
    if effect is None:
        return "inconclusive", "fewer than 2 values per arm: no interval"
    n = min(effect.n_treatment, effect.n_baseline or effect.n_treatment)
    if n < min_seeds:
        return "inconclusive", f"n = {n} < {min_seeds} per arm: not judged"
    lo, hi = effect.low, effect.high
    if effect.method.endswith(NO_SPREAD):  # a point, not an interval: nothing to judge it by
        if effect.delta == 0:
            return "inconclusive", ("Δ = 0 exactly: every run of both arms has the same value, so the measure does "
                                    "not separate the arms")
        return "inconclusive", "no spread in either arm: a point, not an interval; not judged"
    if expect == "none":
        if -margin <= lo and hi <= margin:
            return "reproduced", f"95 % interval inside the margin ±{margin:g}"
        if lo > margin or hi < -margin:
            return "contradicts", f"95 % interval wholly outside the margin ±{margin:g}"
        side = (" and excludes 0: the arms differ, by how much relative to the margin is not resolved"
                if lo > 0 or hi < 0 else "")
        return "inconclusive", f"95 % interval crosses the margin ±{margin:g}{side}"
    sign = 1.0 if expect == "positive" else -1.0
    if (sign > 0 and lo > 0) or (sign < 0 and hi < 0):
        return "reproduced", "95 % interval excludes 0 in the paper's direction"
    if (sign > 0 and hi < 0) or (sign < 0 and lo > 0):
        return "contradicts", "95 % interval excludes 0 in the other direction"
    return "inconclusive", "95 % interval includes 0"


def flatten(d: dict, prefix: str = "") -> dict:
    """`{"a": {"b": 1}}` → `{"a.b": 1}`."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def training_key(config: dict) -> str:
    """A canonical string of the keys of a run's resolved config (`config.json` dict) that decide what is trained:
    every key but those in `NOT_TRAINING` (measurement, storage, start-up time-outs), and a key of `ADDED_KEYS` at
    the value a run from before the key existed had. Equal keys = the same training run."""
    flat = flatten(config)
    inert = _inert_keys(flat)
    kept = {k: v for k, v in flat.items() if not any(k == p or k.startswith(p) for p in NOT_TRAINING)
            and not (k in ADDED_KEYS and v == ADDED_KEYS[k]) and k not in inert}
    return json.dumps(kept, sort_keys=True, default=str)


def dedupe_runs(runs: list[dict], key=lambda r: r["training_key"]) -> tuple[list[dict], list[tuple[str, str]]]:
    """Keeps one run of each training key (the one evaluated on most examples, then the first by path).

    Args:
      runs: dicts with "run" (path) and `key(run)` (default: "training_key"), optionally "eval_examples".
    Returns:
      `(kept, dropped)`: kept runs in input order; `dropped` pairs (dropped run, the run it duplicates).
    """
    best: dict[str, dict] = {}
    for r in runs:
        k = key(r)
        cur = best.get(k)
        if cur is None or (r.get("eval_examples") or 0) > (cur.get("eval_examples") or 0):
            best[k] = r
    kept = [r for r in runs if best[key(r)] is r]
    dropped = [(r["run"], best[key(r)]["run"]) for r in runs if best[key(r)] is not r]
    return kept, dropped


def is_smoke(steps_run: int, declared_budgets) -> bool:
    """Whether a run of `steps_run` steps is a smoke run: its budget is not one of the arm's declared step budgets
    (`declared_budgets`, from the catalog). An empty declaration declares nothing: every run is judged."""
    budgets = tuple(declared_budgets or ())
    return bool(budgets) and int(steps_run) not in budgets


def half_width(sd: float, n: int, confidence: float = CONFIDENCE) -> float:
    """Half-width of the Welch interval of two arms of `n` values each with the same s.d. `sd` (then df = 2n − 2):
    t(1 − α/2, 2n − 2)·sd·√(2/n), in the unit of `sd`. Source: Welch–Satterthwaite with equal variances and sizes."""
    if n < 2:
        raise ValueError(f"half_width needs n >= 2 values per arm, got {n}")
    return float(scipy.stats.t.ppf(0.5 + confidence / 2, 2 * n - 2) * sd * math.sqrt(2.0 / n))


def seeds_for_margin(sd: float, margin: float, max_n: int = 50, confidence: float = CONFIDENCE) -> int | None:
    """The smallest number of seeds per arm at which a Δ of exactly 0 would give an interval inside ±`margin`
    (`half_width(sd, n) < margin`), or None if more than `max_n` would be needed. A power statement for a
    "no effect" claim; it assumes equal s.d. `sd` in both arms."""
    for n in range(2, max_n + 1):
        if half_width(sd, n, confidence) < margin:
            return n
    return None


def fmt(x: float | None, digits: int = 2) -> str:
    """A number for a table (`—` for None or NaN)."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"
