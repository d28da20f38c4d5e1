"""`docs/experiments.md`: the catalog (`vit_jax_struct/experiments/catalog.py`) with the verdicts of the scoreboard.

    python -m vit_jax_struct.experiments.catalog_page --out=docs/experiments.md [--verdicts=docs/results/verdicts.json]
        [--setting=docs/results/cifar100_regime …]

Two settings: the earlier, small-budget one (`--verdicts`, 1,000–2,000 steps) and the trained-model one (each
`--setting` folder's `verdicts.json` and `runs.csv`, 16,000 steps; by default every `docs/results/*_regime/`). A row's
status comes from the trained-model setting once every comparison it has there is judged (its arms at their seeds),
or when the row has nothing in the earlier one; until then from the earlier setting, which the page says. Both
settings' comparisons are listed, each under its own heading.

Every row of both papers gets its status (`reproduced` / `contradicts` / `inconclusive` / `not run`), the metric of
the paper's claim, Δ with its 95 % interval and n per arm, read from the scoreboard's `verdicts.json`
(`python -m vit_jax_struct.experiments.report`) and re-judged here by the same code (`report.judge`, `vit_jax_struct/experiments/stats.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

from vit_jax_struct.experiments import catalog, report, stats

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERDICTS = os.path.join(REPO, "docs", "results", "verdicts.json")
EARLIER, TRAINED = "earlier", "trained"  # the two settings' tags (`v["setting"]`)
SETTING_NAMES = {EARLIER: "earlier setting (1,000–2,000 steps)", TRAINED: "trained-model setting (16,000 steps)"}
# The theory rows (J5–J10) have no step budget: their verdicts come from the one-layer model of the theory itself.
THEORY_NAME = "the theory's one-layer model (5 seeds)"


def is_theory(vs: list[dict]) -> bool:
    """Whether verdicts are the theory study's (no CIFAR data set in any comparison's label)."""
    return bool(vs) and not any(re.search(r"\bcifar\d+\b", v.get("comparison", "")) for v in vs)


def setting_name(setting: str, vs: list[dict]) -> str:
    """How the page names a setting for a row's verdicts `vs` of that setting: `SETTING_NAMES`, or `THEORY_NAME` for
    the theory rows' verdicts (they have no step budget)."""
    return THEORY_NAME if setting == EARLIER and is_theory(vs) else SETTING_NAMES[setting]


def trained_settings() -> list[str]:
    """The trained-model settings' result folders under docs/results (`*_regime/` with a `verdicts.json`)."""
    base = os.path.join(REPO, "docs", "results")
    return sorted(os.path.join(base, d) for d in os.listdir(base)
                  if d.endswith("_regime") and os.path.exists(os.path.join(base, d, "verdicts.json")))


def _note_label(v: dict) -> str:
    """Which comparison a note belongs to: its key, and its sweep where the comparison names one (the last
    parenthesis of its label, e.g. "cifar10, ViT-Ti/4/w64d6, 2000 steps")."""
    m = re.search(r"\(([^()]*steps)\)\s*$", v.get("comparison", ""))
    return v["key"] + (f"; {m.group(1)}" if m else "")


def load_verdicts(path: str = VERDICTS, setting: str = EARLIER) -> list[dict]:
    """The scoreboard's verdicts with `effect` as a `stats.Effect` and the status judged again (`report.judge`),
    each tagged with its `setting` (EARLIER / TRAINED) and the `runs_csv` beside `path` (its baseline top-1)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        rows = json.load(f)
    for v in rows:
        v["effect"] = None if v["effect"] is None else stats.Effect(**v["effect"])
        v["status"], v["reason"] = report.judge(v["key"], v["effect"])
        v["setting"] = setting
        v["runs_csv"] = os.path.join(os.path.dirname(path), "runs.csv")
    return rows


def all_verdicts(verdicts_path: str = VERDICTS, settings: list[str] | None = None) -> list[dict]:
    """Both settings' verdicts (`load_verdicts`): the trained-model settings' (`settings`, default
    `trained_settings()`) first, then the earlier one's."""
    settings = trained_settings() if settings is None else settings
    return ([v for d in settings for v in load_verdicts(os.path.join(d, "verdicts.json"), TRAINED)]
            + load_verdicts(verdicts_path, EARLIER))


def row_status(row_id: str, verdicts: list[dict]) -> tuple[str, str, str]:
    """`(status, count text, setting)` of a row from both settings' verdicts: `report.row_status` of the verdicts of
    the setting `status_setting` picks; the count text names that setting (`setting_name`: the theory rows' is
    their one-layer model), how far the trained-model runs are while any of them is below its seeds, and the
    earlier setting's status where the row's now comes from the trained-model one."""
    vs = [v for v in verdicts if v["row"] == row_id]
    where = status_setting(vs)
    mine = [v for v in vs if v["setting"] == where]
    status, count = report.row_status(row_id, mine)
    if vs:
        count = "; ".join(x for x in (count, setting_name(where, mine)) if x)
        trained = [v for v in vs if v["setting"] == TRAINED]
        if where == EARLIER and trained:
            count += f"; trained-model setting {_progress(vs)}"
        elif where == TRAINED and not all(judged(v) for v in trained):  # no earlier setting to wait in (D1)
            count += f"; {_progress(vs)}"
        earlier = [v for v in vs if v["setting"] == EARLIER]
        if where == TRAINED and earlier:  # what the earlier setting said, where the status now comes from this one
            count += f"; earlier setting: {report.row_status(row_id, earlier)[0]}"
    return status, count, where


def _least_n(v: dict) -> int:
    """Values in the verdict's smaller arm (a one-sample verdict: its one arm)."""
    e = v["effect"]
    if e is not None:
        return min(e.n_treatment, e.n_baseline or e.n_treatment)
    t, b = len(v.get("treatment") or ()), len(v.get("baseline") or ())
    return min(t, b or t)


def judged(v: dict) -> bool:
    """Whether a verdict's arms reached the seeds its judgement needs (`Judgement.min_seeds`)."""
    return v["effect"] is not None and _least_n(v) >= catalog.JUDGEMENTS[v["key"]].min_seeds


def status_setting(vs: list[dict]) -> str:
    """The setting a row's status comes from: TRAINED once each of the row's comparisons there is judged, or when
    the row has none in the earlier setting; else EARLIER (the trained-model runs still in progress)."""
    trained = [v for v in vs if v["setting"] == TRAINED]
    earlier = [v for v in vs if v["setting"] == EARLIER]
    if not trained:
        return EARLIER
    if not earlier:
        return TRAINED
    covered = {_key_dataset(v) for v in trained}
    complete = all(_key_dataset(v) in covered for v in earlier if v["key"] in catalog.HEADLINE.get(v["row"], ()))
    return TRAINED if complete and all(judged(v) for v in trained) else EARLIER


def _key_dataset(v: dict) -> tuple[str, str | None]:
    d = re.search(r"\b(cifar\d+)\b", v.get("comparison", ""))
    return v["key"], d and d.group(1)


def _progress(vs: list[dict]) -> str:
    """How far the trained-model setting's comparisons of a row are: "n = 2 of 3" (the fewest seeds of any arm run
    there), and which of the row's counted comparisons of the earlier setting have no run there yet (e.g. J4pi)."""
    trained = [v for v in vs if v["setting"] == TRAINED]
    if not trained:
        return "not started"
    need = max(catalog.JUDGEMENTS[v["key"]].min_seeds for v in trained)
    text = f"in progress (n = {min(_least_n(v) for v in trained)} of {need} per arm in its least-run arm"
    covered = {_key_dataset(v) for v in trained}
    missing = list(dict.fromkeys(
        " ".join(x for x in k if x) for v in vs
        if v["setting"] == EARLIER and v["key"] in catalog.HEADLINE.get(v["row"], ())
        and (k := _key_dataset(v)) not in covered))
    if missing:
        text += f"; not yet run there: {', '.join(missing)}"
    return text + ")"


def baseline_top1(dataset: str, model: str,
                  runs_csv: str = os.path.join(REPO, "docs", "results", "runs.csv")) -> str:
    """Top-1 of a sweep's baseline arm (standard attention, CLS, intact, unpermuted, all the training data) for
    `dataset` and `model` (runs.csv's columns, e.g. "cifar100", "ViT-Ti/8/w128d6"), mean over its judged runs
    (not smoke, not a duplicate), as "15.9 % (n=3)" for the scale note; "not run" without such runs."""
    import csv

    if not os.path.exists(runs_csv):
        return "not run"
    vit = model.startswith("ViT")  # a CNN's baseline arm: unpermuted, all the data (no attention or classifier)
    here = os.path.dirname(os.path.abspath(runs_csv))

    def own(r: dict) -> bool:  # judged in this runs.csv's own scoreboard, not another setting's listed beside it
        return not r.get("scoreboard") or os.path.abspath(os.path.join(REPO, r["scoreboard"])) == here

    with open(runs_csv, newline="") as f:
        acc = [float(r["eval/accuracy"]) for r in csv.DictReader(f)
               if own(r) and r["dataset"] == dataset and r["model"] == model
               and (not vit or (r["attention"] == "standard" and r["classifier"] == "token"))
               and r["skip_ablation"] == "-" and r["permutation"] == "none"
               and r.get("registers", "0") in ("0", "-", "")
               and float(r["train_fraction"]) == 1.0 and r["smoke"] == "False" and not r["duplicate_of"]
               and r["eval/accuracy"]]
    return f"{100 * sum(acc) / len(acc):.1f} % (n={len(acc)})" if acc else "not run"


def margin_power(verdicts: list[dict]) -> str:
    """A sentence per no-effect verdict measured in points with a spread in both arms: the seed s.d., the interval's
    half-width at the n run, and the seeds per arm a Δ of 0 would need for the interval to fit its margin
    (`stats.seeds_for_margin`); "" when there is none."""
    parts = []
    for v in verdicts:
        j, e = catalog.JUDGEMENTS[v["key"]], v["effect"]
        if j.expect != "none" or j.unit != "points" or e is None or e.sd_treatment is None or e.sd_baseline is None:
            continue
        sd = math.sqrt((e.sd_treatment ** 2 + e.sd_baseline ** 2) / 2)
        n = min(e.n_treatment, e.n_baseline)
        need = stats.seeds_for_margin(sd, j.margin)
        parts.append(f"{v['key']} ({v.get('models', '?')}, {', '.join(v['comparison'].rsplit(', ', 2)[-2:])}): seed s.d. {sd:.2f} points, half-width "
                     f"{stats.half_width(sd, n):.2f} at n = {n} per arm, ±{j.margin:g} reachable from n = "
                     f"{need if need else '> 50'}")
    if not parts:
        return ""
    return ("**Power of the no-effect margins.** If Δ were exactly 0 and both arms had the same s.d. s (taken as "
            "the root mean square of the two arms' seed s.d.s), a Welch interval with n seeds per arm has "
            "half-width t(0.975, 2n − 2)·s·√(2/n) (Welch's df is 2n − 2 only when the s.d.s are equal; unequal "
            "ones lower it and widen the interval, so the intervals below can be wider); it fits inside the margin "
            "only when that is below it: " + "; ".join(parts) + ". Where n is below that, *inconclusive* is the "
            "expected status even for arms that do not differ.")


def _compact(v: dict) -> str:
    """One verdict in a few words: `Δ +2.0 points [+0.1, +3.8] (Welch t, df 3.9; n 3/3), cifar10 2000 steps`."""
    j, e = catalog.JUDGEMENTS[v["key"]], v["effect"]
    m = re.search(r"(cifar\d+)(?:, [^,()]+)?, (\d+) steps", v.get("comparison", ""))
    where = f", {m.group(1)} {m.group(2)} steps" if m else ""
    label = v["key"] + (" (post hoc)" if j.history else "")
    digits = 1 if j.unit == "points" else 3
    tv, bv = v.get("treatment") or (), v.get("baseline") or ()
    n = (f"{e.n_treatment}" + (f"/{e.n_baseline}" if e.n_baseline else "") if e is not None
         else f"{len(tv)}/{len(bv)}" if bv else f"{len(tv)}")
    if e is None or not judged(v):
        def mean(xs):
            return f"{sum(xs) / len(xs):.{digits}f}"
        value = (f": Δ {e.delta:+.{digits}f} {j.unit}" if e is not None else
                 f": {mean(tv)} vs {mean(bv)} {j.unit} (treatment vs baseline)" if tv and bv else
                 f": {mean(tv)} {j.unit}" if tv else "")
        return f"{label}, not judged (n {n}; {j.min_seeds} needed){value}{where}"
    label += f", {report.shown_status(v['key'], v['status'])}"
    if e.method.endswith(stats.NO_SPREAD):
        return f"{label}: Δ {e.delta:+.{digits}f} {j.unit}, no spread (n {n}){where}"
    return (f"{label}: Δ {e.delta:+.{digits}f} {j.unit} [{e.low:+.{digits}f}, {e.high:+.{digits}f}] "
            f"({e.method.split(' (')[0]}" + (f", df {e.df:.1f}" if e.df else "") + f"; n {n}){where}")


def found_table(by_row: dict[str, list[dict]]) -> list[str]:
    """The two-minute table on top of the page: per row its claim, status, the Δ [95 % CI] of each comparison its
    status counts (each with its own status, "post hoc" where its rule was set after results existed), then, while
    the row waits for the trained-model setting, that setting's comparisons so far (not counted; "not judged" below
    their seeds), the top-1 of the baseline arm(s) of all of them (with their step budget), and one line of why (the
    reason of the first counted comparison that did not reproduce, else of the first)."""
    lines = ["## What we found", "",
             "Every row in one line: its status, the Δ and 95 % interval of each comparison the status counts (with "
             "the setting it ran in), the top-1 of the baseline arm those comparisons ran against (how trained the "
             "models were: see **Scale** below), and why the status is what it is. Each row's section below has "
             "every comparison, the rule it was judged by, and the figures.", "",
             "| row | the paper's claim | status | Δ [95 % CI] (method, df; n per arm), setting | baseline top-1 | why |",
             "|---|---|---|---|---|---|"]
    for row in catalog.ROWS:
        status, count, where = row_status(row.id, by_row.get(row.id, []))
        vs = [v for v in by_row.get(row.id, []) if v["setting"] == where]
        own = [v for v in vs if v["key"] in catalog.HEADLINE.get(row.id, ())]
        deltas = "<br>".join(_compact(v) for v in own) or "—"
        # While the row waits for the trained-model setting, what that setting has so far (not counted yet).
        waiting = [v for v in by_row.get(row.id, []) if where == EARLIER and v["setting"] == TRAINED
                   and v["key"] in catalog.HEADLINE.get(row.id, ())]
        if waiting:
            deltas += ("<br>*trained-model setting so far, not counted until each comparison has its seeds:*<br>"
                       + "<br>".join(_compact(v) for v in waiting))
        top1 = []
        for v in own + waiting:
            m = re.search(r"\((cifar\d+), ([^,()]+), \d+ steps\)\s*$", v.get("comparison", ""))  # analyses
            dataset, model = (m.group(1), m.group(2)) if m else (None, v.get("models"))
            if not m:
                d = re.search(r"\b(cifar\d+)\b", v.get("comparison", ""))
                dataset = d and d.group(1)
            steps = re.search(r"(\d+) steps\)?\s*$", v.get("comparison", ""))
            if dataset and model:
                top1.append(f"{model}, {dataset}" + (f", {steps.group(1)} steps" if steps else "")
                            + f": {baseline_top1(dataset, model, v['runs_csv'])}")
        theory = is_theory(own)
        top1_text = "<br>".join(dict.fromkeys(top1)) or ("— (the one-layer model of the theory)" if theory else "—")
        # Why: the first comparison that made the status (contradicts: one that contradicts; inconclusive: one
        # that did not reproduce; reproduced: the first).
        deciding = next((v for v in own if v["status"] == "contradicts"), None) if status == "contradicts" else \
            next((v for v in own if v["status"] != "reproduced"), None)
        deciding = deciding or (own[0] if own else None)
        why = f"{deciding['key']}: {deciding['reason']}" if deciding else \
            (row.pending.split(";")[0] if row.pending else "not run")
        lines.append(f"| [{row.id}](#{row.id.lower()}) | {row.title}: {row.number} | **{status}**"
                     + (f" ({count})" if count else "") + f" | {deltas} | {top1_text} | {why} |")
    return lines + [""]


def _rel(path: str) -> str:
    """A repository path as a link target relative to docs/."""
    return os.path.relpath(path, "docs")


def _short(v: dict) -> str:
    j = catalog.JUDGEMENTS[v["key"]]
    e = v["effect"]
    digits = 1 if j.unit == "points" else 3
    status = (report.shown_status(v["key"], v["status"]) + (", post hoc" if j.history else "")
              + (", see caveat" if j.caveat else ""))
    if e is None:
        return f"**{status}**: {v['comparison']} — no interval ({v['reason']})"
    n = f"n = {e.n_treatment}" + (f"/{e.n_baseline}" if e.n_baseline else "")
    if e.method.endswith(stats.NO_SPREAD):  # a point, not an interval: never judged, whatever n is
        return (f"**{status}**: {v['comparison']}: Δ {e.delta:+.{digits}f} {j.unit}, every value in each arm equal "
                f"({n}): no interval, so inconclusive")
    return (f"**{status}**: {v['comparison']}: Δ {e.delta:+.{digits}f} {j.unit} "
            f"[{e.low:+.{digits}f}, {e.high:+.{digits}f}] ({e.method}" + (f", df {e.df:.1f}" if e.df else "")
            + f"; {n})")


def render(verdicts_path: str = VERDICTS, settings: list[str] | None = None) -> str:
    """The markdown of `docs/experiments.md`: a summary table (status, metric, Δ, CI, n per verdict) and one section
    per row with its verdict tables (trained-model setting first, then the earlier one), commands and links to
    existing result pages and plots. `settings`: the trained-model settings' result folders (default:
    `trained_settings()`)."""
    settings = trained_settings() if settings is None else settings
    verdicts = all_verdicts(verdicts_path, settings)
    scale = catalog.SCALE_NOTE.format(cifar100_top1=baseline_top1("cifar100", "ViT-Ti/8/w128d6"),
                                      grid8_top1=baseline_top1("cifar10", "ViT-Ti/4/w64d6"))
    shown: dict = {}  # each sweep's baseline top-1 from the setting folder that ran it (another folder's "not run"
    # must not hide it)
    for d in settings:
        for ds, m in (("cifar100", "ViT-Ti/8/w128d6"), ("cifar10", "ViT-Ti/4/w64d6")):
            t = baseline_top1(ds, m, os.path.join(d, "runs.csv"))
            if t != "not run":
                shown.setdefault((ds, m), t)
    scale += " " + catalog.TRAINED_NOTE.format(
        top1="; ".join(f"{m} on {ds}: {t}" for (ds, m), t in shown.items()) or "no finished run yet",
        folders=", ".join(f"[{os.path.relpath(d, os.path.join(REPO, 'docs'))}/scoreboard.md]"
                          f"({os.path.relpath(d, os.path.join(REPO, 'docs'))}/scoreboard.md)" for d in settings)
        or "none yet")
    power = margin_power(verdicts)
    by_row: dict[str, list[dict]] = {}
    for v in verdicts:
        by_row.setdefault(v["row"], []).append(v)
    lines = ["# Experiments: the catalog", "",
             "<!-- generated by `python -m vit_jax_struct.experiments.catalog_page --out=docs/experiments.md` from "
             "vit_jax_struct/experiments/catalog.py and docs/results/verdicts.json; do not edit -->", "",
             *found_table(by_row),
             f"Rows J1–J10: {catalog.JELASSI}, *Vision Transformers provably learn spatial structure*. Rows R1–R8: "
             f"{catalog.RAGHU}, *Do Vision Transformers See Like Convolutional Neural Networks?*. Row D1: "
             f"{catalog.DARCET}, *Vision Transformers Need Registers*. Small-scale "
             "commands run on a CPU; full-scale commands are the papers' setting and need an accelerator.", "",
             f"**Scale.** {scale}", "",
             f"**What came before.** {catalog.HISTORY}", "",
             "Status: **reproduced** (the 95 % interval of Δ excludes 0 in the paper's direction, or lies inside the "
             "equivalence margin of a no-effect claim), **contradicts** (it excludes 0 the other way, or lies "
             "wholly outside the margin), **inconclusive** (neither, or fewer than "
             f"{stats.MIN_SEEDS} seeds per arm, 5 for the theory rows), **not run**; a control or check the paper "
             "did not run reads *check: as expected*, *check: not as expected* or *check: inconclusive*, never "
             "reproduced. Each verdict names its metric, Δ with the interval's "
             "method and degrees of freedom, and n per arm; the directions, margins and seed counts are fixed in "
             "`vit_jax_struct/experiments/catalog.py` before the runs, except the rules marked *post hoc* (added or changed after "
             "results existed; each says what and why); the earlier setting's numbers come from "
             "[results/scoreboard.md](results/scoreboard.md), the trained-model setting's from the scoreboards "
             "named under **Scale**, the theory rows' from [results/theory/README.md](results/theory/README.md); "
             "[results/runs.csv](results/runs.csv) lists every run of both settings (its `scoreboard` column "
             "names the scoreboard that judges it; each setting's folder has its own runs.csv too), commands in "
             "[results/commands.txt](results/commands.txt).", "",
             *([power, ""] if power else []),
             f"{catalog.HEADLINE_RULE}.", "",
             "| id | experiment | paper says | row status | metric (judged on) | ours (status: comparison, Δ [95 % CI] "
             "(method; n per arm)) |", "|---|---|---|---|---|---|"]
    for row in catalog.ROWS:
        status, count, where = row_status(row.id, by_row.get(row.id, []))
        vs = [v for v in by_row.get(row.id, []) if v["setting"] == where]
        others = len(by_row.get(row.id, [])) - len(vs)
        ours = "<br>".join(_short(v) for v in vs) if vs else "**not run**" + (
            f" — {row.pending}" if row.pending else "")
        if vs and others:
            ours += (f"<br>(+ {others} comparison{'s' if others > 1 else ''} of the "
                     f"{SETTING_NAMES[TRAINED if where == EARLIER else EARLIER]}: see [{row.id}](#{row.id.lower()}))")
        metrics = "<br>".join(dict.fromkeys(j.metric for j in catalog.JUDGEMENTS.values() if j.row == row.id)) or "—"
        lines.append(f"| [{row.id}](#{row.id.lower()}) | {row.title} | {row.number} | **{status}**"
                     + (f" ({count})" if count else "") + f" | {metrics} | {ours} |")
    for row in catalog.ROWS:
        lines += ["", f"## {row.id}", "", f"**{row.title}** — {row.paper}, {row.section}.", "",
                  f"- Paper: {row.claim}. Number: {row.number}.", f"- Knob: {row.knob}.",
                  f"- Small scale (CPU): `{row.small}`",
                  f"- Full scale: {row.full}" if row.full.startswith("same") else
                  f"- Full scale (the paper's setting; {catalog.ACCEL}): `{row.full}`"]
        keys = [k for k, j in catalog.JUDGEMENTS.items() if j.row == row.id]
        for k in keys:
            j = catalog.JUDGEMENTS[k]
            rule = (f"no effect: the interval inside ±{j.margin:g} {j.unit}" if j.expect == "none" else
                    f"Δ {'> 0' if j.expect == 'positive' else '< 0'}")
            whose = f"expected ({j.expected})" if j.expected else "the paper's finding"
            lines.append(f"- Judged (`{k}`): {j.metric}; Δ = {j.delta}; {whose}: {rule}; {j.max_seeds} seeds per "
                         f"arm, fixed in advance (fewer than {j.min_seeds}: not judged)."
                         + (f" **Post hoc**: {j.history}." if j.history else "")
                         + (f" **Caveat**: {j.caveat}." if j.caveat else ""))
        vs = by_row.get(row.id, [])
        where = status_setting(vs)
        for setting in (TRAINED, EARLIER):
            part = [v for v in vs if v["setting"] == setting]
            if not part:
                continue
            counts = "the row's status" if setting == where else "shown, not counted in the row's status"
            if setting == TRAINED and where == EARLIER:
                counts += f" ({_progress(vs)})"
            name = setting_name(setting, part)
            lines += ["", f"*{name[0].upper()}{name[1:]}* ({counts}):", "",
                      "| comparison | metric; Δ = treatment − baseline | baseline | treatment | Δ [95 % CI] | status |",
                      "|---|---|---|---|---|---|"]
            for v in part:
                lines.append(f"| {v['comparison']} | " + " | ".join(report.verdict_cells(v)) + " |")
            notes = [f"Note ({_note_label(v)}): {v['note']}" for v in part if v.get("note")]
            if notes:
                lines += [""] + list(dict.fromkeys(notes))
        if not vs:
            lines += ["", "Status: **not run**."]
        if row.pending:
            lines += ["", f"Still needed: {row.pending.rstrip('.')}."]
        links = [f"[{os.path.basename(os.path.dirname(p)) or p}/{os.path.basename(p)}]({_rel(p)})"
                 for p in row.results if os.path.exists(os.path.join(REPO, p))]
        if links:
            lines += ["", "Results: " + ", ".join(links) + "."]
        for p in row.plots:  # captioned by their path below docs/results (per-run figures: one seed, as an example)
            if os.path.exists(os.path.join(REPO, p)):
                what = os.path.relpath(p, os.path.join("docs", "results"))
                lines += ["", f"![{row.id}: {what}]({_rel(p).replace(' ', '%20')})", "",
                          f"*{row.id}: `{what}`" + (" (one seed of the arm, as an example; every seed's figure is "
                                                     "beside its run)*" if "/analysis/" in p else "*")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "experiments.md"))
    ap.add_argument("--verdicts", default=VERDICTS, help="the earlier setting's verdicts.json")
    ap.add_argument("--setting", action="append", default=None,
                    help="a trained-model setting's result folder (verdicts.json, runs.csv, scoreboard.md); "
                         "repeatable; default: every docs/results/*_regime/")
    args = ap.parse_args(argv)
    for d in args.setting or ():
        if not os.path.exists(os.path.join(d, "verdicts.json")):
            ap.error(f"--setting={d}: no verdicts.json there (a folder written by "
                     "`python -m vit_jax_struct.experiments.report --out=…`)")
    settings = None if args.setting is None else [os.path.abspath(d) for d in args.setting]
    with open(args.out, "w") as f:
        f.write(render(args.verdicts, settings))
    print(f"{len(catalog.ROWS)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
