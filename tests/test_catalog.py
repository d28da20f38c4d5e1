"""The experiment catalog covers every paper row, and docs/experiments.md is generated from it."""

import os
import re

from vit_jax_struct import catalog, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_catalog_covers_every_row_with_commands():
    ids = [r.id for r in catalog.ROWS]
    assert ids == [f"J{i}" for i in range(1, 11)] + [f"R{i}" for i in range(1, 9)]
    for r in catalog.ROWS:
        assert r.claim and r.number and r.knob, r.id
        assert r.small.startswith("python ") and (r.full.startswith("python ") or r.full.startswith("same")), r.id
        # Answered: by a scoreboard comparison, a measured note, or a stated reason it is not measured yet.
        assert r.comparisons or r.measured or r.pending, r.id
        for c in r.comparisons:
            assert c in {c.id for c in catalog.COMPARISONS}
        for p in (*r.plots, *r.results):
            assert os.path.exists(os.path.join(ROOT, p)), p
        text = " ".join((r.small, r.full, r.knob, r.pending))
        assert "DESIGN" not in text and "../shared" not in text and "shared/" not in text
    # The report's comparisons take their "paper says" from the catalog rows.
    assert [c[0] for c in report.CATALOG] == ["J1", "J2", "J3", "R3", "R5", "R2/R7"]
    assert "≈ −4 % top-1" in dict((c[0], c[4]) for c in report.CATALOG)["R3"]


def test_experiments_doc_is_up_to_date():
    text = catalog.render()
    with open(os.path.join(ROOT, "docs", "experiments.md")) as f:
        assert f.read() == text, "regenerate: python -m vit_jax_struct.catalog --out=docs/experiments.md"
    for r in catalog.ROWS:
        assert f"\n## {r.id}\n" in text
    # Measured verdicts come from docs/results/runs.csv through the scoreboard's comparisons (R3: skip removal).
    rows = report.compare(catalog._runs_from_csv(os.path.join(ROOT, "docs", "results", "runs.csv")))
    r3 = [m for m in rows if m["id"] == "R3"]
    assert r3, "no R3 comparison in docs/results/runs.csv"
    for m in r3:
        assert re.search(rf"\| {re.escape(m['comparison'])} \| .* \| {m['delta_points']:+.1f} \| .* \| "
                         rf"{re.escape(m['verdict'])} \|", text)
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
