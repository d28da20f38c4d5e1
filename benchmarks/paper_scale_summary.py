"""Summarises the run workdirs of `benchmarks/gpu_paper_scale.sh`: one row per run, written as JSON lines and Markdown.

    python benchmarks/paper_scale_summary.py RUNS_DIR [--out=FOLDER]

Per run (a sub-folder of RUNS_DIR with a `config.json`): attention and seed (from the folder name
`<attention>,seed=<s>`), steps reached of total, epochs, the last logged train images/s (rate over train steps and
data waits, `trainer`'s definition), the last eval accuracy and its step, the time a full run would take at that rate
(`total_steps · batch / img/s`, compile and eval not counted), whether it finished (`final_metrics.json`), its goodput
and wall time when it did. Then, per attention, the mean and s.d. of the last eval accuracy over the runs that
finished. `--out`: writes `runs.jsonl` and `runs.md` there (`--prefix`: other names); the table is printed either way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def summarise_run(workdir: str) -> dict:
    """One run's row (see the module docstring); raises FileNotFoundError without `config.json`."""
    from vit_jax_struct.train import metrics

    with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    name = os.path.basename(workdir.rstrip("/"))
    attention, _, seed = name.partition(",seed=")
    records = metrics.read_metrics(workdir) if os.path.exists(os.path.join(workdir, "metrics.jsonl")) else []
    train = [r for r in records if "train/images_per_sec" in r]
    evals = [r for r in records if "eval/accuracy" in r]
    total, batch = config["total_steps"], config["batch_size"]
    row = {"run": name, "attention": attention, "seed": int(seed) if seed.isdigit() else None,
           "steps": max((r["step"] for r in records), default=0), "total_steps": total,
           "dtype": config["model"].get("dtype"), "images_per_sec": train[-1]["train/images_per_sec"] if train else None,
           "eval_accuracy": evals[-1]["eval/accuracy"] if evals else None,
           "eval_step": evals[-1]["step"] if evals else None, "finished": False}
    row["epochs"] = train[-1]["train/epoch"] / train[-1]["step"] * row["steps"] if train else 0.0
    if row["images_per_sec"]:
        row["full_run_s"] = total * batch / row["images_per_sec"]
    final = os.path.join(workdir, "final_metrics.json")
    if os.path.exists(final):
        with open(final) as f:
            fm = json.load(f)
        row.update(finished=fm.get("step", 0) >= total, goodput=fm.get("goodput"), wall_s=fm.get("time/wall"))
    return row


def summarise(runs_dir: str) -> tuple[list[dict], str]:
    """`(rows, markdown)` over every run folder of `runs_dir` (sorted by name)."""
    rows = [summarise_run(os.path.join(runs_dir, d)) for d in sorted(os.listdir(runs_dir))
            if os.path.exists(os.path.join(runs_dir, d, "config.json"))]
    fmt = lambda v, f: "–" if v is None else format(v, f)
    lines = ["| run | steps | epochs | img/s | eval acc. (step) | full run at this rate | finished | goodput |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['steps']:,} / {r['total_steps']:,} | {r['epochs']:.1f} | "
                     f"{fmt(r['images_per_sec'], ',.0f')} | {fmt(r['eval_accuracy'], '.4f')} "
                     f"({fmt(r['eval_step'], ',')}) | {fmt(r.get('full_run_s'), ',.0f')} s | "
                     f"{'yes' if r['finished'] else 'no'} | {fmt(r.get('goodput'), '.2f')} |")
    for attention in sorted({r["attention"] for r in rows}):
        done = [r["eval_accuracy"] for r in rows if r["attention"] == attention and r["finished"]]
        sd = f" ± {statistics.stdev(done):.4f} (s.d.)" if len(done) > 1 else ""
        lines.append(f"\n{attention}: {len(done)} finished run(s)" +
                     (f", final eval accuracy {statistics.mean(done):.4f}{sd}" if done else ""))
    return rows, "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs_dir")
    p.add_argument("--out", default="")
    p.add_argument("--prefix", default="runs", help="the files' name: PREFIX.jsonl and PREFIX.md in --out")
    a = p.parse_args(argv)
    rows, table = summarise(a.runs_dir)
    print(table)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, f"{a.prefix}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        with open(os.path.join(a.out, f"{a.prefix}.md"), "w") as f:
            f.write(table)


if __name__ == "__main__":
    main()
