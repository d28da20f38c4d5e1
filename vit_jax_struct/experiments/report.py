"""Scoreboard: the runs of one or more sweeps, their accuracy comparisons and every catalog verdict, with intervals.

    python -m vit_jax_struct.experiments.report --runs=runs/cifar100_permuted [--runs=OTHER …] --out=docs/results \\
        [--verdicts=docs/results/theory/verdicts.json …] [--no-curves]

Reads every workdir below the given folders (a folder with `config.json` and `metrics.jsonl`, e.g. a sweep root, or
its archive of small files under `docs/results/runs/`), takes its last `eval/accuracy`, and:

- drops *smoke* runs (their step budget is not one of the comparison's declared budgets, `catalog.COMPARISONS`) and
  unfinished ones from every judgement, and counts runs whose training configs are equal (`stats.training_key`) once;
  both are listed, and printed as warnings;
- for each accuracy comparison of the catalog (J1 positional attention, J2 permuted patches and its positive control,
  J3 CNNs, R3 skip removal, R5 GAP accuracy) compares the treatment arm with the baseline arm of the same family,
  dataset, model and step budget: Δ in points with Welch's 95 % interval and its degrees of freedom
  (`vit_jax_struct/experiments/stats.py`), n per arm, and the status against the paper (`stats.status`, the margins and
  directions of `catalog.JUDGEMENTS`);
- adds the verdicts of result files (`--verdicts`, JSON lists written by the theory study and the run analyses:
  per-seed values, judged the same way);
- writes `OUT/scoreboard.md`, `OUT/runs.csv`, `OUT/verdicts.json` (every verdict, read by the catalog page) and PNG
  training curves in `OUT/curves/` (per run and overlaid per comparison);
- with `--listed=FOLDER` (another setting's results folder), adds that folder's runs.csv rows to `OUT/runs.csv`,
  their `scoreboard` column naming FOLDER, so one runs.csv lists the runs of every setting; they are judged only in
  FOLDER's scoreboard.
"""

from __future__ import annotations

import argparse
import collections
import csv
import io
import json
import os
import re
import sys

from vit_jax_struct import storage
from vit_jax_struct.experiments import catalog, stats
from vit_jax_struct.train import metrics

COLUMNS = ("run", "dataset", "model", "attention", "classifier", "skip_ablation", "registers", "permutation",
           "train_fraction", "seed", "steps", "eval/accuracy", "smoke", "duplicate_of", "device", "dtype", "code",
           "scoreboard")
# `scoreboard`: the results folder whose scoreboard judges the run (OUT for the runs read; another setting's folder
# for the rows `--listed` adds from its runs.csv).


def _model_name(m: dict) -> str:
    if m.get("name", "vit") == "vit":
        size = f"w{m.get('width') or ''}d{m.get('depth') or ''}" if m.get("width") or m.get("depth") else ""
        return f"ViT-{m.get('variant')}{'/' + size if size else ''}"
    if m["name"] == "resnet":
        width = m.get("width", 64)
        return f"ResNet-{m.get('depth')}" + (f" (width {width})" if width != 64 else "")
    if m["name"] == "vgg":
        width = m.get("width", 64)
        return "VGG-19" + (f" (width {width})" if width != 64 else "")
    return m["name"]


def _patch_size(m: dict) -> int | None:
    variant = m.get("variant") or ""
    return int(variant.split("/")[1]) if "/" in variant and variant.split("/")[1].isdigit() else None


def _permutation(m: dict, d: dict) -> str:
    """"none"; for a ViT "patch" (blocks of its patch size), "sub-patch" (finer) or "super-patch" (coarser); for a
    CNN "<k>px" (the block size). A permutation other than the default one (`data.permutation_seed` ≠ 0) adds
    ", π seed <k>", so runs with different permutations are never pooled as seeds of one arm."""
    if not d.get("permute_patches"):
        return "none"
    patch = _patch_size(m)
    grain = int(d.get("permutation_patch_size") or 0) or patch
    pi = int(d.get("permutation_seed") or 0)
    suffix = f", π seed {pi}" if pi else ""
    if patch is None or m.get("name", "vit") != "vit":
        return f"{grain}px{suffix}"
    return ("patch" if grain == patch else ("sub-patch" if grain < patch else "super-patch")) + suffix


def _dataset(d: dict) -> str:
    source = d.get("source", "")
    if source == "folder":
        return storage.basename(str(d.get("root", "")).rstrip("/")) or "folder"
    return d.get("name") or source or "?"


def read_run(workdir: str) -> dict | None:
    """Knobs and final metrics of one workdir, or None if it has no evaluation yet.

    Returns a dict with the knobs of `COLUMNS`, "family" (vit / cnn), "total_steps" (declared in its config),
    "training_key" (`stats.training_key`) and "eval_examples".
    """
    cfg = json.loads(storage.read_text(storage.join(workdir, "config.json")))
    acc, step = None, 0
    if storage.exists(storage.join(workdir, "metrics.jsonl")):
        for r in metrics.read_metrics(workdir):
            if "eval/accuracy" in r and r["step"] >= step:
                acc, step = r["eval/accuracy"], r["step"]
    if acc is None:
        return None
    m, d = cfg.get("model", {}), cfg.get("data", {})
    final_path = storage.join(workdir, "final_metrics.json")
    final = json.loads(storage.read_text(final_path)) if storage.exists(final_path) else {}
    return {"run": workdir, "code": final.get("code") or "not recorded", "device": final.get("device") or "not recorded",
            "dtype": m.get("dtype") or "not recorded", "family": "vit" if m.get("name", "vit") == "vit" else "cnn", "model": _model_name(m),
            "dataset": _dataset(d), "attention": m.get("attention", "standard") if "variant" in m else "-",
            "classifier": m.get("classifier", "-"),
            "skip_ablation": m.get("skip_ablation") or "-", "permutation": _permutation(m, d),
            "registers": int(m.get("num_registers") or 0) if "variant" in m else "-",
            "train_fraction": d.get("train_fraction") or 1.0, "seed": cfg.get("seed", 0), "steps": step,
            "total_steps": int(cfg.get("total_steps", step)), "eval/accuracy": acc,
            "training_key": stats.training_key(cfg), "eval_examples": d.get("eval_examples") or 0}


def find_runs(roots) -> list[dict]:
    """All evaluated workdirs below `roots`, sorted by path."""
    runs = []
    for root in roots:
        for d in storage.find_folders_with(root, "config.json", skip=("checkpoints", "analysis")):
            r = read_run(d)
            if r:
                runs.append(r)
    return sorted(runs, key=lambda r: r["run"])


ALL_BUDGETS = tuple(sorted({b for c in catalog.COMPARISONS for b in c.budgets}))


def mark(runs: list[dict]) -> list[dict]:
    """Sets "smoke" (budget not declared, or the run stopped before its `total_steps`) and "duplicate_of" (the run
    with the same training config that is kept; `stats.dedupe_runs`) on every run; returns the runs."""
    for r in runs:
        r["smoke"] = stats.is_smoke(r["steps"], ALL_BUDGETS) or r["steps"] < r.get("total_steps", r["steps"])
        r["duplicate_of"] = ""
    _, dropped = stats.dedupe_runs(runs)
    by = dict(dropped)
    for r in runs:
        r["duplicate_of"] = by.get(r["run"], "")
    return runs


BASE = {"attention": "standard", "classifier": "token", "skip_ablation": "-", "permutation": "none",
        "train_fraction": 1.0, "registers": 0}


def _matches(run, knobs) -> bool:
    for k, v in {**BASE, **knobs}.items():
        if run[k] == "-" and v == BASE[k]:  # a knob the model does not have (CNN attention) is at its baseline
            continue
        if v == "*":
            if run[k] == BASE[k]:
                return False
        elif v == "<1":
            if not run[k] < 1.0:
                return False
        elif run[k] != v:
            return False
    return True


def judge(key: str, effect: stats.Effect | None) -> tuple[str, str]:
    """`stats.status` of an effect under the catalog's judgement `key` (direction, margin)."""
    j = catalog.JUDGEMENTS[key]
    status, reason = stats.status(effect, j.expect, j.margin, min_seeds=j.min_seeds)
    if j.expected:  # a control: its expected direction is not a paper's
        reason = (reason.replace("the paper's direction", "the expected direction")
                  + "; a check the paper did not run, not its claim")
    return status, reason


CHECK_WORDS = {"reproduced": "as expected", "contradicts": "not as expected", "inconclusive": "inconclusive"}


def shown_status(key: str, status: str) -> str:
    """The status as the pages print it: a control or check the paper did not run (`Judgement.expected`) is never
    "reproduced" — it is "check: as expected" / "check: not as expected" / "check: inconclusive"."""
    return f"check: {CHECK_WORDS.get(status, status)}" if catalog.JUDGEMENTS[key].expected else status


def row_status(row_id: str, verdicts: list[dict]) -> tuple[str, str]:
    """One status for a catalog row from its verdicts (`catalog.HEADLINE`, `catalog.HEADLINE_RULE`): contradicts if
    any comparison of the row's claim contradicts, reproduced only if every one reproduces, not run if none ran,
    else inconclusive; with "k of n comparisons reproduced". Returns `(status, count text)`."""
    keys = catalog.HEADLINE.get(row_id, ())
    own = [v for v in verdicts if v["key"] in keys]
    if not own:
        return "not run", ""
    statuses = [v["status"] for v in own]
    k = statuses.count("reproduced")
    missing = max(0, catalog.HEADLINE_NEEDS.get(row_id, 0) - len(own))
    n = len(own) + missing
    count = f"{k} of {n} comparison{'s' if n > 1 else ''} reproduced" + (f", {missing} not yet run" if missing else "")
    if "contradicts" in statuses:
        return "contradicts", count
    if k == len(own) and not missing:
        return "reproduced", count
    return "inconclusive", count


def compare(runs) -> list[dict]:
    """The accuracy verdicts: one per catalog comparison, dataset, model, treatment group and step budget with both
    arms present (smoke and duplicate runs left out). Each: id, key (of `catalog.JUDGEMENTS`), comparison (label),
    models, runs, values (per arm, points), effect (`stats.Effect`, points), status, reason."""
    judged = [r for r in runs if not r.get("smoke") and not r.get("duplicate_of")]
    rows = []
    for c in catalog.COMPARISONS:
        fam = [r for r in judged if r["family"] == c.family and r["steps"] in c.budgets]
        cells = sorted({(r["dataset"], r["model"], r["steps"]) for r in fam if _matches(r, c.knobs)})
        many_models = len({m for _, m, _ in cells}) > 1
        for dataset, model, steps in cells:
            arm = [r for r in fam if (r["dataset"], r["model"], r["steps"]) == (dataset, model, steps)]
            base = [r for r in arm if _matches(r, c.baseline)]
            treat = [r for r in arm if _matches(r, c.knobs)]
            wild = [k for k, v in c.knobs.items() if v == "*"]
            for g in sorted({tuple(r[k] for k in wild) for r in treat}):
                t = [r for r in treat if tuple(r[k] for k in wild) == g]
                if not base or not t:
                    continue
                vt, vb = [100 * r["eval/accuracy"] for r in t], [100 * r["eval/accuracy"] for r in base]
                effect = stats.welch(vt, vb)
                status, reason = judge(c.verdict, effect)
                label = c.what + (f" [{model}]" if many_models or c.family == "cnn" else "") + \
                    (f" [{', '.join(map(str, g))}]" if g else "") + f", {dataset}, {steps} steps"
                rows.append({"id": c.id, "key": c.verdict, "row": catalog.JUDGEMENTS[c.verdict].row,
                             "comparison": label, "models": model, "runs": [r["run"] for r in base + t],
                             "baseline": vb, "treatment": vt, "effect": effect, "status": status,
                             "reason": reason, "source": "runs.csv"})
    return rows


def verdicts_from_file(path: str) -> list[dict]:
    """Verdicts of a result file: a JSON list of `{"key", "comparison", "treatment": [per seed], "baseline": [per
    seed] | null, "null": number | null, "method": "welch" | "one-sample" | "paired" (baseline[i] pairs with
    treatment[i]) | "bootstrap", "runs": [...], "baseline_label": what a one-sample null is (optional), "note"}`,
    judged with `catalog.JUDGEMENTS[key]`.

    Raises:
      ValueError: an unknown key or method.
    """
    out = []
    for v in json.loads(storage.read_text(path)):
        if v["key"] not in catalog.JUDGEMENTS:
            raise ValueError(f"{path}: verdict key {v['key']!r} is not one of {sorted(catalog.JUDGEMENTS)}")
        method = v.get("method", "welch")
        if method == "welch":
            effect = stats.welch(v["treatment"], v["baseline"])
        elif method == "one-sample":
            effect = stats.one_sample(v["treatment"], v.get("null") or 0.0)
        elif method == "paired":
            effect = stats.paired(v["treatment"], v["baseline"])
        elif method == "bootstrap":
            effect = stats.bootstrap(v["treatment"], v["baseline"])
        else:
            raise ValueError(f"{path}: method {method!r} is not one of welch, one-sample, paired, bootstrap")
        status, reason = judge(v["key"], effect)
        out.append({"id": v["key"], "key": v["key"], "row": catalog.JUDGEMENTS[v["key"]].row,
                    "comparison": v["comparison"], "models": v.get("models", ""), "runs": v.get("runs", []),
                    "baseline": v.get("baseline") or [], "treatment": v["treatment"], "effect": effect,
                    "status": status, "reason": reason, "source": path, "note": v.get("note", ""),
                    "baseline_label": v.get("baseline_label", "")})
    return out


def _arm(values, unit: str) -> str:
    if not values:
        return "—"
    digits = 1 if unit == "points" else 3
    mean = sum(values) / len(values)
    sd = stats.sample_sd(values)
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "") + f" (n={len(values)})"


def verdict_cells(v: dict) -> tuple[str, str, str, str, str]:
    """`(metric and what Δ is, baseline, treatment, Δ [95 % CI, method, df], status (reason))` table cells."""
    j = catalog.JUDGEMENTS[v["key"]]
    e = v["effect"]
    digits = 1 if j.unit == "points" else 3
    delta = "—" if e is None else f"{e.delta:+.{digits}f} {e.interval(digits)}"
    base = _arm(v["baseline"], j.unit) if v["baseline"] else (
        v.get("baseline_label") or (f"null {e.mean_baseline:.{digits}f}" if e is not None else "—"))
    posthoc = "; rule set post hoc (see the catalog)" if j.history else ""
    caveat = f"; caveat: {j.caveat}" if j.caveat else ""
    return (f"{j.metric}; Δ = {j.delta} ({j.unit})", base, _arm(v["treatment"], j.unit), delta,
            f"**{shown_status(v['key'], v['status'])}** ({v['reason']}{posthoc}{caveat})")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", text).strip("_")


def write_curves(runs, rows, out: str) -> dict:
    """PNG training curves (train loss, eval accuracy, few-shot accuracy vs step; `analysis/plots.training_curves`):
    `out/curves/<run>.png` per run (`<sweep>_<run>.png` where two sweeps hold runs of one name) and
    `out/curves/<id>_<comparison>.png` overlaying a comparison's arms.

    Returns `{"runs": [paths], "comparisons": [(row id, comparison, path)]}`.
    """
    from vit_jax_struct.analysis import plots  # matplotlib only when curves are written

    folder = storage.join(out, "curves")
    storage.makedirs(folder)
    records = {r["run"]: metrics.read_metrics(r["run"]) for r in runs}
    written = {"runs": [], "comparisons": []}
    names = [storage.basename(r["run"]) for r in runs]
    other_names = set()  # the file name each run's figure would have under the other naming: stale if present
    for r, name in zip(runs, names):
        # Two sweeps may hold runs of one name (a run trained again elsewhere): those files are named with the sweep.
        sweep = storage.basename(storage.dirname(r["run"]))
        plain, prefixed = (f"{_slug(n.replace('/', '_'))}.png" for n in (name, f"{sweep}/{name}"))
        label = f"{sweep}/{name}" if names.count(name) > 1 else name
        other_names.add(plain if names.count(name) > 1 else prefixed)
        path = storage.join(folder, prefixed if names.count(name) > 1 else plain)
        plots.training_curves({name: records[r["run"]]}, path, f"{label} ({r['model']}, {r['dataset']})")
        written["runs"].append(path)
    for row in rows:
        # An accuracy comparison lists its baseline runs first (`compare`): the legend says which arm is which.
        n_base = len(row["baseline"]) if row.get("source") == "runs.csv" else 0
        arms = {("baseline: " if i < n_base else "treatment: " if n_base else "") + storage.basename(w): records[w]
                for i, w in enumerate(row["runs"]) if w in records}
        path = storage.join(folder, f"{_slug(row['id'] + '_' + row['comparison'])}.png")
        plots.training_curves(arms, path, f"{row['id']}: {row['comparison']}")
        written["comparisons"].append((row["id"], row["comparison"], path))
    written["block_size"] = write_block_size(runs, folder)
    # A figure from an earlier scoreboard that this one no longer draws would be left behind unlinked: removed — a
    # comparison's whose label changed (e.g. when a second model made the labels name the model), and a run's under
    # its other name (e.g. without its sweep's, before a second sweep held a run of that name).
    ids = tuple(f"{_slug(c.id)}_" for c in catalog.COMPARISONS)
    keep = {storage.basename(p) for p in (*written["runs"], *written["block_size"])} | \
        {storage.basename(p) for _, _, p in written["comparisons"]}
    for name in storage.listdir(folder):
        if name.endswith(".png") and (name.startswith(ids) or name in other_names) and name not in keep:
            storage.remove(storage.join(folder, name))
    return written


def _block_px(permutation: str, image_size: int = 32) -> int | None:
    """The side of the permuted pixel blocks of a CNN run's `permutation` cell: "<k>px" → k, "none" → `image_size`
    (CIFAR's 32: one block, unpermuted, as on the paper's Fig. 5 axis); None for another permutation seed."""
    if permutation == "none":
        return image_size
    m = re.fullmatch(r"(\d+)px", permutation)
    return int(m.group(1)) if m else None


def write_block_size(runs, folder: str) -> list[str]:
    """J3 as Jelassi et al.'s Fig. 5 draws it: per CNN, the accuracy lost to permuting pixel blocks of each size,
    relative to the mean unpermuted accuracy of the same CNN, dataset and budget (in points, and as a fraction of it;
    a dot per seed), on CIFAR-100 beside the paper's curves read off its plot (`catalog.J3_PAPER_FIG5`). One
    figure `folder/J3_block_size_<dataset>_<steps>_steps.png` per dataset and budget with a permuted CNN arm (smoke
    and duplicate runs left out). Returns the paths written."""
    from vit_jax_struct.analysis import plots  # matplotlib only when curves are written

    cnn = [r for r in runs if r["family"] == "cnn" and not r.get("smoke") and not r.get("duplicate_of")
           and _block_px(r["permutation"]) is not None]
    paths = []
    for dataset, steps in sorted({(r["dataset"], r["steps"]) for r in cnn if r["permutation"] != "none"}):
        # The paper's curves are CIFAR-100's: drawn beside ours on that data set only.
        models = {name: {"paper": (f"Jelassi et al. Fig. 5: {name}, unpermuted {curve[32]:.0f} %", curve[32], curve)}
                  for name, curve in catalog.J3_PAPER_FIG5.items()} if dataset == "cifar100" else {}
        for model in sorted({r["model"] for r in cnn if (r["dataset"], r["steps"]) == (dataset, steps)}):
            arm = [r for r in cnn if (r["dataset"], r["model"], r["steps"]) == (dataset, model, steps)]
            base = [100 * r["eval/accuracy"] for r in arm if r["permutation"] == "none"]
            if not base or len(arm) == len(base):
                continue
            ref = sum(base) / len(base)
            # "ResNet-18 (width 16)" is drawn in the colour of the paper's "ResNet-18"
            models.setdefault(model.split(" (")[0], {})["ours"] = (f"ours: {model}, unpermuted {ref:.1f} %", ref, {
                px: [100 * r["eval/accuracy"] for r in arm if _block_px(r["permutation"]) == px]
                for px in sorted({_block_px(r["permutation"]) for r in arm})})
        if not any("ours" in m for m in models.values()):
            continue
        path = storage.join(folder, f"J3_block_size_{_slug(dataset) or 'unknown_dataset'}_{steps}_steps.png")
        plots.block_size_curves(models, path, f"J3: accuracy lost to permuted pixel blocks, CNNs on {dataset}, "
                                f"ours after {steps} steps, the paper's trained to convergence")
        paths.append(path)
    return paths


def _display_path(path: str) -> str:
    """A run's path as runs.csv lists it: relative to the working directory (the repository root, where the commands
    run) when it lies below it, else as given (a URL, or a sweep root elsewhere)."""
    if storage.is_url(path):
        return path
    rel = os.path.relpath(os.path.abspath(path))
    return path if rel.startswith("..") else rel


def verdicts_json(rows: list[dict]) -> list[dict]:
    """The verdicts as JSON-able dicts (the effect as a dict; run paths as runs.csv lists them), for
    `OUT/verdicts.json` and the catalog page."""
    return [{**{k: v for k, v in r.items() if k != "effect"},
             **({"runs": [_display_path(w) for w in r["runs"]]} if r.get("runs") else {}),
             "effect": None if r["effect"] is None else r["effect"].to_json()} for r in rows]


def listed_rows(folders) -> list[dict]:
    """The runs.csv rows of other settings' results folders (each written by `report --out=FOLDER`), each with its
    `scoreboard` column set to the folder when it has none: listed beside a scoreboard's own runs, never judged there.

    Raises:
      ValueError: a folder without runs.csv.
    """
    rows = []
    for folder in folders:
        path = storage.join(folder, "runs.csv")
        if not storage.exists(path):
            raise ValueError(f"--listed={folder}: no runs.csv there (a folder written by report --out=…)")
        for r in csv.DictReader(io.StringIO(storage.read_text(path), newline="")):
            rows.append({**r, "scoreboard": r.get("scoreboard") or _display_path(str(folder))})
    return rows


def write(runs, rows, out: str, commands: str = "", curves: dict | None = None,
          listed: list[dict] | None = None) -> tuple[str, str]:
    """Writes `out/scoreboard.md`, `out/runs.csv` and `out/verdicts.json` (with links to `curves`, from
    `write_curves`); `listed` (`listed_rows`): other settings' runs, added to runs.csv after the own ones and
    named in the scoreboard, not judged. Returns the paths of the first two."""
    storage.makedirs(out)
    listed = listed or []
    csv_path, md_path = storage.join(out, "runs.csv"), storage.join(out, "scoreboard.md")
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows([{**r, "run": _display_path(r["run"]), "scoreboard": _display_path(out),
                  "duplicate_of": _display_path(r["duplicate_of"]) if r.get("duplicate_of") else ""} for r in runs])
    w.writerows(listed)
    storage.write_text(csv_path, buf.getvalue())
    storage.write_text(storage.join(out, "verdicts.json"), json.dumps(verdicts_json(rows), indent=1))
    smoke = [r for r in runs if r.get("smoke")]
    dups = [r for r in runs if r.get("duplicate_of")]
    lines = ["# Scoreboard", ""]
    if commands:
        lines += ["Produced by:", "", "```", commands.strip(), "```", ""]
    lines += ["## Verdicts", "",
              f"Each verdict: the metric of the paper's claim, the arms as mean ± sample s.d. (n seeds), Δ with its "
              f"95 % interval (method and degrees of freedom), and the status: **reproduced** (the interval excludes "
              f"0 in the paper's direction, or lies inside the equivalence margin of a no-effect claim), "
              f"**contradicts** (it excludes 0 the other way, or lies wholly outside the margin), **inconclusive** "
              f"(neither, or fewer than {stats.MIN_SEEDS} seeds per arm, 5 for the theory rows), **not run**; a "
              f"control or check the paper did not run says so in its status. Directions, margins and "
              f"maximum seeds are fixed in `vit_jax_struct/experiments/catalog.py` (`JUDGEMENTS`) before the runs, except rules "
              f"marked post hoc (added or changed after results existed; the catalog page says what and why); the "
              f"statistics are `vit_jax_struct/experiments/stats.py`.", ""]
    if rows:
        lines += [f"**What came before.** {catalog.HISTORY}", "", f"{catalog.HEADLINE_RULE}:", "",
                  "| row | status | claim | comparisons of the claim |", "|---|---|---|---|"]
        for row in catalog.ROWS:
            status, count = row_status(row.id, rows)
            lines.append(f"| {row.id} | **{status}** | {row.title} | {count or '—'} |")
        lines += [""]
    if smoke or dups:
        lines += [f"**Not judged**: {len(smoke)} smoke or unfinished run(s) (a step budget other than the declared "
                  f"{', '.join(map(str, ALL_BUDGETS))}), {len(dups)} run(s) whose training config equals another's "
                  "(counted once: never a seed of an arm beside the run they repeat; a verdict that uses one in "
                  "another's place, e.g. as a retrained reference, says so in its note); see the `smoke` and "
                  "`duplicate_of` columns below.", ""]
    if rows:
        lines += ["| id | comparison | metric; Δ = treatment − baseline | baseline | treatment | Δ [95 % CI] | paper says (expected) | "
                  "status |", "|---|---|---|---|---|---|---|---|"]
    else:
        lines += ["None: these runs form no comparison of the catalog and no result file was given."]
    order = {row.id: i for i, row in enumerate(catalog.ROWS)}
    table = []  # (catalog position, line): the verdicts grouped by row, in the catalog's order
    for r in rows:
        metric, base, treat, delta, status = verdict_cells(r)
        table.append((order.get(r["row"], len(order)), f"| {r['id']} | {r['comparison']} | {metric} | {base} | "
                      f"{treat} | {delta} | {catalog.expected(r['key'])} | {status} |"))
    judged = {r["row"] for r in rows}
    for row in catalog.ROWS if rows else ():  # the catalog rows nothing here answers: not run, and what would run them
        if row.id not in judged:
            metric = "<br>".join(dict.fromkeys(j.metric for j in catalog.JUDGEMENTS.values() if j.row == row.id))
            table.append((order[row.id], f"| {row.id} | {row.title} | {metric or '—'} | — | — | — | "
                          f"{catalog.paper_says([row.id])} | **not run** ({row.pending or 'no runs'}) |"))
    lines += [line for _, line in sorted(table, key=lambda t: t[0])]
    if curves and curves.get("comparisons"):
        lines += ["", "## Training curves", "", "Train loss, eval accuracy and few-shot accuracy vs step, the arms of "
                  "each comparison overlaid (one file per run beside them in `curves/`):", ""]
        for rid, comparison, path in curves["comparisons"]:
            lines.append(f"- {rid} {comparison}: [{storage.basename(path)}](curves/{storage.basename(path)})")
    elif curves and curves.get("runs"):
        lines += ["", "## Training curves", "", "Train loss, eval accuracy (and few-shot accuracy) vs step, per run:",
                  ""]
        for path in curves["runs"]:
            lines.append(f"- [{storage.basename(path)}](curves/{storage.basename(path)})")
    if curves and curves.get("block_size"):
        lines += ["", "J3 as the paper's Fig. 5 draws it, accuracy lost vs the side of the permuted blocks, ours beside "
                  "the paper's:", ""]
        lines += [f"- [{storage.basename(p)}](curves/{storage.basename(p)})" for p in curves["block_size"]]
    shown = [k for k in COLUMNS if k != "scoreboard"]  # every run of this table is judged here
    lines += ["", "## Runs", "", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    repeated = {n for n, c in collections.Counter(storage.basename(r["run"]) for r in runs).items() if c > 1}

    def name(path: str) -> str:  # a run's name, with its sweep folder where another folder holds a run of that name
        base = storage.basename(path)
        return f"{storage.basename(storage.dirname(path))}/{base}" if base in repeated else base

    for r in runs:
        vals = [name(r["run"]) if k == "run" else
                (f"{r[k]:.4f}" if k == "eval/accuracy" else
                 (name(str(r[k])) if r[k] else "") if k == "duplicate_of" else str(r[k])) for k in shown]
        lines.append("| " + " | ".join(vals) + " |")
    if listed:
        where = collections.Counter(r["scoreboard"] for r in listed)
        lines += ["", "runs.csv also lists the runs of other settings, judged in their own scoreboards, not here: "
                  + ", ".join(f"{n} in {folder}/scoreboard.md" for folder, n in where.items()) + "."]
    storage.write_text(md_path, "\n".join(lines) + "\n")
    return md_path, csv_path


# The small files of a run that the scoreboard and the catalog read (checkpoints stay behind).
ARCHIVED = ("config.json", "metrics.jsonl", "final_metrics.json", "permutation.json")
ANALYSIS_FOLDERS = ("analysis", "analysis/cross_cka")  # their .json, .png, .md and .npz files are archived too


def archive(roots, dest: str) -> list[str]:
    """Copies the small files of every finished run (with `final_metrics.json`) below `roots` (`ARCHIVED`, and
    `*.json|*.png|*.md|*.npz` of `ANALYSIS_FOLDERS`; the `.npz` holds the stored last-block Gram matrices, 0.5 MB,
    that later R7/R8 pairs are computed from) to `dest/<sweep>/<run name>/`, `<sweep>` being the root's own folder
    name, so a sweep's numbers and figures can be regenerated without its checkpoints (e.g. from `docs/results/runs/`).
    Returns the archived sweep folders `dest/<sweep>`, one per root.

    Raises:
      ValueError: two roots with the same folder name, or two runs of the same name below one root.
    """
    out_roots = {}
    for root in roots:
        sweep = storage.basename(str(root).rstrip("/"))
        if sweep in out_roots:
            raise ValueError(f"two sweep roots named {sweep!r} ({out_roots[sweep][0]} and {root}): archive them to "
                             "separate folders")
        out_roots[sweep] = (root, storage.join(dest, sweep))
        done = {}
        for d in storage.find_folders_with(root, "config.json", skip=("checkpoints", "analysis")):
            name = storage.basename(d)
            if not storage.exists(storage.join(d, "final_metrics.json")):
                continue  # still running, or stopped: not archived until it finishes
            if name in done:
                raise ValueError(f"two runs named {name!r} ({done[name]} and {d}): archive them to separate folders")
            done[name] = d
            out = storage.join(dest, sweep, name)
            storage.makedirs(out)
            for f in ARCHIVED:
                if storage.exists(storage.join(d, f)):
                    storage.write_bytes(storage.join(out, f), storage.read_bytes(storage.join(d, f)))
            for sub in ANALYSIS_FOLDERS:  # the run's analyses, and its cross-model CKA with other runs (R1)
                adir = storage.join(d, sub)
                if storage.isdir(adir):
                    storage.makedirs(storage.join(out, sub))
                    for f in storage.listdir(adir):
                        if f.endswith((".json", ".png", ".md", ".npz")):  # .npz: the stored last-block Grams
                            storage.write_bytes(storage.join(out, sub, f), storage.read_bytes(storage.join(adir, f)))
    return [out for _, out in out_roots.values()]


def archived_path(run: str, moved: dict) -> str:
    """`run` (a run folder) below one of `moved`'s sweep roots, renamed to the same run below that root's archive
    (`moved`: {root: archived root}, as `archive` returned them); any other path unchanged. Local paths are compared
    as absolute paths: the verdicts command writes `/abs/runs/sweep/run` where the report was given `runs/sweep`."""
    def norm(path: str) -> str:
        return path.rstrip("/") if storage.is_url(path) else os.path.abspath(path)

    path = norm(run)
    for root, dest in moved.items():
        if path.startswith(norm(root) + "/"):
            return storage.join(dest, path[len(norm(root)) + 1:])
    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", action="append", required=True, help="folder(s) holding workdirs (repeatable)")
    ap.add_argument("--out", default="", help="where scoreboard.md, runs.csv, verdicts.json and curves/ go "
                    "(default: beside the runs, FIRST_RUNS/report; the project's own docs/results is written only "
                    "by the commands in docs/results/commands.txt)")
    ap.add_argument("--commands", default="", help="text file with the commands that produced the runs")
    ap.add_argument("--verdicts", action="append", default=[],
                    help="a result file of per-seed verdict values (JSON list; repeatable), e.g. the theory study's")
    ap.add_argument("--archive", default="",
                    help="first copy the runs' small files (no checkpoints) to ARCHIVE/<sweep folder name>/<run>, "
                    "then read the runs from there")
    ap.add_argument("--listed", action="append", default=[],
                    help="another setting's results folder (written by report --out=FOLDER; repeatable): its runs.csv "
                    "rows are added to OUT/runs.csv with their `scoreboard` column, so one runs.csv lists every "
                    "run; they are not judged here")
    ap.add_argument("--curves", action=argparse.BooleanOptionalAction, default=True,
                    help="write PNG training curves to OUT/curves/ (per run and per comparison)")
    args = ap.parse_args(argv)
    if not args.out:
        args.out = storage.join(args.runs[0], "report")
    for path in args.verdicts:
        if not storage.exists(path):
            print(f"error: --verdicts {path} does not exist", file=sys.stderr)
            return 2
    try:
        listed = listed_rows(args.listed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    roots = args.runs
    if args.archive:
        roots = archive(roots, args.archive)
        moved = {str(a).rstrip("/"): b for a, b in zip(args.runs, roots, strict=True)}
    runs = mark(find_runs(roots))
    if not runs:
        print(f"error: no evaluated runs below {args.runs}", file=sys.stderr)
        return 1
    for r in runs:
        if r["smoke"]:
            print(f"warning: {r['run']}: smoke run ({r['steps']} of {r['total_steps']} steps; declared budgets "
                  f"{ALL_BUDGETS}): not judged", file=sys.stderr)
        if r["duplicate_of"]:
            print(f"warning: {r['run']}: same training config as {r['duplicate_of']}: counted once",
                  file=sys.stderr)
    cmds = storage.read_text(args.commands) if args.commands else ""
    rows = compare(runs)
    for path in args.verdicts:
        file_rows = verdicts_from_file(path)
        if args.archive:  # an analysis file names the live runs; the report lists where they were archived
            for r in file_rows:
                r["runs"] = [archived_path(run, moved) for run in r["runs"]]
        rows += file_rows
    curves = write_curves(runs, [r for r in rows if r["source"] == "runs.csv"], args.out) if args.curves else None
    md, csv_path = write(runs, rows, args.out, cmds, curves, listed)
    print(f"{len(runs)} runs, {len(rows)} verdicts -> {md}, {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
