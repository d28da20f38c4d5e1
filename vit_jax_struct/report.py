"""Scoreboard: a markdown + CSV table of runs' ablation knobs and final metrics, and the catalog rows' verdicts.

    python -m vit_jax_struct.report --runs=runs/cifar_ablations [--runs=OTHER …] --out=docs/results [--no-curves]

Reads every workdir below the given folders (a folder with `config.json` and `metrics.jsonl`), takes its last
`eval/accuracy`, and for each comparison of the catalog (`vit_jax_struct/catalog.py:COMPARISONS`: J1 positional
attention, J2/J3 permuted patches for ViT/CNN, R3 skip removal, R5 GAP vs CLS, R2/R7 data size) compares the
treatment arm with the matching baseline arm (same model family, step budget and remaining knobs; accuracies
averaged over seeds) and states the effect beside the paper's, with a verdict. PNG training curves (train loss, eval
accuracy, few-shot accuracy vs step) go to `OUT/curves/`, per run and overlaid per comparison.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import sys

from vit_jax_struct import catalog, storage
from vit_jax_struct.train import metrics

COLUMNS = ("run", "model", "attention", "classifier", "skip_ablation", "permute_patches", "train_fraction", "seed",
           "steps", "eval/accuracy")


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


def read_run(workdir: str) -> dict | None:
    """Knobs and final metrics of one workdir, or None if it has no evaluation yet."""
    cfg = json.loads(storage.read_text(storage.join(workdir, "config.json")))
    acc, step = None, 0
    if storage.exists(storage.join(workdir, "metrics.jsonl")):
        for r in metrics.read_metrics(workdir):
            if "eval/accuracy" in r and r["step"] >= step:
                acc, step = r["eval/accuracy"], r["step"]
    if acc is None:
        return None
    m, d = cfg.get("model", {}), cfg.get("data", {})
    return {"run": workdir, "family": "vit" if m.get("name", "vit") == "vit" else "cnn", "model": _model_name(m),
            "attention": m.get("attention", "standard") if "variant" in m else "-",
            "classifier": m.get("classifier", "-"),
            "skip_ablation": m.get("skip_ablation") or "-", "permute_patches": bool(d.get("permute_patches")),
            "train_fraction": d.get("train_fraction") or 1.0, "seed": cfg.get("seed", 0), "steps": step,
            "eval/accuracy": acc}


def find_runs(roots) -> list[dict]:
    """All evaluated workdirs below `roots`, sorted by path."""
    runs = []
    for root in roots:
        for d in storage.find_folders_with(root, "config.json", skip=("checkpoints",)):
            r = read_run(d)
            if r:
                runs.append(r)
    return sorted(runs, key=lambda r: r["run"])


BASE = {"attention": "standard", "classifier": "token", "skip_ablation": "-", "permute_patches": False,
        "train_fraction": 1.0}

# id, what, family, treatment knobs, the paper's finding, verdict rule on Δ (points): from the catalog
# (vit_jax_struct/catalog.py: COMPARISONS, and the rows' numbers for "paper says").
CATALOG = [(c.id, c.what, c.family, c.knobs, catalog.paper_says(c.rows), c.rule) for c in catalog.COMPARISONS]


# The verdict rule, one for every row: an effect is a difference of the arms' mean accuracies |Δ| greater than twice
# the seed spread s, the pooled sample standard deviation of single runs over seeds (both arms; Welford-free: the
# pooled variance Σ(n_i − 1)s_i² / Σ(n_i − 1)). A row with one seed per arm has no spread and is not judged.
VERDICT_RULE = ("effect = |Δ| > 2·s, s = pooled sample s.d. of single runs over seeds (both arms); "
                "one seed per arm: not judged")


def seed_spread(*arms) -> float | None:
    """Pooled sample standard deviation (accuracy units) of the arms' per-seed accuracies; None if no arm has two
    seeds."""
    dof = sum(len(a) - 1 for a in arms if len(a) > 1)
    if not dof:
        return None
    return (sum((len(a) - 1) * statistics.variance(a) for a in arms if len(a) > 1) / dof) ** 0.5


def verdict(delta_points: float, spread_points: float | None, rule: str) -> str:
    """The verdict of `VERDICT_RULE` for a Δ and seed spread (points); `rule` is what the paper expects:
    "small" (no clear effect), "negative" (the treatment lowers the measure) or "positive" (it raises it)."""
    if spread_points is None:
        return "not judged (one seed per arm)"
    if abs(delta_points) <= 2 * spread_points:
        return "no effect beyond seed noise" + (" (as the paper)" if rule == "small" else "")
    if rule == "small":
        return f"differs ({delta_points:+.1f} points; the paper sees none)"
    if rule == "positive":
        return "same direction" if delta_points > 0 else "opposite direction"
    return "same direction" if delta_points < 0 else "opposite direction"


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


def comparison_cells(r: dict) -> str:
    """`baseline | treatment | Δ | 2·s` table cells of a `compare` row (accuracies as `format_accuracy`)."""
    two_s = "—" if r["spread_points"] is None else f"{2 * r['spread_points']:.1f}"
    return (f"{format_accuracy(r['baseline'], r['sd_baseline'], r['n_baseline'])} | "
            f"{format_accuracy(r['treatment'], r['sd_treatment'], r['n_treatment'])} | "
            f"{r['delta_points']:+.1f} | {two_s}")


def format_accuracy(mean: float, sd: float | None, n: int) -> str:
    """`0.5600 ± 0.0040 (n=2)` (no ± for one seed)."""
    return f"{mean:.4f}" + (f" ± {sd:.4f}" if sd is not None else "") + f" (n={n})"


def _mean(xs):
    return statistics.mean(xs) if xs else None


def compare(runs) -> list[dict]:
    """One row per catalog entry with both arms present: accuracies (mean over seeds), Δ in points, verdict."""
    rows = []
    for rid, what, family, knobs, paper, rule in CATALOG:
        fam = [r for r in runs if r["family"] == family]
        models = sorted({r["model"] for r in fam if _matches(r, knobs)})
        for model in models:  # one comparison per model of the family (e.g. ResNet-18 and VGG-19 for J3)
            rows += _compare_model([r for r in fam if r["model"] == model], rid, what, knobs, paper, rule,
                                   f" [{model}]" if len(models) > 1 else "")
    return rows


def _compare_model(fam, rid, what, knobs, paper, rule, model_label) -> list[dict]:
    """The rows of one comparison among the runs `fam` of one model (per group and shared step budget)."""
    rows = []
    base = [r for r in fam if _matches(r, {})]
    treat = [r for r in fam if _matches(r, knobs)]
    if not base or not treat:
        return rows
    groups = sorted({(r["train_fraction"], r["skip_ablation"]) for r in treat}) if knobs.get(
        "train_fraction") == "<1" or knobs.get("skip_ablation") == "*" else [None]
    budgets = sorted({r["steps"] for r in base} & {r["steps"] for r in treat})  # same step budget both sides
    for g, steps in [(g, s) for g in groups for s in budgets]:
        t = [r for r in treat if (g is None or (r["train_fraction"], r["skip_ablation"]) == g)
             and r["steps"] == steps]
        b = [r for r in base if r["steps"] == steps]
        if not t or not b:
            continue
        accs_b, accs_t = [r["eval/accuracy"] for r in b], [r["eval/accuracy"] for r in t]
        acc_b, acc_t = _mean(accs_b), _mean(accs_t)
        delta = 100 * (acc_t - acc_b)
        spread = seed_spread(accs_b, accs_t)
        spread_points = None if spread is None else 100 * spread
        label = what + model_label if g is None else \
            f"{what}{model_label} [{'fraction ' + str(g[0]) if g[0] < 1 else 'skip ' + g[1]}]"
        if len(budgets) > 1:
            label += f" at {steps} steps"
        rows.append({"id": rid, "comparison": label, "runs": [r["run"] for r in b + t], "baseline": acc_b,
                     "n_baseline": len(b), "treatment": acc_t,
                     "n_treatment": len(t), "delta_points": delta, "paper": paper,
                     "sd_baseline": statistics.stdev(accs_b) if len(b) > 1 else None,
                     "sd_treatment": statistics.stdev(accs_t) if len(t) > 1 else None,
                     "spread_points": spread_points, "verdict": verdict(delta, spread_points, rule),
                     "models": ", ".join(sorted({r["model"] for r in t}))})
    return rows


# Rows of the data-size study (vit_jax_struct/analysis/datasize.py: datasize.json) on the scoreboard: catalog id,
# measure, how to read it from one seed's record, unit, rule (what the paper expects of the subset vs all data).
DATASIZE_MEASURES = (
    ("R2", "mean attention distance of the early blocks", lambda x: x["early_mean_distance_px"], "px", "positive"),
    ("R6", "10-shot digits accuracy (pre-logits ridge probe; digits never seen in pretraining)",
     lambda x: x["fewshot"].get("digits_10shot"), "points", "negative"),
    ("R7", "CKA of the last block with the full-data model's (baseline: two full-data seeds)",
     lambda x: list(x["cka_to_reference"].values())[-1] if x["cka_to_reference"] else None, "points",
     "negative"),
)


def datasize_rows(summary: dict) -> list[dict]:
    """Scoreboard rows of a data-size study (`datasize.json`): each measure of `DATASIZE_MEASURES`, every subset
    fraction against all data, with the same verdict rule as the accuracy rows (|Δ| > 2 × pooled seed s.d.)."""
    by = {f["fraction"]: f["seeds"] for f in summary.get("fractions", [])}
    if 1.0 not in by:
        return []
    rows = []
    for rid, what, get, unit, rule in DATASIZE_MEASURES:
        scale = 100.0 if unit == "points" else 1.0
        base = [scale * v for v in map(get, by[1.0]) if v is not None]
        for frac in sorted(f for f in by if f < 1.0):
            treat = [scale * v for v in map(get, by[frac]) if v is not None]
            if not base or not treat:
                continue
            delta = statistics.mean(treat) - statistics.mean(base)
            spread = seed_spread(base, treat)
            rows.append({"id": rid, "measure": what, "fraction": frac, "unit": unit, "baseline": base,
                         "treatment": treat, "delta": delta, "spread": spread,
                         "paper": catalog.paper_says([rid]), "verdict": verdict(delta, spread, rule)})
    return rows


def _values(xs, unit) -> str:
    digits = 2 if unit == "px" else 1
    m = statistics.mean(xs)
    return f"{m:.{digits}f}" + (f" ± {statistics.stdev(xs):.{digits}f}" if len(xs) > 1 else "") + f" (n={len(xs)})"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", text).strip("_")


def write_curves(runs, rows, out: str) -> dict:
    """PNG training curves (train loss, eval accuracy, few-shot accuracy vs step; `analysis/plots.training_curves`):
    `out/curves/<run>.png` per run and `out/curves/<id>_<comparison>.png` overlaying a comparison's arms.

    Returns `{"runs": [paths], "comparisons": [(row id, comparison, path)]}`.
    """
    from vit_jax_struct.analysis import plots  # matplotlib only when curves are written

    folder = storage.join(out, "curves")
    storage.makedirs(folder)
    records = {r["run"]: metrics.read_metrics(r["run"]) for r in runs}
    written = {"runs": [], "comparisons": []}
    for r in runs:
        name = storage.basename(r["run"])
        path = storage.join(folder, f"{_slug(name)}.png")
        plots.training_curves({name: records[r["run"]]}, path, f"{name} ({r['model']})")
        written["runs"].append(path)
    for row in rows:
        arms = {storage.basename(w): records[w] for w in row["runs"] if w in records}
        path = storage.join(folder, f"{_slug(row['id'] + '_' + row['comparison'])}.png")
        plots.training_curves(arms, path, f"{row['id']}: {row['comparison']}")
        written["comparisons"].append((row["id"], row["comparison"], path))
    return written


def write(runs, rows, out: str, commands: str = "", curves: dict | None = None,
          datasize: dict | None = None) -> tuple[str, str]:
    """Writes `out/scoreboard.md` and `out/runs.csv` (with links to `curves`, from `write_curves`, and the rows of
    a data-size study `datasize`, a `datasize.json` dict); returns their paths."""
    storage.makedirs(out)
    csv_path, md_path = storage.join(out, "runs.csv"), storage.join(out, "scoreboard.md")
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(runs)
    storage.write_text(csv_path, buf.getvalue())
    lines = ["# Scoreboard", ""]
    if commands:
        lines += ["Produced by:", "", "```", commands.strip(), "```", ""]
    lines += ["## Catalog rows", "",
              f"Accuracies: mean ± sample s.d. over seeds (n seeds). Verdict rule, for every row: {VERDICT_RULE}.", "",
              "| id | comparison | model | baseline acc | treatment acc | Δ (points) | 2·s (points) | paper says "
              "| verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['comparison']} | {r['models']} | {comparison_cells(r)} | {r['paper']} | "
                     f"{r['verdict']} |")
    ds_rows = datasize_rows(datasize) if datasize else []
    if ds_rows:
        lines += ["", "## Data size beyond accuracy (R2, R6, R7)", "",
                  "From the data-size study ([datasize/README.md](datasize/README.md), "
                  "`python -m vit_jax_struct.analysis.datasize`): each subset against all data, same verdict rule.",
                  "", "| id | measure | train fraction | all data | subset | Δ | 2·s | paper says | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in ds_rows:
            two_s = "—" if r["spread"] is None else f"{2 * r['spread']:.2f} {r['unit']}"
            lines.append(f"| {r['id']} | {r['measure']} | {r['fraction']:g} | {_values(r['baseline'], r['unit'])} | "
                         f"{_values(r['treatment'], r['unit'])} | {r['delta']:+.2f} {r['unit']} | {two_s} | "
                         f"{r['paper']} | {r['verdict']} |")
    if curves and curves.get("comparisons"):
        lines += ["", "## Training curves", "", "Train loss, eval accuracy and few-shot accuracy vs step, the arms of "
                  "each comparison overlaid (one file per run beside them in `curves/`):", ""]
        for rid, comparison, path in curves["comparisons"]:
            lines.append(f"- {rid} {comparison}: [{storage.basename(path)}](curves/{storage.basename(path)})")
    lines += ["", "## Runs", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in runs:
        vals = [storage.basename(r["run"]) if k == "run" else
                (f"{r[k]:.4f}" if k == "eval/accuracy" else str(r[k])) for k in COLUMNS]
        lines.append("| " + " | ".join(vals) + " |")
    storage.write_text(md_path, "\n".join(lines) + "\n")
    return md_path, csv_path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", action="append", required=True, help="folder(s) holding workdirs (repeatable)")
    ap.add_argument("--out", default="docs/results", help="where scoreboard.md and runs.csv go")
    ap.add_argument("--commands", default="", help="text file with the commands that produced the runs")
    ap.add_argument("--datasize", default="",
                    help="datasize.json of a data-size study (default: OUT/datasize/datasize.json if it exists)")
    ap.add_argument("--curves", action=argparse.BooleanOptionalAction, default=True,
                    help="write PNG training curves to OUT/curves/ (per run and per comparison)")
    args = ap.parse_args(argv)
    runs = find_runs(args.runs)
    if not runs:
        print(f"no evaluated runs below {args.runs}", file=sys.stderr)
        return 1
    cmds = ""
    if args.commands:
        cmds = storage.read_text(args.commands)
    rows = compare(runs)
    curves = write_curves(runs, rows, args.out) if args.curves else None
    ds_path = args.datasize or storage.join(args.out, "datasize", "datasize.json")
    datasize = json.loads(storage.read_text(ds_path)) if storage.exists(ds_path) else None
    md, csv_path = write(runs, rows, args.out, cmds, curves, datasize)
    print(f"{len(runs)} runs -> {md}, {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
