"""The data-size study over a sweep's `data.train_fraction` runs: catalog rows R2, R6 and R7 (Raghu et al. 2021).

    python -m vit_jax_struct.experiments.datasize --runs=runs/cifar_ablations --steps=4000 --out=docs/results/datasize

Finds the ViT runs of `--runs` (a sweep root; each run folder has `config.json`) that differ only in
`data.train_fraction` and `seed` (CLS token, standard attention, no permutation or skip ablation, `total_steps` =
`--steps`), runs `--mode=analyze` on each that lacks it (`analysis/analysis.json`; every model, subset or full-data, is compared
with the full-data model of another seed, so the full-data pairs are the seed-to-seed reference for R7), and writes
into `--out`:

- `attention_distance.png` / R2 (§4, Fig. 6: "with too little data the lower layers do not learn to attend
  locally"): mean attention distance per head and block, heads sorted per block, one panel per data size;
  `local_heads_early` = the share of heads in the first third of the blocks whose mean distance is below
  `LOCAL_FRACTION` × the distance of uniform attention.
- `cka_to_full.png` / R7 (§7, Fig. 13: "higher layers of models trained on smaller subsets diverge from the
  full-data model's"): linear CKA (Kornblith et al. 2019, Eq. 4; minibatch estimator of Nguyen et al. 2021) of each
  block of a subset model with the same block of a full-data model of another seed, and of two full-data seeds.
- `fewshot.png` / R6 (§7, Fig. 12: "more pretraining data → better few-shot transfer"): the in-training few-shot
  evaluator's last k-shot ridge accuracies (`config.fewshot`) on each dataset vs the data size, and the same
  evaluator on the untrained models (`fewshot_at_init`: what random features of the architecture give).
- `README.md` (tables, mean ± spread over seeds) and `datasize.json` (every number).

Raises (from `main`): FileNotFoundError when no run of `--steps` is found or there is no full-data run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from vit_jax_struct import storage
from vit_jax_struct.analysis import attention
from vit_jax_struct.experiments import stats

LOCAL_FRACTION = attention.LOCAL_FRACTION  # local: mean distance < 75 % of uniform attention's distance


def _config(workdir: str) -> dict | None:
    path = storage.join(workdir, "config.json")
    return json.loads(storage.read_text(path)) if storage.exists(path) else None


def is_data_size_run(c: dict, steps: int) -> bool:
    """Whether the run config `c` (a `config.json` dict) is a plain ViT of `steps` steps, which may differ from the
    sweep's baseline only in `data.train_fraction` and `seed`."""
    m, d = c.get("model", {}), c.get("data", {})
    return (m.get("name", "vit") == "vit" and m.get("classifier", "token") == "token"
            and m.get("attention", "standard") == "standard" and not m.get("skip_ablation")
            and not d.get("permute_patches") and int(c.get("total_steps", 0)) == steps)


# Keys a data-size run may differ in from the others of its study (the knobs it varies, and bookkeeping).
VARYING = ("seed", "data.train_fraction", "data.subset_seed")


def differing_keys(a: dict, b: dict) -> list[str]:
    """The dotted keys, outside `VARYING`, whose values differ between two run configs (`config.json` dicts).

    A key present in only one of them is not a difference: a config written by an older version of the package
    lacks the keys added since, whose defaults keep the older behaviour.
    """
    fa, fb = stats.flatten(a), stats.flatten(b)
    return sorted(k for k in set(fa) & set(fb) if k not in VARYING and fa[k] != fb[k])


def find_runs(root: str, steps: int) -> list[dict]:
    """`[{workdir, name, fraction, seed, config}]` of the data-size runs under `root`, by fraction then seed.

    `fraction` is `data.train_fraction`, with 0 (all data) as 1.0. Of the finished plain-ViT runs of `steps` steps,
    only those whose config equals the lowest-seed full-data run's in every key but `VARYING` (`differing_keys`)
    belong to the study (a run with another learning rate, `data.train_examples`, data source, … is left out, with
    a note on stdout naming the keys).
    """
    found = []
    for name in sorted(storage.listdir(root)):
        workdir = storage.join(root, name)
        c = _config(workdir)
        if c is None or not is_data_size_run(c, steps):
            continue
        if not storage.exists(storage.join(workdir, "final_metrics.json")):
            continue  # not finished
        frac = float(c["data"].get("train_fraction") or 0.0) or 1.0
        found.append({"workdir": workdir, "name": name, "fraction": frac, "seed": int(c.get("seed", 0)),
                      "config": c})
    full = sorted((r for r in found if r["fraction"] == 1.0), key=lambda r: (r["seed"], r["name"]))
    if full:
        ref, kept = full[0], []
        for r in found:
            diff = differing_keys(ref["config"], r["config"])
            if diff:
                print(f"[datasize] {r['name']}: left out (its config differs from {ref['name']}'s in "
                      f"{', '.join(diff)})", flush=True)
            else:
                kept.append(r)
        found = kept
    seen = set()
    for r in sorted(found, key=lambda r: r["name"]):
        if (r["fraction"], r["seed"]) in seen:
            raise ValueError(f"two runs of train fraction {r['fraction']:g} and seed {r['seed']} under {root} "
                             f"(one is {r['name']}): keep one per fraction and seed")
        seen.add((r["fraction"], r["seed"]))
    return sorted(found, key=lambda r: (r["fraction"], r["seed"]))


def reference_for(run: dict, runs: list[dict]) -> str | None:
    """The run a model's cross-model CKA is measured against: the full-data run of the next other seed, for a subset
    model and a full-data model alike (`verdicts.cross_seed_reference`; None if there is no such run). Never the
    full-data model of the same seed: the shared initialization would flatter a subset model's similarity."""
    from vit_jax_struct.experiments import verdicts

    return verdicts.cross_seed_reference(run["seed"], {r["seed"]: r["workdir"] for r in runs if r["fraction"] == 1.0})


def ensure_analysis(runs: list[dict], num_examples: int, batch: int) -> None:
    """Runs `analysis.run.analyze(run, compare=reference_for(run))` for every run whose `analysis/analysis.json`
    is missing or was compared with another model (an existing one against the same model is reused)."""
    from vit_jax_struct.analysis import run as analysis_run

    for r in runs:
        ref = reference_for(r, runs)
        path = storage.join(r["workdir"], "analysis", "analysis.json")
        if storage.exists(path):
            got = json.loads(storage.read_text(path))
            if got.get("cka_across", {}).get("other") == ref:
                continue  # reused (whatever its number of examples): delete RUN/analysis to measure again
        print(f"[datasize] analysing {r['name']} (CKA against {ref})", flush=True)
        analysis_run.analyze(r["workdir"], compare=ref, num_examples=num_examples, batch=batch)


def fewshot_at_init(workdir: str) -> dict:
    """`{"<name>_<k>shot": accuracy}` of the run's few-shot evaluator (`config.fewshot`, the same datasets, shots and
    draws) on the untrained model: the parameters `init_state` gives the run's seed, as at its step 0. The
    reference for R6: what the architecture's random features transfer without any pretraining.

    Raises:
      ValueError: the run has no `fewshot.every_steps` (no few-shot evaluator configured).
    """
    import jax
    import ml_collections

    from vit_jax_struct.train import fewshot_eval, trainer

    config = ml_collections.ConfigDict(_config(workdir))
    if not config.get("fewshot", {}).get("every_steps"):
        raise ValueError(f"run {workdir} has no few-shot evaluator (config.fewshot.every_steps is 0)")
    config.mesh = ml_collections.ConfigDict(dict(data=1, fsdp=1))
    parts = trainer.build(config, devices=jax.devices()[:1])
    state = parts["init_state"](jax.random.fold_in(jax.random.key(config.seed), 0))  # as train_and_evaluate
    variables = trainer.model_variables(state)
    shardings = jax.tree.map(lambda x: x.sharding, variables)
    ev = fewshot_eval.FewShotEvaluator(config, parts["model"], parts["eval_pp"], parts["mesh"], shardings,
                                       parts["eval_per_host_batch"])
    return {k.removeprefix("fewshot/"): v for k, v in ev.run(variables).items()}


def _mean_spread(values) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    values = [float(v) for v in values]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(runs: list[dict], grid_uniform_px: float, at_init: list[dict] | None = None) -> dict:
    """Every number of the study per fraction: attention distances `[blocks][heads]` per seed, the share of local
    heads in the early blocks, the per-block CKA to the reference model, eval accuracy and few-shot accuracies;
    `at_init`: few-shot accuracies of the untrained models (`fewshot_at_init`, one dict per seed)."""
    by_frac: dict = {}
    seen_pairs = set()  # pairs of full-data models already compared (CKA is symmetric: 0 → 1 and 1 → 0 are one pair)
    for r in runs:
        a = json.loads(storage.read_text(storage.join(r["workdir"], "analysis", "analysis.json")))
        final = json.loads(storage.read_text(storage.join(r["workdir"], "final_metrics.json")))
        dist = a["attention_distance_pixels"]
        blocks = sorted(dist)
        early = blocks[:max(1, len(blocks) // 3)]
        heads = np.concatenate([np.asarray(dist[b]) for b in early])
        cross = a.get("cka_across")
        cka_diag = None
        pair = frozenset((r["workdir"], cross["other"])) if cross else None
        if cross and (r["fraction"] < 1.0 or pair not in seen_pairs):  # each pair of full-data seeds once
            seen_pairs.add(pair)
            m = np.asarray(cross["matrix"])
            cka_diag = {name: float(m[i, cross["other_layers"].index(name)]) for i, name in enumerate(cross["layers"])
                        if name in cross["other_layers"]}
        entry = by_frac.setdefault(str(r["fraction"]), {"fraction": r["fraction"], "seeds": []})
        entry["seeds"].append({
            "seed": r["seed"], "run": r["name"], "step": a["step"],
            "eval_accuracy": final.get("eval/accuracy"),
            "fewshot": {k.removeprefix("fewshot/"): v for k, v in final.items() if k.startswith("fewshot/")},
            "attention_distance_pixels": {b: dist[b] for b in blocks},
            "early_blocks": early,
            "early_mean_distance_px": float(heads.mean()),
            "early_min_distance_px": float(heads.min()),
            "local_heads_early": float((heads < LOCAL_FRACTION * grid_uniform_px).mean()),
            "cka_to_reference": cka_diag, "reference": cross["other"] if cross else None})
    return {"uniform_attention_px": grid_uniform_px, "local_threshold_px": LOCAL_FRACTION * grid_uniform_px,
            "fractions": [by_frac[k] for k in sorted(by_frac, key=float)], "fewshot_at_init": at_init or []}


def _fmt(values, digits=3) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    m, s = _mean_spread(values)
    return f"{m:.{digits}f}" + (f" ± {s:.{digits}f}" if len(values) > 1 else "") + f" (n={len(values)})"


def render(summary: dict, command: str, has_cka: bool = True, has_fewshot: bool = True) -> str:
    """The markdown page (`README.md`) of a `summarize` result (`has_cka`/`has_fewshot`: whether those figures
    were written)."""
    fr = summary["fractions"]
    lines = ["# Data size: R2 (attention distance), R6 (few-shot transfer), R7 (CKA to the full-data model)", "",
             "<!-- generated by vit_jax_struct/experiments/datasize.py -->", "", "```", command, "```", "",
             f"Mean ± sample standard deviation over seeds. Uniform attention on this grid: "
             f"{summary['uniform_attention_px']:.1f} px; a head is local below {summary['local_threshold_px']:.1f} px "
             f"({LOCAL_FRACTION:.0%} of it). n: seeds (for R7's full-data row, distinct pairs of full-data seeds). "
             "These tables describe the runs; the verdicts on R2, R6 and R7 (Δ with its 95 % interval, judged only "
             "with 3 seeds per arm) are in [the catalog](../../experiments.md).", "",
             "## R2 — attention distance in the early blocks", "",
             "![attention distance per data size](attention_distance.png)", "",
             "| train fraction | test accuracy | early blocks | mean distance (px) | most local head (px) | local heads |",
             "|---|---|---|---|---|---|"]
    for f in fr:
        s = f["seeds"]
        lines.append(f"| {f['fraction']:g} | {_fmt([x['eval_accuracy'] for x in s], 4)} | "
                     f"{', '.join(s[0]['early_blocks'])} | {_fmt([x['early_mean_distance_px'] for x in s], 2)} | "
                     f"{_fmt([x.get('early_min_distance_px') for x in s], 2)} | "
                     f"{_fmt([x['local_heads_early'] for x in s], 2)} |")
    lines += ["", "## R7 — CKA of each block to the same block of the full-data model", "",
              "![CKA to the full-data model](cka_to_full.png)" if has_cka else
              "No figure: there is no subset model and no second full-data seed to compare with.", ""]
    layers = next((list(x["cka_to_reference"]) for f in fr for x in f["seeds"] if x["cka_to_reference"]), [])
    if layers:
        lines += ["| train fraction | n | " + " | ".join(layers) + " |", "|---" * (len(layers) + 2) + "|"]
        for f in fr:
            vals = [[x["cka_to_reference"][name] for x in f["seeds"] if x["cka_to_reference"]] for name in layers]
            label = f"{f['fraction']:g}" + (" (another seed's full-data model)" if f["fraction"] == 1.0 else "")
            lines.append(f"| {label} | {len(vals[0])} | " + " | ".join(_fmt(v, 3).split(" (n=")[0] for v in vals)
                         + " |")
    lines += ["", "## R6 — few-shot linear probes of the pre-logits (closed-form ridge on {−1, +1} targets)", "",
              "`cifar10_*`: the pretraining task's own classes (in-domain, not transfer); `digits_*`: a task never "
              "seen in pretraining (other classes, another domain) — R6's transfer, judged at 10 shots.", "",
              "![few-shot accuracy per data size](fewshot.png)" if has_fewshot else
              "No figure: the runs have no few-shot evaluator (`config.fewshot.every_steps` 0).", ""]
    keys = sorted({k for f in fr for x in f["seeds"] for k in x["fewshot"]},
                  key=lambda k: (k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1].removesuffix("shot"))))
    if keys:
        lines += ["| train fraction | n | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
        if summary.get("fewshot_at_init"):
            init = summary["fewshot_at_init"]
            lines.append(f"| 0 (untrained: the initialization) | {len(init)} | " + " | ".join(
                _fmt([x.get(k) for x in init], 3).split(" (n=")[0] for k in keys) + " |")
        for f in fr:
            lines.append(f"| {f['fraction']:g} | {sum(1 for x in f['seeds'] if x['fewshot'])} | " + " | ".join(
                _fmt([x["fewshot"].get(k) for x in f["seeds"]], 3).split(" (n=")[0] for k in keys) + " |")
    return "\n".join(lines) + "\n"


def write(summary: dict, out: str, command: str) -> list[str]:
    """Writes the figures, `README.md` and `datasize.json` into `out`; returns the paths written (a figure without
    data, e.g. the few-shot one for runs without `config.fewshot`, is left out and the page says why)."""
    from vit_jax_struct.analysis import plots

    storage.makedirs(out)
    paths = [storage.join(out, n) for n in ("attention_distance.png", "cka_to_full.png", "fewshot.png",
                                           "README.md", "datasize.json")]
    fr = summary["fractions"]
    plots.attention_distance_panels(
        {f"train fraction {f['fraction']:g}": [x["attention_distance_pixels"] for x in f["seeds"]] for f in fr},
        paths[0], uniform=summary["uniform_attention_px"], local=summary["local_threshold_px"],
        early=max((len(x["early_blocks"]) for f in fr for x in f["seeds"]), default=0))
    cka = {}
    for f in fr:
        rows = [x["cka_to_reference"] for x in f["seeds"] if x["cka_to_reference"]]
        if rows:
            label = (f"train fraction {f['fraction']:g} vs 1.0 (another seed)" if f["fraction"] < 1.0
                     else "1.0 vs 1.0 (another seed)")
            cka[label] = {name: [r[name] for r in rows] for name in rows[0]}
    written = [paths[0]]
    if cka:  # needs a subset model or a second full-data seed
        plots.lines_with_spread(cka, paths[1], "layer (each compared with the same layer of a full-data model)",
                                "linear CKA with the full-data model",
                                "R7: CKA of each layer to the full-data model (higher layers diverge?)",
                                ylim=(0, 1.02))
        written.append(paths[1])
    few: dict = {}
    untrained: dict = {}
    for x in summary.get("fewshot_at_init", []):
        for k, v in x.items():
            untrained.setdefault(k, []).append(v)
    for f in fr:
        for x in f["seeds"]:
            for k, v in x["fewshot"].items():
                few.setdefault(k, {}).setdefault(f"{f['fraction']:g}", []).append(v)
    few = {k: few[k] for k in sorted(few) if k.endswith("_10shot")} or few
    if few:  # needs runs with the few-shot evaluator (config.fewshot.every_steps)
        plots.lines_with_spread(few, paths[2], "pretraining train fraction (categories, not to scale)",
                                "few-shot test accuracy",
                                "R6: 10-shot linear probe of the pre-logits vs pretraining data",
                                reference={k: untrained[k] for k in few if k in untrained},
                                reference_label="untrained (the initialization)")
        written.append(paths[2])
    storage.write_text(paths[3], render(summary, command, has_cka=bool(cka), has_fewshot=bool(few)))
    storage.write_text(paths[4], json.dumps(summary, indent=1))
    return written + paths[3:]


def main(argv=None) -> int:
    """The command line; a bad argument or a study that cannot be made prints one line (`error: …`) and returns 2."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="sweep root holding the train_fraction runs (local or gs://)")
    ap.add_argument("--steps", type=int, required=True, help="the runs' total_steps (one budget per study)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--analysis_examples", type=int, default=1024, help="test images per analysis")
    ap.add_argument("--analysis_batch", type=int, default=256, help="images per CKA minibatch")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps {args.steps} must be ≥ 1")
    try:
        return _study(args, argv)
    except (FileNotFoundError, ValueError, storage.StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _study(args, argv) -> int:
    if not storage.isdir(args.runs):
        raise FileNotFoundError(f"--runs {args.runs} is not a folder")
    if storage.exists(args.out) and not storage.isdir(args.out):
        raise ValueError(f"--out {args.out} exists and is not a folder")
    runs = find_runs(args.runs, args.steps)
    if not runs:
        configs = [_config(storage.join(args.runs, n)) for n in storage.listdir(args.runs)]
        budgets = sorted({int(c.get("total_steps", 0)) for c in configs
                          if c and is_data_size_run(c, int(c.get("total_steps", 0)))})
        raise FileNotFoundError(f"no finished data-size run of {args.steps} steps under {args.runs} (plain-ViT runs "
                                f"found with total_steps {budgets or 'none'})")
    if not any(r["fraction"] == 1.0 for r in runs):
        raise FileNotFoundError(f"no full-data run (train_fraction 0 or 1) of {args.steps} steps under {args.runs}")
    ensure_analysis(runs, args.analysis_examples, args.analysis_batch)
    at_init = [fewshot_at_init(r["workdir"]) for r in runs if r["fraction"] == 1.0
               and (r["config"].get("fewshot") or {}).get("every_steps")]
    c = runs[0]["config"]
    from vit_jax_struct.analysis import attention

    patch = int(c["model"].get("patch_size") or int(str(c["model"]["variant"]).split("/")[1]))
    grid = (int(c["data"]["image_size"]) // patch,) * 2
    summary = summarize(runs, float(attention.grid_distances(grid, patch).mean()), at_init)
    command = " ".join(["python -m vit_jax_struct.experiments.datasize", *(argv or sys.argv[1:])])
    for p in write(summary, args.out, command):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
