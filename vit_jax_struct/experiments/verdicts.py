"""Representation verdicts of a sweep's runs (J4, R4, R5, R8, D1): analyses on every seed, per-seed values for the
report.

    python -m vit_jax_struct.experiments.verdicts --runs=SWEEP_ROOT --out=docs/results/analysis/verdicts.json

Finds the finished ViT runs of a sweep (`config.json` + `final_metrics.json`), groups them into arms by their knobs
(`report.read_run`: permutation, classifier, skip ablation, attention; one dataset, model and step budget), runs
`--mode=analyze` (`analysis/run.py`) where `analysis/analysis.json` is missing — a CLS run of seed s against the CLS
run of seed s′ = the next seed (cyclically), a GAP run of seed s against the same CLS run s′ — and writes the per-seed
values of each judged row (`catalog.JUDGEMENTS`):

- J4: the locality of the posemb similarity after π⁻¹ (Spearman ρ of cosine similarity vs grid distance; negative =
  local) minus its null (the mean over 200 random re-indexings of the same posemb), per permuted-patch run; J4order:
  the same after π⁻¹ minus in token order (the paper's contrast: unstructured before, local after); both for the
  arm that shares one permutation and, where the sweep has it, over one permutation per seed (`own_permutation_runs`);
- R4: the CKA split at the ablated block b — mean CKA within blocks < b and within blocks ≥ b, minus mean CKA
  between the two groups — of the skip-ablated runs against the intact ones;
- R5: the localization margin — the CKA of each final-block output token with its own input patch minus its mean
  CKA with the other patches (Raghu et al. §6) — GAP against CLS;
- R8: the CKA of the last block of a GAP run (seed s) with the CLS run of seed s′ ≠ s, against the same for a CLS
  run of seed s (a cross-seed baseline: two CLS models differ too), paired on the reference s′ (`stats.paired`);
- R1: the CKA of ViT block 0 with the ResNet's middle units (its second and third quarters of residual units:
  stages 2–3 of ResNet-18) minus its CKA with the ResNet's early units (stem and first quarter: stage 1), per pair
  (ViT seed s, ResNet seed s) of the sweep's unpermuted CLS ViT and ResNet runs (`analysis_run.cross_cka`, stored
  in the ViT run's `analysis/cross_cka/`); Raghu et al. Fig. 1–2: ViT's lowest layers resemble the ResNet's middle
  ones more than its lowest (one-sample t over the pairs, null 0);
- D1 (Darcet et al. 2024, registers): the fraction of final-block patch tokens whose norm is above median +
  6·1.4826·MAD of that block's norms (`analysis/outliers.py`) in the baseline arm, against 0 (high-norm tokens at
  this scale?); with a register arm (`model.num_registers`), D1reg — the same fraction — and D1loc — R5's
  localization margin — register arm against the baseline (`d1_inputs`);
- data-size arms (`data.train_fraction` < 1, CLS, standard attention) against the full-data CLS runs:
  R2 — the mean attention distance (pixels) of the heads of the first third of the blocks, and R2local — the
  fraction of those heads whose mean distance is below 75 % of uniform attention's (`uniform_attention_distance`);
  R6 — the 10-shot ridge-probe accuracy of the pre-logits on the digits (`fewshot/digits_10shot` of the run's last
  evaluation; a task the model never saw); R7 — the last-block CKA of the subset model (seed s) with the full-data
  model of seed s′ ≠ s, against full data (s) vs full data (s′), paired on the reference s′.

`--refs=ROOT`: baseline runs of the same sweep trained again (their archived originals kept no checkpoint); R7/R8
pairs whose reference has no checkpoint use them (`reference_run`, `_paired_cka`), and the note says so. Runs of the
other R7/R8 arms (GAP, data subsets) in that root stand in, for the R7/R8 pair only, for an archived run of the same
arm and seed that can no longer be compared (no checkpoint, no stored Grams); every other row reads the archived
run. Without any checkpoint, an R7/R8 pair comes from the two runs' stored last-block Gram matrices (`analysis/last_block_grams.npz`,
written by every analysis and archived with it): a sweep's runs can then be trained in different sessions.

Every comparison names its sweep (data set, model, step budget), so verdict files of several sweeps can be read
together.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from vit_jax_struct import storage
from vit_jax_struct.analysis import attention, cka, localization, posemb
from vit_jax_struct.data import permute
from vit_jax_struct.experiments import report


def cka_split(matrix, layers, block: int) -> float:
    """Mean CKA within the encoder blocks before `block` and within those from `block` on, minus the mean CKA
    across the two groups (off-diagonal pairs; `layers` names like "block03"; other layers are ignored)."""
    m = np.asarray(matrix, float)
    idx = [(i, int(name[5:])) for i, name in enumerate(layers) if name.startswith("block") and name[5:].isdigit()]
    before = [i for i, b in idx if b < block]
    after = [i for i, b in idx if b >= block]
    if not before or not after:
        raise ValueError(f"block {block} does not split the blocks {list(layers)}")
    within = [m[i, j] for g in (before, after) for i in g for j in g if i < j]
    across = [m[i, j] for i in before for j in after]
    return float(np.mean(within) - np.mean(across))


def uniform_attention_distance(grid: int, patch: int) -> float:
    """Mean attention distance (pixels) of a head attending uniformly over a `grid`×`grid` patch grid: the mean
    Euclidean distance between the centres of two patches drawn independently (a patch with itself included),
    times the patch size `patch` (px). 4×4 grid of 8-px patches: 16.1 px; 8×8 grid of 4-px patches: 16.6 px.
    (Dosovitskiy et al. 2021 Fig. 7's measure for a head with uniform weights.)"""
    return float(attention.grid_distances((grid, grid), patch).mean())


def early_heads(res: dict, local_fraction: float = attention.LOCAL_FRACTION) -> tuple[float, float]:
    """(mean attention distance in px, fraction of local heads) over the heads of the first third of the blocks
    (at least one block) of an `analysis.json`: local = mean distance < `local_fraction` × uniform attention's.

    Raises:
      ValueError: no attention distances (a model without attention maps) or no patch size in the record (neither
        `model.patch_size` nor a `model.variant` such as "Ti/4").
    """
    dist = res.get("attention_distance_pixels") or {}
    blocks = sorted(k for k in dist if k.startswith("block"))
    if not blocks:
        raise ValueError("analysis.json lacks attention_distance_pixels (a model without attention maps)")
    grid, patch = attention.record_grid_patch(res)
    heads = np.concatenate([np.ravel(dist[b]) for b in blocks[:max(1, len(blocks) // 3)]])
    uniform = uniform_attention_distance(grid, patch)
    return float(heads.mean()), float(np.mean(heads < local_fraction * uniform))


def _last_block_cka(res: dict) -> float:
    c = res["cka_across"]
    layers, others = c["layers"], c["other_layers"]
    last = max(n for n in layers if n.startswith("block"))
    return float(np.asarray(c["matrix"])[layers.index(last), others.index(last)])


def r1_pattern(matrix, layers, other_layers) -> float:
    """R1's number from a ViT × ResNet CKA matrix `[len(layers), len(other_layers)]`: the mean CKA of ViT `block00`
    with the ResNet's middle units minus its mean CKA with the early ones. The ResNet's residual units (`blockXX`,
    in forward order) are split in quarters (ResNet-18's four stages of two units): early = `stem` and the first
    quarter, middle = the second and third quarters.

    Raises:
      ValueError: no ViT `block00`, or fewer than 4 ResNet units.
    """
    if "block00" not in layers:
        raise ValueError(f"R1 needs ViT block00, got {list(layers)}")
    groups = cka.resnet_unit_groups(other_layers)  # raises on fewer than 4 units
    m = np.asarray(matrix, float)
    row = m[list(layers).index("block00")]
    return float(row[groups["middle"]].mean() - row[groups["early"]].mean())


def find_resnets(root: str) -> dict:
    """`{seed: workdir}` of the finished, unpermuted ResNet runs below `root` (smoke runs left out): R1's CNNs."""
    out = {}
    for d in storage.find_folders_with(root, "config.json", skip=("checkpoints", "analysis")):
        if not storage.exists(storage.join(d, "final_metrics.json")):
            continue
        r = report.read_run(d)
        if (r is None or r["family"] != "cnn" or not r["model"].startswith("ResNet") or r["permutation"] != "none"
                or report.mark([r])[0]["smoke"]):
            continue
        out[int(r["seed"])] = d
    return out


def ensure_cross_cka(vits: dict, resnets: dict, num_examples: int, batch: int) -> dict:
    """`{seed: cross_cka result}` for every seed with both a baseline ViT run and a ResNet run (ViT seed s with
    ResNet seed s: each model in one pair only, so the pairs are independent); computed where missing."""
    from vit_jax_struct.analysis import run as analysis_run

    out = {}
    for s in sorted(set(vits) & set(resnets)):
        path = storage.join(vits[s], "analysis", "cross_cka", f"{storage.basename(resnets[s])}.json")
        got = json.loads(storage.read_text(path)) if storage.exists(path) else None
        if got is None or got.get("other") != resnets[s]:
            print(f"[verdicts] CKA of {vits[s]} with {resnets[s]}", flush=True)
            got = analysis_run.cross_cka(vits[s], resnets[s], num_examples=num_examples, batch=batch)
        out[s] = got
    return out


def r1_inputs(cross: dict, label: str = "") -> list[dict]:
    """R1's verdict input from `ensure_cross_cka`'s `{seed: result}` (none without a pair)."""
    if not cross:
        return []
    seeds = sorted(cross)
    vals = [r1_pattern(cross[s]["matrix"], cross[s]["layers"], cross[s]["other_layers"]) for s in seeds]
    return [{"key": "R1", "comparison": f"ViT block 0: CKA with the ResNet's middle units (stages 2–3) − with its "
             f"early units (stem, stage 1), ViT seed s with ResNet seed s{label}", "treatment": vals, "null": 0.0,
             "method": "one-sample", "baseline_label": "0 (no preference)",
             "runs": [w for s in seeds for w in (cross[s]["workdir"], cross[s]["other"])]}]


def find_arms(root: str) -> dict:
    """`{arm: {seed: workdir}}` of the finished ViT runs below `root`; arm = (attention, classifier, skip_ablation,
    permutation, train fraction, register tokens). Smoke runs (step budgets the catalog does not declare) are left out."""
    arms: dict = {}
    for d in storage.find_folders_with(root, "config.json", skip=("checkpoints", "analysis")):
        if not storage.exists(storage.join(d, "final_metrics.json")):
            continue
        r = report.read_run(d)
        if r is None or r["family"] != "vit" or report.mark([r])[0]["smoke"]:
            continue
        key = (r["attention"], r["classifier"], r["skip_ablation"], r["permutation"], float(r["train_fraction"]),
               int(r.get("registers") or 0))
        arms.setdefault(key, {})[int(r["seed"])] = d
    return arms


def cross_seed_reference(seed: int, full: dict):
    """The full-data CLS run a model of seed `seed` is compared with (R7, R8): the run of the next seed s′ ≠ s,
    cyclically, of `full` = `{seed: workdir}` (0 → 1 → 2 → 0); None if `full` has no other seed. A model is never
    compared with the full-data model of its own seed (the same initialization would flatter the similarity)."""
    seeds = sorted(full)
    others = [s for s in seeds if s != seed]
    if not others:
        return None
    return full[others[(seeds.index(seed) if seed in seeds else 0) % len(others)]]


def analysis_plan(got: dict | None, ref: str | None, run_has_checkpoint: bool,
                  ref_has_checkpoint: bool) -> tuple[bool, str | None]:
    """Whether a run's analysis must be (re)computed, and against which reference: `(todo, compare)`.

    `got` is the run's `analysis/analysis.json` (None if missing), `ref` the reference run the verdicts want it
    compared with (R7/R8; None: none). An analysis is current when it has the posemb null and was compared with
    `ref` (one made before the high-norm token measures existed is current too: D1 leaves its run out rather than
    lose an archived pair). A stale one is recomputed only where the run still has a checkpoint; an archived run (small files only)
    keeps the analysis it has. Where `ref` has no checkpoint (archived), the run is analysed without a cross-seed
    CKA (`compare` None: its R7/R8 pair is left out, never compared with another reference), and an analysis made
    so is current. Raises nothing: a missing analysis of a run without a checkpoint is left to `analyze` to report.
    """
    compare = ref if ref_has_checkpoint else None
    if got is None:
        return True, compare
    current = ("locality_null" in got.get("posemb", {"locality_null": 0})
               and got.get("cka_across", {}).get("other") in (ref, compare))
    return (not current and run_has_checkpoint), compare


BASE = ("standard", "token", "-", "none", 1.0, 0)  # the baseline arm: CLS, standard attention, intact, all the data,
# no register tokens


def reference_run(seed: int, base: dict, refs: dict | None = None) -> str | None:
    """The reference of a model of seed `seed` for R7/R8 (`cross_seed_reference` over the baseline arm `base`); where
    that run has neither a checkpoint nor stored last-block Grams (archived before they existed) and `refs`
    (`{seed: workdir}` of the same baseline runs trained again, `--refs`) has the same seed's run with either, that
    retrained run instead; else the archived run (None: none)."""
    ref = cross_seed_reference(seed, base)
    if ref is None or not refs:
        return ref
    from vit_jax_struct.analysis import run as analysis_run

    other = {w: s for s, w in base.items()}[ref]
    def pairable(w):  # a checkpoint to analyse against, or the stored Grams of an earlier analysis
        return analysis_run.has_checkpoint(w) or analysis_run.has_stored_grams(w)

    if not pairable(ref) and other in refs and pairable(refs[other]):
        return refs[other]
    return ref


def ensure_analyses(arms: dict, num_examples: int, batch: int, refs: dict | None = None,
                    retrained: dict | None = None) -> dict:
    """Runs the analysis of every run that lacks it (CLS and GAP runs against the baseline CLS run of the next
    seed, `reference_run`), of the retrained baseline runs `refs` (each against the retrained run of the next
    seed) and of the retrained runs of other arms `retrained` (`{arm key: {seed: workdir}}`, analysed as the arm's
    own runs are); returns `{workdir: analysis.json dict}`.

    A run left without a cross-seed CKA because its reference had no checkpoint (trained in another session, or
    archived) gets its R7/R8 value from the two runs' stored last-block Gram matrices where both have them
    (`analysis_run.stored_cka_across`; written into its analysis.json), so the runs of a sweep can be trained and
    analysed in any order, across sessions."""
    from vit_jax_struct.analysis import run as analysis_run

    base = arms.get(BASE, {})
    todo_list = [(key, seed, workdir) for key, by_seed in arms.items() for seed, workdir in sorted(by_seed.items())]
    todo_list += [("refs", seed, workdir) for seed, workdir in sorted((refs or {}).items())]
    todo_list += [(key, seed, workdir) for key, by_seed in (retrained or {}).items()
                  for seed, workdir in sorted(by_seed.items())]
    out, wanted = {}, {}
    for key, seed, workdir in todo_list:
        ref = cross_seed_reference(seed, refs) if key == "refs" else None
        path = storage.join(workdir, "analysis", "analysis.json")
        got = json.loads(storage.read_text(path)) if storage.exists(path) else None
        if key != "refs" and key[1] in ("token", "gap") and key[2] == "-" and key[3] == "none":
            # R7/R8: a CLS, GAP or subset model of seed s against the full-data CLS model of the next seed s′; an
            # analysis already made against the archived model s′ is kept (its pair is the archived one), only a run
            # without one is compared with the retrained s′ (`reference_run`).
            archived = cross_seed_reference(seed, base)
            done = (got or {}).get("cka_across", {}).get("other")
            ref = archived if done is not None and done == archived else reference_run(seed, base, refs)
        todo, compare = analysis_plan(got, ref, run_has_checkpoint=analysis_run.has_checkpoint(workdir),
                                      ref_has_checkpoint=ref is not None and analysis_run.has_checkpoint(ref))
        if todo:
            print(f"[verdicts] analysing {workdir}" + (f" against {compare}" if compare else "")
                  + (f" (the reference {ref} has no checkpoint: no cross-seed CKA)" if ref and not compare else ""),
                  flush=True)
            got = analysis_run.analyze(workdir, compare=compare, num_examples=num_examples, batch=batch,
                                       probes=False)  # the verdicts use no probe
        out[workdir] = got
        if ref is not None:  # an R7/R8 model (or a retrained baseline) and its cross-seed reference
            wanted[workdir] = ref
    for workdir, ref in wanted.items():  # pairs that no checkpoint could make: from the stored last-block Grams
        got = out[workdir]
        if got is None or got.get("cka_across", {}).get("other") == ref:
            continue
        # no cross-seed CKA yet, or one against a reference that is no longer the run's (a retrained baseline of
        # seed 1 analysed while seed 0 was the only other seed, then seed 2 trained): replaced where both runs
        # have their stored Grams, else kept (`_paired_cka` refuses a pair of mismatched references)
        across = analysis_run.stored_cka_across(workdir, ref)
        if across is not None:
            print(f"[verdicts] last-block CKA of {workdir} with {ref} from their stored Gram matrices", flush=True)
            got["cka_across"] = across
            storage.write_text(storage.join(workdir, "analysis", "analysis.json"), json.dumps(got, indent=1))
    return out


def sweep_label(workdir: str) -> str:
    """"<data set>, <model>, <n> steps" of a run (`report.read_run`), naming the sweep in every comparison."""
    r = report.read_run(workdir)
    return f"{r['dataset']}, {r['model']}, {r['total_steps']} steps" if r else workdir


def _fewshot(workdir: str, key: str = "fewshot/digits_10shot"):
    """The last logged value of `key` in a run's metrics.jsonl, in points (%), or None."""
    from vit_jax_struct.train import metrics

    got = None
    for rec in metrics.read_metrics(workdir):
        if key in rec:
            got = 100.0 * rec[key]
    return got


PAIRED_NOTE = ("paired t on seeds: the treatment model of seed s (a subset or GAP model) and the baseline model of "
               "seed s (the full-data CLS model) are both compared with one reference, the baseline model of seed "
               "s′ = s + 1 (cyclically), so the reference's own variation cancels; each baseline model is also the "
               "reference of another seed, so the pairs are not fully independent and the interval is somewhat "
               "optimistic; a baseline pair of seeds {s, s′} is used once (with two seeds the cyclic references "
               "repeat it, and that seed is dropped)")


def _refs_note(used: list, alt: dict | None = None) -> str:
    """The note's sentence on retrained runs used by R7/R8 pairs (empty if none): baseline runs, and runs of the arm
    itself (`alt`, `{seed: workdir}`) standing in for archived ones that could not be compared."""
    if not used:
        return ""

    def names(ws):  # <root>/<run>: the same whether read where analysed or from the archive (once each)
        return ", ".join(dict.fromkeys(f"{storage.basename(storage.dirname(w))}/{storage.basename(w)}" for w in ws))

    own = [w for w in used if w in (alt or {}).values()]
    base = [w for w in used if w not in own]
    note = ""
    if base:
        note += ("; where a model of the arm could only be compared with a retrained reference (the archived one had "
                 "no checkpoint left), its pair uses the full-data runs trained again with the same configs ("
                 + names(base) + "; not bit for bit the archived models): the pair's baseline is the retrained model "
                 "of its seed, compared with the same retrained reference")
    if own:
        note += ("; where the arm's archived model of a seed could no longer be compared (no checkpoint, no stored "
                 "Gram matrices), its run trained again with the same config stands in for that pair only ("
                 + names(own) + "; the arm's other rows read the archived runs)")
    return note


def _paired_cka(arm: dict, base: dict, results: dict, refs: dict | None = None,
                used: list | None = None, alt: dict | None = None) -> tuple[list[float], list[float]]:
    """R7/R8 pairs: per seed s present in both arms (both analysed against the same reference, the full-data CLS
    run of `cross_seed_reference(s)`), the last-block CKA of the arm's model and of the full-data model of seed s;
    two lists in seed order.

    A baseline value is the CKA of two full-data models, {s, s′}, which is symmetric: with only two full-data seeds
    the cyclic references give the pair {0, 1} twice (0 → 1 and 1 → 0), one number counted as two. A pair of seeds
    whose baseline pair was already used is therefore dropped (never pseudo-replicated); with three or more seeds the
    cyclic pairs are all distinct.

    `refs` (`{seed: workdir}`, the baseline runs trained again, `reference_run`): where the arm's model of seed s was
    compared with a retrained reference, the baseline of the pair is the retrained model of seed s compared with that
    same reference (both models of the pair meet one reference); the retrained runs used are appended to `used`.
    `alt` (`{seed: workdir}`, the arm's runs trained again): where the arm's model of seed s has no cross-seed CKA
    (archived before stored Grams, no checkpoint), its retrained run of seed s stands in for the pair.

    Raises:
      ValueError: the two models of a pair were analysed against different references.
    """
    t, b, pairs = [], [], set()
    seed_of = {w: s for s, w in [*base.items(), *(refs or {}).items()]}
    for s in sorted((set(arm) | set(alt or {})) & set(base)):
        wb = base[s]
        wt = arm.get(s)
        if (wt is None or "cka_across" not in results.get(wt, {})) and alt and s in alt \
                and "cka_across" in results.get(alt[s], {}):
            wt = alt[s]
            if used is not None and wt not in used:
                used.append(wt)
        rt, rb = results.get(wt, {}), results[wb]
        if "cka_across" not in rt:
            continue
        other = rt["cka_across"]["other"]
        if refs and s in refs and rb.get("cka_across", {}).get("other") != other \
                and results.get(refs[s], {}).get("cka_across", {}).get("other") == other:
            wb = refs[s]
            rb = results[wb]
            if used is not None:
                used += [w for w in (wb, other) if w not in used]
        if "cka_across" in rb:
            if other != rb["cka_across"]["other"]:
                raise ValueError(f"{wt} and {wb} were analysed against different references "
                                 f"({other} vs {rb['cka_across']['other']}); delete their analysis/ folders and "
                                 "rerun")
            pair = frozenset((s, seed_of.get(other, other)))
            if pair in pairs:
                continue
            pairs.add(pair)
            t.append(_last_block_cka(rt))
            b.append(_last_block_cka(rb))
    return t, b


def own_permutation_runs(arms: dict) -> dict:
    """`{seed: workdir}` of the patch-grain permuted ViT runs (CLS, standard attention, no ablation, all the data)
    whose permutation seed equals their initialization seed (`report._permutation`: "patch" is permutation 0,
    "patch, π seed k" permutation k): J4 over permutations, one permutation per seed. Seed 0 is the shared arm's
    seed-0 run (the same effective config), seeds k ≥ 1 come from the arm "patch, π seed k"."""
    out = {}
    for key, by_seed in arms.items():
        if key[:3] != BASE[:3] or key[4] != 1.0 or not key[3].startswith("patch"):
            continue
        if key[3] == "patch":
            pi = 0
        elif key[3].startswith("patch, π seed "):
            pi = int(key[3].rsplit(" ", 1)[1])
        else:  # another grain
            continue
        if pi in by_seed:
            out[pi] = by_seed[pi]
    return out


def j4_inputs(runs: list[str], res: list[dict], what: str, label: str = "",
              keys: tuple[str, str] = ("J4", "J4order"), shared_with: str = "") -> list[dict]:
    """J4 and J4order (or the `keys` given: J4pi, J4piorder for one permutation per seed) from the analyses `res` of
    the permuted runs `runs` (one per seed): the posemb locality after π⁻¹ minus its null, and after π⁻¹ minus in
    token order (Spearman ρ; negative = local), one-sample t on 0. The notes give, per seed, the locality in token
    order against the null (in the null's s.d.s) and how much grid geometry the run's permutation keeps
    (`posemb.distance_rank_kept`, against random permutations); `shared_with`: a sentence on runs shared with the other
    design."""
    ok = [(w, r) for w, r in zip(runs, res) if r.get("posemb", {}).get("reindexed_by_inverse_permutation")]
    runs = [w for w, _ in ok]
    pos = [r["posemb"] for _, r in ok]
    vals = [p["locality_spearman"] - p["locality_null"]["mean"] for p in pos]
    before = [p["locality_spearman_token_order"] - p["locality_null"]["mean"] for p in pos]
    in_sd = [b / p["locality_null"]["sd"] if p["locality_null"].get("sd") else float("nan") for b, p in zip(before, pos)]
    order = [p["locality_spearman"] - p["locality_spearman_token_order"] for p in pos]
    recs = [permute.load_permutation(w) for w in runs]  # each run's permutation.json (its seed and grid)
    perms = [str(rec["seed"]) for rec in recs]
    kept = [posemb.distance_rank_kept(rec["perm"], tuple(rec["grid"])) for rec in recs]
    chance = ""
    if recs:
        m, sd = posemb.random_distance_rank_kept(tuple(recs[0]["grid"]))
        chance = f" (random permutations: {m:+.3f} ± {sd:.3f})"
    shared = len(set(perms)) == 1
    fmt = lambda xs, d=3: ", ".join(f"{x:+.{d}f}" for x in xs)  # noqa: E731
    return [{"key": keys[0], "comparison": f"patches permuted (blocks of the patch size), {what}: locality after π⁻¹ − "
             f"null{label}", "treatment": vals, "null": 0.0, "method": "one-sample", "runs": runs,
             "baseline_label": "its null, subtracted per seed",
             "note": f"in token order (before π⁻¹) the locality minus the same null is {fmt(before)} per seed "
             f"({fmt(in_sd, 1)} null s.d.s; negative: more local than chance as trained); the permutations keep grid "
             f"distances in rank at ρ = {fmt(kept)}{chance}; data.permutation_seed per seed: " + ", ".join(perms)
             + (" (one shared permutation: n counts initializations, not permutations)" if shared
                else " (a permutation per seed: n counts permutations and initializations)")
             + f". {keys[1]}, after π⁻¹ against token order, is the stricter test" + shared_with},
            {"key": keys[1], "comparison": f"patches permuted (blocks of the patch size), {what}: locality after "
             f"π⁻¹ − in token order{label}", "treatment": order, "null": 0.0, "method": "one-sample", "runs": runs,
             "baseline_label": "token order, subtracted per seed",
             "note": f"per seed: {fmt(order)}" + shared_with}]


def _registers(key: tuple) -> int:
    """The register tokens of an arm key (`find_arms`); 0 for a key without the entry."""
    return int(key[5]) if len(key) > 5 else 0


def outlier_fraction(res: dict) -> float | None:
    """D1's measure from an `analysis.json` dict: the fraction of final-block patch tokens above the robust norm
    threshold (median + k·1.4826·MAD, `analysis/outliers.py`); None for an analysis made before it existed."""
    o = res.get("norm_outliers")
    return None if o is None else float(o["blocks"][o["analysis_block"]]["fraction_above_robust"])


def _loc_margin(res: dict) -> float:
    """R5's localization margin of an `analysis.json` dict (`localization.margin`)."""
    return float(localization.margin(res["localization"]["matrix"]))


def d1_inputs(arms: dict, results: dict, label: str = "") -> list[dict]:
    """Darcet et al. 2024 (D1): whether high-norm patch tokens appear at this scale — the baseline arm's outlier
    fraction against 0 (one-sample t) — and what register tokens change: the outlier fraction (D1reg) and the
    localization margin (D1loc) of each register arm (CLS, standard attention, intact, unpermuted, all the data)
    against the baseline (Welch t). Runs whose analysis predates the outlier measures are left out of D1/D1reg."""
    base = arms.get(BASE, {})
    base_runs = [base[s] for s in sorted(base)]
    out = []
    fb = [f for f in (outlier_fraction(results[w]) for w in base_runs) if f is not None]
    if fb:
        out.append({"key": "D1", "comparison": f"no register tokens: fraction of final-block patch tokens above "
                    f"median + 6·1.4826·MAD of their norms{label}", "treatment": fb, "null": 0.0,
                    "method": "one-sample", "baseline_label": "0 (no high-norm tokens)",
                    "runs": [w for w in base_runs if outlier_fraction(results[w]) is not None]})
    for key, by_seed in sorted(arms.items()):
        if not _registers(key) or key[:5] != BASE[:5] or not base:
            continue
        runs = [by_seed[s] for s in sorted(by_seed)]
        ft = [f for f in (outlier_fraction(results[w]) for w in runs) if f is not None]
        if ft and fb:
            out.append({"key": "D1reg", "comparison": f"{_registers(key)} register tokens vs none: fraction of "
                        f"final-block patch tokens above the robust norm threshold{label}", "treatment": ft, "baseline": fb,
                        "method": "welch", "runs": runs + base_runs})
        out.append({"key": "D1loc", "comparison": f"{_registers(key)} register tokens vs none: localization margin "
                    f"of the final block{label}", "treatment": [_loc_margin(results[w]) for w in runs],
                    "baseline": [_loc_margin(results[w]) for w in base_runs], "method": "welch",
                    "runs": runs + base_runs})
    return out


def verdict_inputs(arms: dict, results: dict, refs: dict | None = None, retrained: dict | None = None) -> list[dict]:
    """The per-seed values of J4, R2, R4, R5, R6, R7, R8 and D1 (`report.verdicts_from_file` format); `refs`: the
    retrained baseline runs that R7/R8 pairs may use (`_paired_cka`); `retrained`: `{arm key: {seed: workdir}}`,
    other arms' runs trained again, which stand in for an R7/R8 pair only (`_paired_cka`'s `alt`)."""
    base = arms.get(BASE, {})
    base_runs = [base[s] for s in sorted(base)]
    label = f" ({sweep_label(base_runs[0])})" if base_runs else ""
    out = []
    out += d1_inputs(arms, results, label)
    for key, by_seed in sorted(arms.items()):
        runs = [by_seed[s] for s in sorted(by_seed)]
        res = [results[w] for w in runs]
        if _registers(key):  # register tokens: D1's arm only (d1_inputs)
            continue
        if key[4] < 1.0 and key[:4] == BASE[:4] and base:  # a data-size arm: R2, R2local, R6, R7
            pct = f"{100 * key[4]:g} %"
            for name, idx, what in (("R2", 0, "mean attention distance of the early heads"),
                                    ("R2local", 1, "fraction of local early heads")):
                out.append({"key": name, "comparison": f"{pct} vs 100 % of the training data: {what}{label}",
                            "treatment": [early_heads(r)[idx] for r in res],
                            "baseline": [early_heads(results[w])[idx] for w in base_runs], "method": "welch",
                            "runs": runs + base_runs})
            shots_t = [v for v in map(_fewshot, runs) if v is not None]
            shots_b = [v for v in map(_fewshot, base_runs) if v is not None]
            if shots_t and shots_b:
                out.append({"key": "R6",
                            "comparison": f"{pct} vs 100 % of the pretraining data: 10-shot digits{label}",
                            "treatment": shots_t, "baseline": shots_b, "method": "welch", "runs": runs + base_runs})
            used: list = []
            t, b = _paired_cka(by_seed, base, results, refs, used, (retrained or {}).get(key))
            out.append({"key": "R7", "comparison": f"{pct} subset vs full data: last-block CKA with a full-data model "
                        f"of another seed, paired on that reference{label}", "treatment": t, "baseline": b,
                        "method": "paired", "runs": runs + base_runs + used,
                        "note": PAIRED_NOTE + _refs_note(used, (retrained or {}).get(key))})
            continue
        if key[4] < 1.0:
            continue
        if key[3] == "patch" and key[:3] == BASE[:3]:  # π⁻¹ re-indexes the posemb grid only at the patch grain
            out += j4_inputs(runs, res, "one shared permutation", label)
        if key[2] != "-" and key[:2] == BASE[:2] and key[3] == "none" and base:
            block = int(key[2].split(":")[0].split(",")[0])
            split = lambda r: cka_split(r["cka"]["matrix"], r["cka"]["layers"], block)  # noqa: E731
            out.append({"key": "R4", "comparison": f"skip connections removed ({key[2]}) vs intact{label}",
                        "treatment": [split(r) for r in res],
                        "baseline": [split(results[w]) for w in base_runs], "method": "welch",
                        "runs": runs + base_runs})
        if key[1] == "gap" and key[2] == "-" and key[3] == "none" and base:
            margin = lambda r: localization.margin(r["localization"]["matrix"])  # noqa: E731
            out.append({"key": "R5", "comparison": f"GAP vs CLS: localization margin of the final block{label}",
                        "treatment": [margin(r) for r in res],
                        "baseline": [margin(results[w]) for w in base_runs], "method": "welch",
                        "runs": runs + base_runs})
            used = []
            t, b = _paired_cka(by_seed, base, results, refs, used, (retrained or {}).get(key))
            out.append({"key": "R8", "comparison": f"GAP vs CLS: last-block CKA with a CLS model of another seed, "
                        f"paired on that reference{label}", "treatment": t, "baseline": b, "method": "paired",
                        "runs": runs + base_runs + used,
                        "note": PAIRED_NOTE + _refs_note(used, (retrained or {}).get(key))})
    own = own_permutation_runs(arms)
    if set(own) - {0}:  # the per-seed-permutation arm exists: J4 over permutations
        seeds = sorted(own)
        out += j4_inputs([own[s] for s in seeds], [results[own[s]] for s in seeds],
                         "a permutation per seed", label, keys=("J4pi", "J4piorder"),
                         shared_with=("; seed 0 is the same run as seed 0 of the shared-permutation design (J4, "
                                      "J4order): the two designs are not independent" if 0 in own else ""))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="a sweep root (local or gs://)")
    ap.add_argument("--out", required=True, help="the verdicts.json to write")
    ap.add_argument("--refs", action="append", default=[],
                    help="a root of runs trained again with the sweep's configs, with checkpoints or stored Grams: "
                    "R7/R8 use its baseline runs (full-data CLS) where the archived ones have neither, and its "
                    "GAP / data-subset runs in place of archived ones that cannot be compared (repeatable)")
    ap.add_argument("--analysis_examples", type=int, default=1024)
    ap.add_argument("--analysis_batch", type=int, default=256)
    args = ap.parse_args(argv)
    if not storage.exists(args.runs):
        print(f"error: --runs {args.runs} does not exist", file=sys.stderr)
        return 2
    arms = find_arms(args.runs)
    if BASE not in arms:
        print(f"error: no finished baseline ViT run (CLS, standard attention, unpermuted) below {args.runs}",
              file=sys.stderr)
        return 1
    refs, retrained = {}, {}
    for root in args.refs:
        for key, by_seed in find_arms(root).items():
            if key == BASE:
                refs.update(by_seed)
            elif key[1] in ("token", "gap") and key[2] == "-" and key[3] == "none" and key in arms:  # R7/R8 arms
                retrained.setdefault(key, {}).update(by_seed)
    results = ensure_analyses(arms, args.analysis_examples, args.analysis_batch, refs, retrained)
    rows = verdict_inputs(arms, results, refs, retrained)
    base = arms[BASE]
    rows += r1_inputs(ensure_cross_cka(base, find_resnets(args.runs), args.analysis_examples, args.analysis_batch),
                      f" ({sweep_label(base[min(base)])})")
    parent = str(args.out).rstrip("/").rsplit("/", 1)[0] if "/" in str(args.out) else "."
    storage.makedirs(parent)
    storage.write_text(args.out, json.dumps(rows, indent=1))
    print(f"{len(rows)} verdict inputs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
