"""Register tokens (Darcet et al. 2024, "Vision Transformers Need Registers"): `model.num_registers`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax_struct import export
from vit_jax_struct.models import official, torch_layouts, vit


def _model(classifier, num_registers, **kw):
    return vit.VisionTransformer(num_classes=5, variant="mu/4", classifier=classifier, num_registers=num_registers,
                                 **kw)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_registers_are_split_off_every_token_output(classifier):
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    m = _model(classifier, 3)
    v = m.init(jax.random.PRNGKey(1), x)
    assert v["params"]["registers"].shape == (1, 3, 32)
    _, out = m.apply(v, x, return_attention=True)
    n = 16 + (classifier == "token")
    assert out["block00"].shape == (2, n, 32) and out["encoded"].shape == (2, n, 32)
    assert out["registers/block00"].shape == (2, 3, 32)
    att, to_reg = out["attention/block00"], out["register_attention/block00"]
    assert att.shape == (2, 2, n, n) and to_reg.shape == (2, 2, n, 3)
    # The split loses nothing: the attention the CLS/patch queries pay everything sums to 1.
    np.testing.assert_allclose(np.asarray(att.sum(-1) + to_reg.sum(-1)), 1.0, atol=1e-5)


def test_split_registers_takes_the_tokens_between_cls_and_patches():
    x = jnp.arange(2 * 7 * 1, dtype=jnp.float32).reshape(2, 7, 1)
    rest, regs = vit.split_registers(x, num_prefix=1, num_registers=2)
    assert rest[0, :, 0].tolist() == [0, 3, 4, 5, 6] and regs[0, :, 0].tolist() == [1, 2]
    w = jnp.arange(5 * 5, dtype=jnp.float32).reshape(1, 1, 5, 5)
    a, r = vit.split_register_attention(w, num_prefix=1, num_registers=2)
    assert a[0, 0].tolist() == [[0, 3, 4], [15, 18, 19], [20, 23, 24]]
    assert r[0, 0].tolist() == [[1, 2], [16, 17], [21, 22]]


def test_zero_registers_is_the_plain_vit():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    plain, none = _model("token", 0), vit.VisionTransformer(num_classes=5, variant="mu/4")
    v = plain.init(jax.random.PRNGKey(1), x)
    assert "registers" not in v["params"]
    (l0, o0), (l1, o1) = plain.apply(v, x), none.apply(v, x)
    assert np.array_equal(np.asarray(l0), np.asarray(l1)) and set(o0) == set(o1)
    assert not any(k.startswith("registers/") for k in o0)


def test_registers_change_what_the_patches_see():
    """Registers take part in attention: setting them to other values moves the logits (they are not ignored)."""
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    m = _model("gap", 2)
    v = m.init(jax.random.PRNGKey(1), x)
    p = jax.tree.map(lambda a: a, v["params"])
    p["head"]["kernel"] = jax.random.normal(jax.random.PRNGKey(3), p["head"]["kernel"].shape)
    l0, _ = m.apply({"params": p}, x)
    p["registers"] = p["registers"] + 3.0 * jax.random.normal(jax.random.PRNGKey(2), p["registers"].shape)
    l1, _ = m.apply({"params": p}, x)
    assert float(jnp.abs(l1 - l0).max()) > 1e-3


def test_registers_with_positional_attention_are_refused_in_one_line():
    x = jnp.zeros((1, 16, 16, 3))
    with pytest.raises(ValueError, match=r"num_registers=2 with model\.attention='positional'"):
        _model("token", 2, attention="positional").init(jax.random.PRNGKey(0), x)
    with pytest.raises(ValueError, match="num_registers -1"):
        _model("token", -1).init(jax.random.PRNGKey(0), x)


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_timm_round_trip_folds_the_cls_posemb_and_keeps_the_logits(classifier):
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    m = _model(classifier, 4)
    v = m.init(jax.random.PRNGKey(1), x)
    p = jax.tree.map(np.asarray, v["params"])
    rng = np.random.default_rng(0)  # non-zero cls, head and posemb so that a wrong fold shows
    p["head"]["kernel"] = rng.normal(size=p["head"]["kernel"].shape).astype(np.float32)
    if classifier == "token":
        p["cls"] = rng.normal(size=p["cls"].shape).astype(np.float32)
    model_cfg = {"name": "vit", "variant": "mu/4", "classifier": classifier, "num_registers": 4}
    sd = export.convert(p, "timm")
    assert sd["reg_token"].shape == (1, 4, 32) and sd["pos_embed"].shape == (1, 16, 32)
    kw = export.timm_kwargs(export._arch(model_cfg, 5), 16)
    assert kw["reg_tokens"] == 4 and kw["no_embed_class"] is True
    loaded = official.load(sd, v["params"], classifier=classifier, reinit=None)
    l0, _ = m.apply({"params": p}, x)
    l1, _ = m.apply({"params": loaded}, x)
    np.testing.assert_allclose(np.asarray(l1), np.asarray(l0), atol=1e-5)


def test_a_posemb_with_register_entries_is_refused_in_one_line():
    x = jnp.zeros((1, 16, 16, 3))
    m = _model("token", 4)
    v = m.init(jax.random.PRNGKey(1), x)
    sd = export.convert(jax.tree.map(np.asarray, v["params"]), "timm")
    sd["pos_embed"] = np.zeros((1, 1 + 4 + 16, 32), np.float32)  # timm no_embed_class=False with registers
    with pytest.raises(ValueError, match="include its 4 register tokens"):
        official.load(sd, v["params"], classifier="token", reinit=None)


def test_export_to_a_layout_without_registers_is_refused():
    with pytest.raises(export.ExportError, match="no register tokens"):
        export.check_model({"name": "vit", "num_registers": 4}, "hf")
    assert torch_layouts.fold_cls_posemb({"x": np.zeros(1)}) == {"x": np.zeros(1)}


def test_a_register_run_resumes_bitwise_and_its_timm_export_reloads_through_init_from(tmp_path, monkeypatch):
    # The end-to-end path on the tiny digits run: `--config.model.num_registers=2` trains, a SIGTERM after the
    # first checkpoint and a rerun give every logged loss of the uninterrupted run bitwise, and the timm export
    # (`reg_tokens`, `no_embed_class`) loads back through `init_from` with the same logits.
    import json
    import os

    from tests.conftest import sigterm_after_first_save, tiny_config
    from vit_jax_struct.train import checkpoint, metrics, trainer

    cfg = tiny_config(total_steps=6, checkpoint_every_steps=3, eval_every_steps=0, **{"model.num_registers": 2})
    state_a, _ = trainer.train_and_evaluate(cfg, str(tmp_path / "a"))
    assert state_a["params"]["registers"].shape == (1, 2, 32)
    sigterm_after_first_save(monkeypatch)
    with pytest.raises(trainer.Preempted):
        trainer.train_and_evaluate(cfg, str(tmp_path / "b"))
    monkeypatch.undo()
    state_b, _ = trainer.train_and_evaluate(cfg, str(tmp_path / "b"))
    losses = [{r["step"]: r["train/loss"] for r in metrics.read_metrics(tmp_path / d) if "train/loss" in r}
              for d in ("a", "b")]
    assert sorted(losses[0]) == list(range(1, 7)) and losses[0] == losses[1]
    assert checkpoint.params_equal(state_a["params"], state_b["params"])

    out = str(tmp_path / "reg.safetensors")
    assert export.main([f"--workdir={tmp_path / 'a'}", "--format=timm", f"--out={out}"]) == 0
    with open(out + ".json") as f:
        kwargs = json.load(f)["timm"]["kwargs"]
    assert kwargs["reg_tokens"] == 2 and kwargs["no_embed_class"] is True
    ft = tiny_config(total_steps=2, **{"model.num_registers": 2, "init_from": out, "init_reinit": ""})
    parts = trainer.build(ft)
    loaded, _ = checkpoint.load_params(out, parts["abstract_state"]["params"], None,
                                       checkpoint.official_options(ft, parts["model"]))
    x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (3, 8, 8, 3)).astype(np.float32))
    f = jax.jit(lambda p: parts["model"].apply({"params": p}, x)[0])
    np.testing.assert_allclose(np.asarray(f(loaded)), np.asarray(f(state_a["params"])), rtol=0, atol=1e-5)
    assert os.path.getsize(out) > 0
