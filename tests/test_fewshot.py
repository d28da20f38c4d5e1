"""Few-shot ridge evaluator (big_vision's `fewshot`): against an independent numpy closed form, and in training."""

import numpy as np
import pytest

from tests.conftest import tiny_config
from vit_jax_struct import fewshot
from vit_jax_struct.train import metrics, trainer, validate


def _normal_equations(x, labels, num_classes, lam):
    """Independent closed form: W = (AᵀA + λI)⁻¹ AᵀY, A = [x, 1], Y ∈ {−1, +1}."""
    a = np.hstack([np.asarray(x, np.float64), np.ones((len(x), 1))])
    y = np.where(np.arange(num_classes)[None] == np.asarray(labels)[:, None], 1.0, -1.0)
    return np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ y)


def _toy(seed=0, n=400, classes=4, dim=6):
    rng = np.random.default_rng(seed)
    centers = 10.0 * np.eye(classes, dim)  # well-separated clusters: linearly separable
    y = rng.integers(0, classes, n)
    return centers[y] + 0.3 * rng.normal(size=(n, dim)), y


def test_ridge_matches_normal_equations_and_separable_toy_is_solved():
    x, y = _toy()
    for lam in (2.0 ** -10, 1.0, 2.0 ** 10):
        np.testing.assert_allclose(fewshot.ridge_fit(x, y, 4, lam), _normal_equations(x, y, 4, lam), rtol=1e-9,
                                   atol=1e-10)
    wide = np.random.default_rng(1).normal(size=(8, 30))  # D+1 > N: the dual form gives the same W
    yw = np.arange(8) % 2
    np.testing.assert_allclose(fewshot.ridge_fit(wide, yw, 2, 0.5), _normal_equations(wide, yw, 2, 0.5), atol=1e-9)
    res = fewshot.few_shot(x[:300], y[:300], x[300:], y[300:], 4, shots=(1, 5, 10, 25), repeats=3, holdout=50)
    assert all(res[str(k)] == 1.0 for k in (1, 5, 10, 25))
    # The 5-shot accuracy of the first draw, recomputed from the normal equations with the chosen λ.
    hold = fewshot.holdout_indices(300, 50, 0 + 1)
    idx = fewshot.k_shot_indices(y[:300], 5, seed=0, exclude=hold)
    assert len(idx) == 20 and not set(idx) & set(hold)
    w = _normal_equations(x[idx], y[idx], 4, res["lambda/5"])
    pred = np.argmax(np.hstack([x[300:], np.ones((100, 1))]) @ w, -1)
    assert np.mean(pred == y[300:]) == 1.0


def test_lambda_is_chosen_on_held_out_examples_and_draws_are_seeded():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 20))
    y = rng.integers(0, 3, 200)  # labels unrelated to x: accuracy depends on the draw
    a = fewshot.few_shot(x[:150], y[:150], x[150:], y[150:], 3, shots=(5,), repeats=4, seed=3, holdout=40)
    b = fewshot.few_shot(x[:150], y[:150], x[150:], y[150:], 3, shots=(5,), repeats=4, seed=3, holdout=40)
    assert a == b and a["std/5"] > 0
    hold = fewshot.holdout_indices(150, 40, 4)
    fit = fewshot.k_shot_indices(y[:150], 5, seed=3, exclude=hold)
    grid = fewshot.L2_GRID
    accs = [fewshot.ridge_accuracy(_normal_equations(x[fit], y[fit], 3, lam), x[hold], y[hold]) for lam in grid]
    assert a["lambda/5"] == grid[int(np.argmax(accs))]
    with pytest.raises(ValueError, match="labels must lie"):
        fewshot.ridge_fit(x[:4], np.array([0, 1, 2, 3]), 3, 1.0)


def test_fewshot_config_is_validated():
    with pytest.raises(validate.ConfigError, match=r"fewshot\.holdout_examples"):
        validate.validate(tiny_config(**{"fewshot.holdout_examples": 3000}))
    with pytest.raises(validate.ConfigError, match=r"fewshot\.shots"):
        validate.validate(tiny_config(**{"fewshot.shots": (0, 5)}))


def test_training_logs_fewshot_accuracy(tmp_path):
    cfg = tiny_config(total_steps=4, eval_every_steps=0, checkpoint_every_steps=0, save_checkpoints=False,
                      **{"fewshot.every_steps": 2, "fewshot.shots": (1, 5), "fewshot.repeats": 2,
                         "fewshot.train_examples": 120, "fewshot.holdout_examples": 30,
                         "fewshot.test_examples": 60})
    _, last = trainer.train_and_evaluate(cfg, str(tmp_path))
    recs = [r for r in metrics.read_metrics(str(tmp_path)) if "fewshot/digits_1shot" in r]
    assert [r["step"] for r in recs] == [2, 4]
    for r in recs:
        assert 0.0 <= r["fewshot/digits_1shot"] <= 1.0 and 0.0 <= r["fewshot/digits_5shot"] <= 1.0
    assert recs[-1]["fewshot/digits_5shot"] > 0.1  # above chance (10 classes) on the digits' pre-logits
    assert last["fewshot/digits_5shot"] == recs[-1]["fewshot/digits_5shot"]


def test_fewshot_datasets_default_to_the_runs_own_data_and_reject_unknown_keys():
    from vit_jax_struct.train import fewshot_eval

    cfg = tiny_config()
    specs = fewshot_eval.dataset_specs(cfg)
    assert list(specs) == ["digits"] and specs["digits"].train_split == "train" and specs["digits"].eval_split == "test"
    cfg.fewshot.datasets = {"c100": {"source": "tfds", "name": "cifar100", "test_split": "test[:1000]"}}
    d = fewshot_eval.dataset_specs(cfg)["c100"]
    assert (d.source, d.name, d.train_split, d.eval_split) == ("tfds", "cifar100", "train", "test[:1000]")
    cfg.fewshot.datasets = {"bad": {"split": "train"}}
    with pytest.raises(ValueError, match="unknown keys"):
        fewshot_eval.dataset_specs(cfg)
