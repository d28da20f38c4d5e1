"""Every theory config runs end to end (shrunk: few steps, small samples) and writes its outputs."""

import importlib.util
import json
import os

import pytest

from vit_jax_struct.theory import run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name, arg=None):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", "theory", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


@pytest.mark.parametrize("name", ["population", "no_structure", "empirical", "transfer"])
def test_theory_config_runs(name, tmp_path):
    c = _load(name)
    c.train.update(steps=4, eval_every=2, test_examples=64, batch=32, n_train=c.train.n_train and 32)
    c.transfer.update(pretrain_steps=3, finetune_steps=3, test_examples=64, n_values=(4, 16))
    summary = run.run(c, str(tmp_path))
    with open(tmp_path / "summary.json") as f:
        assert json.load(f)["mode"] == c.theory_mode
    plots = os.listdir(tmp_path / "plots")
    if name == "transfer":
        assert plots == ["transfer.png"] and set(summary["test_error"]) == {"frozen_attention", "scratch", "glm"}
        assert len(summary["test_error"]["glm"]) == 2
    else:
        assert sorted(plots) == ["association.png", "attention.png"]
        assert 0.0 <= summary["final"]["theory/purity"] <= 1.0 and summary["steps"] == 4
    with pytest.raises(ValueError, match=r"theory_mode 'dream' is not one of"):
        c.theory_mode = "dream"
        run.run(c, str(tmp_path / "bad"))


@pytest.mark.parametrize("name", ["population", "no_structure"])
def test_self_init_argument_runs(name, tmp_path):
    c = _load(name, "self_init")
    assert c.model.q_init == "identity" and c.model.v_fixed_scale == 1.25 and c.data.alpha == 2.0
    assert c.data.structured == (name == "population")
    c.train.update(steps=4, eval_every=2, test_examples=64, batch=32)
    summary = run.run(c, str(tmp_path))
    assert summary["final"]["theory/own_set_mass"] > 0.25  # self-attending start: own set above chance at once
    with pytest.raises(ValueError, match=r"is not one of 'idealized', 'self_init'"):
        _load(name, "bogus")
