"""Redrawing a run's figures from its analysis.json (vit_jax_struct/analysis/plots.py), without a checkpoint."""

import json
import os

import numpy as np
import pytest

from vit_jax_struct.analysis import plots


def _run_with_analysis(tmp_path, matrix):
    os.makedirs(tmp_path / "run" / "analysis")
    res = {"model": {"classifier": "token"},
           "localization": {"matrix": np.asarray(matrix).tolist(), "own_patch_fraction": 1.0}}
    (tmp_path / "run" / "analysis" / "analysis.json").write_text(json.dumps(res))
    return str(tmp_path / "run")


def test_redraw_writes_the_localization_maps_with_the_margin_in_the_title(tmp_path, monkeypatch):
    m = np.full((4, 4), 0.1) + np.eye(4) * 0.3  # own patch 0.4, others 0.1: margin +0.300
    run = _run_with_analysis(tmp_path, m)
    titles = []
    monkeypatch.setattr(plots, "_map_grid", lambda maps, grid, path, title, cmap, vmin, vmax, label, **kw:
                        (titles.append((grid, title, vmin, vmax)), open(path, "wb").close()))
    assert plots.redraw(run) == [os.path.join(run, "analysis", "localization.png")]
    (grid, title, vmin, vmax), = titles
    assert grid == (2, 2) and (vmin, vmax) == (0.0, plots.LOCALIZATION_VMAX)
    assert "localization margin +0.300" in title.replace("\n", " ")


def test_redraw_draws_a_real_png(tmp_path):
    run = _run_with_analysis(tmp_path, np.eye(4) * 0.6)  # above the shared scale: saturates, still drawn
    path, = plots.redraw(run)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_redraw_without_analysis_is_one_error_line(tmp_path, capsys):
    assert plots.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "analysis.json" in err[0]
    with pytest.raises(FileNotFoundError):
        plots.redraw(str(tmp_path))


def test_resnet_unit_groups_are_r1s_quarters():
    from vit_jax_struct.analysis import cka

    layers = ["stem"] + [f"block{i:02d}" for i in range(8)]  # ResNet-18: four stages of two units
    assert cka.resnet_unit_groups(layers) == {"early": [0, 1, 2], "middle": [3, 4, 5, 6], "late": [7, 8]}
    with pytest.raises(ValueError, match="≥ 4 residual units"):
        cka.resnet_unit_groups(["stem", "block00", "block01"])


def test_redraw_marks_the_ablated_block_and_the_resnet_groups(tmp_path, monkeypatch):
    run = tmp_path / "vit_skip3"
    os.makedirs(run / "analysis" / "cross_cka")
    layers = ["stem"] + [f"block{i:02d}" for i in range(6)]
    (run / "analysis" / "analysis.json").write_text(json.dumps(
        {"workdir": str(run), "model": {"skip_ablation": "3:both"},
         "cka": {"layers": layers, "matrix": np.eye(7).tolist()}}))
    other = ["stem"] + [f"block{i:02d}" for i in range(8)]
    (run / "analysis" / "cross_cka" / "cnn.json").write_text(json.dumps(
        {"layers": layers, "other_layers": other, "matrix": np.zeros((7, 9)).tolist(), "other_model": "resnet"}))
    calls = {}
    monkeypatch.setattr(plots, "heatmap", lambda m, rows, cols, title, path, **kw: calls.update(
        {os.path.basename(path): (title, kw)}))
    plots.redraw(str(run))
    title, kw = calls["cka.png"]
    assert kw["split"] == layers.index("block03") and "block03 removed" in title
    title, kw = calls["cnn.png"]
    assert kw["col_groups"] == {"early": [0, 1, 2], "middle": [3, 4, 5, 6], "late": [7, 8]}


def test_heatmap_title_keeps_the_cka_scale_whole_on_lines_of_its_own():
    title = "CKA: vit_gap,seed=1 vs vit_original,seed=2"
    narrow = plots.heatmap_title(title, 50)
    assert narrow.splitlines() == [title, *plots.CKA_SCALE]
    wide = plots.heatmap_title(title, 80)
    assert wide.splitlines() == [title, " ".join(plots.CKA_SCALE)]
    long = plots.heatmap_title("CKA within vit_original,seed=0; skip connections of block03 removed (dashed: the "
                               "split before it)", 50)
    lines = long.splitlines()
    assert lines[-2:] == list(plots.CKA_SCALE) and all(len(line) <= 50 for line in lines[:-2])
    assert " ".join(lines[:-2]).endswith("(dashed: the split before it)")


def test_a_one_cell_cka_map_writes_its_value_and_keeps_a_readable_height(tmp_path, monkeypatch):
    """R7/R8 pairs from stored Grams give a 1 x 1 map: its value is written in the cell and the figure is as tall as
    a 5-row map's, so the axis label does not run into the title."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figs = {}
    monkeypatch.setattr(plots.storage, "savefig", lambda fig, path, **kw: figs.update({path: fig}))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    plots.heatmap([[0.6234]], ["block05"], ["block05"], "CKA: a vs b", "one", ylabel="layer of vit_gap,seed=2")
    plots.heatmap(np.eye(5), [f"b{i}" for i in range(5)], [f"b{i}" for i in range(5)], "CKA: a vs b", "five")
    one, five = figs["one"], figs["five"]
    assert one.get_size_inches()[1] == five.get_size_inches()[1]
    assert [t.get_text() for t in one.axes[0].texts] == ["0.623"] and not five.axes[0].texts
    monkeypatch.undo()
    plt.close(one)
    plt.close(five)


def test_redraw_draws_the_attention_distances_against_uniform_attention_and_the_local_threshold(tmp_path, monkeypatch):
    run = _run_with_analysis(tmp_path, np.eye(4))  # a 2×2 patch grid
    with open(os.path.join(run, "analysis", "analysis.json")) as f:
        res = json.load(f)
    res["model"]["variant"] = "Ti/10"  # patch 10 px, named by the variant only
    res["attention_distance_pixels"] = {"block00": [3.0, 9.0], "block01": [8.0, 8.5]}
    with open(os.path.join(run, "analysis", "analysis.json"), "w") as f:
        json.dump(res, f)
    drawn = []
    monkeypatch.setattr(plots, "attention_distance", lambda d, path, uniform=None, local=None:
                        drawn.append((d, uniform, local)))
    assert os.path.join(run, "analysis", "attention_distance.png") in plots.redraw(run)
    (d, uniform, local), = drawn
    # 2×2 grid of 10-px patches: distances 0 (4 pairs), 10 (8), 10·√2 (4) over 16 ordered pairs
    assert d == res["attention_distance_pixels"]
    assert uniform == pytest.approx(10 * (8 + 4 * np.sqrt(2)) / 16)
    assert local == pytest.approx(0.75 * uniform)
    # without a patch size the distances cannot be placed against uniform attention: not redrawn
    res["model"] = {"classifier": "token"}
    with open(os.path.join(run, "analysis", "analysis.json"), "w") as f:
        json.dump(res, f)
    drawn.clear()
    assert os.path.join(run, "analysis", "attention_distance.png") not in plots.redraw(run) and not drawn
