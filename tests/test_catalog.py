"""The experiment catalog covers every paper row, judges each on a stated metric, and docs/experiments.md is
generated from it."""

import ast
import os
import re

from vit_jax_struct.experiments import catalog, catalog_page, report, stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_catalog_covers_every_row_with_commands():
    ids = [r.id for r in catalog.ROWS]
    assert ids == [f"J{i}" for i in range(1, 11)] + [f"R{i}" for i in range(1, 9)] + ["D1"]
    for r in catalog.ROWS:
        assert r.claim and r.number and r.knob, r.id
        assert r.small.startswith("python ") and (r.full.startswith("python ") or r.full.startswith("same")), r.id
        # Answered: by a scoreboard comparison, a measured note, or a stated reason it is not measured yet.
        assert r.comparisons or r.pending or any(j.row == r.id for j in catalog.JUDGEMENTS.values()), r.id
        for c in r.comparisons:
            assert c in {c.id for c in catalog.COMPARISONS}
        for p in (*r.plots, *r.results):
            assert os.path.exists(os.path.join(ROOT, p)), p
        text = " ".join((r.small, r.full, r.knob, r.pending))
        assert "DESIGN" not in text and "../shared" not in text and "shared/" not in text
    assert {c.id for c in catalog.COMPARISONS} == {"J1", "J2", "J2+", "J3", "J3fine", "R3", "R5acc", "D1acc"}


def test_catalog_is_data_that_imports_nothing_of_the_package():
    with open(catalog.__file__) as f:
        tree = ast.parse(f.read())
    imported = [n.module if isinstance(n, ast.ImportFrom) else a.name for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
    assert not [m for m in imported if m and m.startswith("vit_jax_struct")], imported


def test_every_verdict_has_a_metric_direction_and_seed_budget_fixed_in_advance():
    rows = {r.id for r in catalog.ROWS}
    for key, j in catalog.JUDGEMENTS.items():
        assert j.row in rows and j.metric and j.delta and j.unit, key
        assert j.expect in stats.EXPECTATIONS, key
        assert (j.margin or 0) > 0 if j.expect == "none" else j.margin is None, key
        assert j.max_seeds >= (5 if j.row in {f"J{i}" for i in range(5, 11)} else stats.MIN_SEEDS), key
    for c in catalog.COMPARISONS:
        assert c.verdict in catalog.JUDGEMENTS and c.budgets


def test_experiments_doc_is_up_to_date():
    text = catalog_page.render()
    with open(os.path.join(ROOT, "docs", "experiments.md")) as f:
        assert f.read() == text, "regenerate: python -m vit_jax_struct.experiments.catalog_page --out=docs/experiments.md"
    for r in catalog.ROWS:
        assert f"\n## {r.id}\n" in text
    assert "measured" not in text.lower().split("## j1")[0]  # the summary says a status, not "measured"
    verdicts = catalog_page.all_verdicts()
    assert {v["setting"] for v in verdicts} == {catalog_page.EARLIER, catalog_page.TRAINED}
    for v in verdicts:  # each verdict of both settings' scoreboards appears with its status
        assert f"**{report.shown_status(v['key'], v['status'])}" in text and v["comparison"] in text
    for row in catalog.ROWS:  # one status per row in the summary table
        status, _, _ = catalog_page.row_status(row.id, verdicts)
        assert f"| [{row.id}](#{row.id.lower()}) | {row.title} | {row.number} | **{status}**" in text
    for link in re.findall(r"\]\(((?:results)/[^)]+)\)", text):  # every linked plot/page exists
        assert os.path.exists(os.path.join(ROOT, "docs", link.replace("%20", " "))), link
    assert "DESIGN.md" not in text and "../shared" not in text


def _load(spec):
    import importlib.util

    path, _, arg = spec.partition(":")
    mod_spec = importlib.util.spec_from_file_location("cfg", os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def test_catalog_commands_name_existing_configs_and_keys():
    """Every `python main.py` command loads its config file and every `--config.<key>` it sets exists there."""
    checked = 0
    for r in catalog.ROWS:
        for cmd in (r.small, r.full):
            for part in cmd.split("&&"):
                tokens = part.split("#")[0].split()
                if tokens[:2] != ["python", "main.py"]:
                    continue
                flags = dict(t[2:].split("=", 1) for t in tokens[2:] if t.startswith("--") and "=" in t)
                cfg = _load(flags.get("config", "configs/default.py"))
                for k in (k for k in flags if k.startswith("config.")):
                    node = cfg
                    for p in k.split(".")[1:]:
                        assert p in node, f"{r.id}: --{k} is not a config key"
                        node = node[p]
                checked += 1
            for s in re.findall(r"--set=([\w.]+)=", cmd):  # sweep-level overrides
                node = _load("configs/cifar10_vit.py")
                for p in s.split("."):
                    assert p in node, f"{r.id}: --set={s} is not a config key"
                    node = node[p]
    assert checked >= 20


def test_every_run_the_scoreboard_lists_is_archived_in_the_repository():
    """runs.csv names each run by its archived folder; the folder (config, metrics, final metrics) must be in the
    repository, so the scoreboard regenerates from a clone (step 4 of docs/results/commands.txt, no checkpoints)."""
    import csv
    import subprocess

    with open(os.path.join(ROOT, "docs", "results", "runs.csv"), newline="") as f:
        runs = [r["run"] for r in csv.DictReader(f)]
    assert runs
    tracked = set(subprocess.run(["git", "ls-files", "docs/results/runs"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.splitlines())
    if not tracked and not os.path.isdir(os.path.join(ROOT, ".git")):  # an exported tree without git: the files
        tracked = {os.path.relpath(os.path.join(d, n), ROOT) for d, _, ns in os.walk(os.path.join(ROOT, "docs",
                   "results", "runs")) for n in ns}
    missing = [f"{run}/{name}" for run in runs for name in ("config.json", "metrics.jsonl", "final_metrics.json")
               if f"{run}/{name}" not in tracked]
    assert not missing, f"runs.csv lists runs whose archive is not in the repository: {missing[:5]}"


def test_the_two_minute_table_gives_every_row_its_status_and_baseline_top1():
    verdicts = catalog_page.all_verdicts()
    by_row = {}
    for v in verdicts:
        by_row.setdefault(v["row"], []).append(v)
    table = catalog_page.found_table(by_row)
    body = [line for line in table if line.startswith("| [")]
    assert len(body) == len(catalog.ROWS)
    for row, line in zip(catalog.ROWS, body, strict=True):
        status, _, where = catalog_page.row_status(row.id, verdicts)
        assert line.startswith(f"| [{row.id}](#{row.id.lower()}) | {row.title}") and f"| **{status}**" in line
        if row.id in by_row:  # the setting named; the theory rows' as the theory's model, never as a step budget
            mine = [v for v in by_row[row.id] if v["setting"] == where]
            theory = row.id in {f"J{i}" for i in range(5, 11)}
            assert catalog_page.is_theory(mine) == theory
            assert (catalog_page.THEORY_NAME if theory else catalog_page.SETTING_NAMES[where]) in line
            assert theory or "(post hoc)" not in line or any(catalog.JUDGEMENTS[v["key"]].history for v in mine)
    j1 = body[0]  # both J1 settings, each with its baseline arm's top-1 from runs.csv
    assert "cifar10 2000 steps" in j1 and "cifar100 1000 steps" in j1
    assert f"ViT-Ti/8/w128d6, cifar100, 1000 steps: {catalog_page.baseline_top1('cifar100', 'ViT-Ti/8/w128d6')}" in j1
    # docs/results/runs.csv also lists the trained-model runs (`scoreboard` column); the earlier baseline is its own
    import csv

    with open(os.path.join(ROOT, "docs", "results", "runs.csv"), newline="") as f:
        steps = {r["steps"] for r in csv.DictReader(f)}
    assert "16000" in steps and catalog_page.baseline_top1("cifar100", "ViT-Ti/8/w128d6").endswith("(n=3)")


def _verdict(key, dataset, n, setting, delta=2.0):
    row = catalog.JUDGEMENTS[key].row
    effect = stats.Effect(delta=delta, low=delta - 1.0, high=delta + 1.0, df=4.0, method="Welch t", n_treatment=n,
                          n_baseline=n, mean_treatment=50.0 + delta, mean_baseline=50.0, sd_treatment=1.0,
                          sd_baseline=1.0)
    status, reason = report.judge(key, effect)
    return {"row": row, "key": key, "comparison": f"a vs b, {dataset}, 1000 steps", "effect": effect,
            "status": status, "reason": reason, "setting": setting}


def test_a_row_takes_the_trained_settings_status_only_once_it_is_judged_on_every_data_set():
    """The earlier setting judged J1 (no effect within ±1 point) on CIFAR-10 and CIFAR-100; the trained-model setting
    counts only when both of its comparisons have their 3 seeds. D1 (only in the trained setting) takes its status
    from there at once."""
    T, E = catalog_page.TRAINED, catalog_page.EARLIER
    earlier = [_verdict("J1", "cifar10", 3, E, delta=5.0), _verdict("J1", "cifar100", 3, E, delta=5.0)]
    one_set = [_verdict("J1", "cifar100", 3, T)]
    assert catalog_page.status_setting(earlier + one_set) == E  # CIFAR-10 not run in the trained setting yet
    two_seeds = [_verdict("J1", "cifar100", 3, T), _verdict("J1", "cifar10", 2, T)]
    assert catalog_page.status_setting(earlier + two_seeds) == E  # an arm below its seeds
    full = [_verdict("J1", "cifar100", 3, T, delta=0.1), _verdict("J1", "cifar10", 3, T, delta=0.1)]
    assert catalog_page.status_setting(earlier + full) == T
    # J1 expects no effect within ±1 point: the earlier Δ = 5 ± 1 contradicts; the trained Δ = 0.1 ± 1 does not
    assert catalog_page.row_status("J1", earlier + two_seeds)[::2] == ("contradicts", E)
    assert catalog_page.row_status("J1", earlier + full)[0] != "contradicts"
    assert catalog_page.row_status("J1", earlier + full)[2] == T
    d1 = [_verdict("D1acc", "cifar100", 2, T)]
    assert catalog_page.row_status("D1", d1)[::2] == ("inconclusive", T)  # n = 2 < 3: not judged, but its setting
    assert "in progress (n = 2 of 3 per arm" in catalog_page.row_status("D1", d1)[1]  # and it says so
    # a row now judged in the trained-model setting still says what the earlier one found
    assert catalog_page.row_status("J1", earlier + full)[1].endswith("; earlier setting: contradicts")
    assert "not judged (n 2/2; 3 needed): Δ +2.0 points, cifar10" in catalog_page._compact(two_seeds[1])
    assert catalog_page._compact(full[0]).startswith("J1 (post hoc), inconclusive: Δ +0.1 points [-0.9, +1.1]")  # crosses ±1
    assert catalog_page.status_setting([]) == E and catalog_page.row_status("D1", [])[0] == "not run"
    # The progress names what the trained setting has not run yet, not only the seeds of what it has:
    # CIFAR-10's J1 (no trained run) is listed; with both data sets run, nothing is.
    count = catalog_page.row_status("J1", earlier + one_set)[1]
    assert "n = 3 of 3 per arm" in count and "not yet run there: J1 cifar10)" in count
    assert "not yet run" not in catalog_page.row_status("J1", earlier + two_seeds)[1]


def test_the_scale_note_keeps_each_sweeps_baseline_from_the_setting_folder_that_ran_it(tmp_path):
    """Two trained-model setting folders, each with one sweep's runs: the note names both baselines (a folder
    without a sweep's runs must not hide the other folder's value)."""
    cols = ["dataset", "model", "attention", "classifier", "skip_ablation", "permutation", "registers",
            "train_fraction", "smoke", "duplicate_of", "eval/accuracy"]
    rows = {"a": [("cifar100", "ViT-Ti/8/w128d6", "0.40"), ("cifar100", "ViT-Ti/8/w128d6", "0.42")],
            "b": [("cifar10", "ViT-Ti/4/w64d6", "0.75")]}
    settings = []
    for name, runs in rows.items():
        d = tmp_path / name
        d.mkdir()
        (d / "verdicts.json").write_text("[]")
        lines = [",".join(cols)] + [f"{ds},{m},standard,token,-,none,0,1.0,False,,{acc}" for ds, m, acc in runs]
        (d / "runs.csv").write_text("\n".join(lines) + "\n")
        settings.append(str(d))
    for order in (settings, settings[::-1]):
        text = catalog_page.render(settings=order)
        assert "ViT-Ti/8/w128d6 on cifar100: 41.0 % (n=2)" in text and "ViT-Ti/4/w64d6 on cifar10: 75.0 % (n=1)" in text
