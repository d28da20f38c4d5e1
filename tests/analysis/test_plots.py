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
    monkeypatch.setattr(plots, "_map_grid", lambda maps, grid, path, title, cmap, vmin, vmax, label:
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
