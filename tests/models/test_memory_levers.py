"""Memory levers change memory, not maths: remat, nn.scan (+ layout converters), bf16 moments, accumulation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.conftest import tiny_config
from vit_jax_struct.models import get_model, vit
from vit_jax_struct.train import trainer
from vit_jax_struct.train.sharding import tree_paths

IMAGES = jax.random.normal(jax.random.key(1), (4, 16, 16, 3))
LABELS = jnp.array([0, 1, 2, 1])


def _model(**kw):
    return get_model(dict(variant="mu/4", depth=3, width=32, mlp_dim=64, num_heads=2, **kw), 3)


def _loss_and_grads(model, params):
    def loss(p):
        logits, _ = model.apply({"params": p}, IMAGES, train=True)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), LABELS[:, None], 1))

    return jax.jit(jax.value_and_grad(loss))(params)


def _assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    assert tree_paths(a) == tree_paths(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def reference():
    model = _model()
    params = model.init(jax.random.key(0), IMAGES[:1])["params"]
    # A non-zero head so that gradients reach every block.
    params["head"]["kernel"] = jax.random.normal(jax.random.key(2), params["head"]["kernel"].shape) * 0.1
    return params, _loss_and_grads(model, params)


@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_remat_gives_the_same_loss_and_gradients(reference, policy):
    params, (loss, grads) = reference
    loss_r, grads_r = _loss_and_grads(_model(remat_policy=policy), params)
    assert float(loss_r) == pytest.approx(float(loss), rel=1e-6)
    _assert_trees_close(grads_r, grads)


@pytest.mark.parametrize("policy", ["none", "nothing_saveable"])
def test_scan_gives_the_same_loss_and_gradients_in_the_stacked_layout(reference, policy):
    params, (loss, grads) = reference
    model = _model(scan=True, remat_policy=policy)
    init = model.init(jax.random.key(0), IMAGES[:1])["params"]
    stacked = vit.stack_blocks(params)
    assert jax.tree.map(jnp.shape, stacked) == jax.tree.map(jnp.shape, init)  # the layout nn.scan creates
    assert stacked["Transformer"]["encoderblock"]["MlpBlock_3"]["Dense_0"]["kernel"].shape == (3, 32, 64)
    loss_s, grads_s = _loss_and_grads(model, stacked)
    assert float(loss_s) == pytest.approx(float(loss), rel=1e-6)
    _assert_trees_close(vit.unstack_blocks(grads_s), grads)


def test_scan_returns_every_block_and_its_attention(reference):
    params = reference[0]
    _, out = _model().apply({"params": params}, IMAGES, return_attention=True)
    _, out_s = _model(scan=True).apply({"params": vit.stack_blocks(params)}, IMAGES, return_attention=True)
    assert sorted(out) == sorted(out_s)
    for k in ("block00", "block02", "attention/block01"):
        np.testing.assert_allclose(out_s[k], out[k], rtol=1e-5, atol=1e-5)


def test_stack_unstack_round_trip(reference):
    params = reference[0]
    back = vit.unstack_blocks(vit.stack_blocks(params))
    assert tree_paths(back) == tree_paths(params)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(back), jax.tree.leaves(params), strict=True))
    assert vit.is_scanned(vit.stack_blocks(params)) and not vit.is_scanned(params)
    assert vit.unstack_blocks(params) is params  # already unscanned: unchanged


def test_scan_refuses_blocks_that_differ():
    with pytest.raises(ValueError, match="skip_ablation"):
        _model(scan=True, skip_ablation="1:both").init(jax.random.key(0), IMAGES[:1])
    with pytest.raises(ValueError, match=r"remat_policy 'sometimes'"):
        _model(remat_policy="sometimes").init(jax.random.key(0), IMAGES[:1])


def test_bf16_compute_keeps_float32_parameters(reference):
    params, (loss, _) = reference
    model = _model(dtype=jnp.bfloat16)
    assert {x.dtype for x in jax.tree.leaves(model.init(jax.random.key(0), IMAGES[:1])["params"])} == {
        jnp.dtype(jnp.float32)}
    loss_bf16, grads = _loss_and_grads(model, params)
    assert {x.dtype for x in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
    assert float(loss_bf16) == pytest.approx(float(loss), rel=2e-2)  # bfloat16 has an 8-bit mantissa


def _one_step(return_initial=False, **overrides):
    config = tiny_config(**{"batch_size": 32, "mesh.data": 4, "mesh.fsdp": 2, "optim.warmup_steps": 0,
                            "optim.lr": 1e-2, **overrides})
    parts = trainer.build(config)
    state_sh = jax.tree.map(lambda s: s.sharding, parts["abstract_state"])
    step = trainer.make_train_step(config, parts["model"], parts["tx"], parts["schedule"], parts["num_classes"],
                                   parts["mesh"], state_sh)
    state = parts["init_state"](jax.random.key(0))
    state["params"]["head"]["kernel"] = state["params"]["head"]["kernel"] + 0.05  # gradients reach the blocks
    if return_initial:
        return jax.device_get(state)
    rng = np.random.default_rng(0)
    batch = {"image": rng.normal(size=(32, 8, 8, 3)).astype(np.float32),
             "label": rng.integers(0, 10, 32).astype(np.int32)}
    from vit_jax_struct.train import sharding

    new_state, metrics = step(state, sharding.global_batch(batch, parts["mesh"]))
    return jax.device_get(new_state), jax.device_get(metrics)


def test_accumulation_over_4_micro_batches_equals_the_full_batch():
    # Plain SGD at lr 1 without clipping or decay: the update is minus the gradient, so comparing parameters
    # compares the accumulated and the full-batch gradients themselves, which are mathematically equal. (An Adam
    # step divides by sqrt(v) ~ |g| and turns the rounding noise of near-zero gradients into O(lr) differences that
    # depend on the CPU's float path, so it is no portable check of the accumulation.)
    sgd = {"optim.name": "sgd", "optim.momentum": 0.0, "optim.lr": 1.0, "optim.grad_clip_norm": 0.0,
           "optim.weight_decay": 0.0, "optim.schedule": "constant"}
    before = _one_step(**sgd, return_initial=True)
    full, m_full = _one_step(**sgd)
    acc, m_acc = _one_step(**sgd, accum_steps=4)
    assert float(m_acc["loss"]) == pytest.approx(float(m_full["loss"]), rel=1e-5)
    assert float(m_acc["grad_norm"]) == pytest.approx(float(m_full["grad_norm"]), rel=1e-4)
    g_full = jax.tree.map(np.subtract, before["params"], full["params"])
    g_acc = jax.tree.map(np.subtract, before["params"], acc["params"])
    scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(g_full))
    assert scale > 1e-3  # gradients reach the parameters
    _assert_trees_close(g_acc, g_full, rtol=1e-3, atol=1e-5 * scale)


def test_accumulation_needs_micro_batches_that_split_over_devices():
    with pytest.raises(ValueError, match="batch_size 32 is not divisible by accum_steps 3"):
        trainer.build(tiny_config(**{"batch_size": 32, "accum_steps": 3}))


def test_bf16_first_moment():
    state = trainer.build(tiny_config(**{"optim.mu_dtype": "bfloat16"}))["abstract_state"]
    adam = state["opt_state"][1][0]  # chain(clip, adamw) -> adamw's ScaleByAdamState
    assert {x.dtype for x in jax.tree.leaves(adam.mu)} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(adam.nu)} == {jnp.dtype(jnp.float32)}
    with pytest.raises(ValueError, match=r"optim\.mu_dtype 'int8'"):
        trainer.build(tiny_config(**{"optim.mu_dtype": "int8"}))


def test_checkpoints_restore_into_the_other_scan_layout(tmp_path):
    from vit_jax_struct.train import checkpoint

    overrides = {"model.depth": 2, "total_steps": 2, "eval_every_steps": 0, "data.eval_examples": 16}
    state, _ = trainer.train_and_evaluate(tiny_config(**overrides), str(tmp_path / "run"))
    state = jax.device_get(state)
    scanned_config = tiny_config(**{**overrides, "model.scan": True, "total_steps": 3})
    abstract = trainer.build(scanned_config)["abstract_state"]
    ckpt = checkpoint.Checkpointer(str(tmp_path / "run" / "checkpoints"))
    restored = jax.device_get(ckpt.restore(2, abstract))
    ckpt.close()
    expected = vit.convert_layout(state, scanned=True)  # params and both Adam moments, stacked
    _assert_trees_close(restored, expected, rtol=0, atol=0)
    params, step = checkpoint.load_params(str(tmp_path / "run"), abstract["params"])  # init_from, too
    assert step == 2
    _assert_trees_close(jax.device_get(params), expected["params"], rtol=0, atol=0)
    # And training resumes in the scanned layout from the unscanned checkpoint.
    resumed, _ = trainer.train_and_evaluate(scanned_config, str(tmp_path / "run"))
    assert int(resumed["step"]) == 3 and vit.is_scanned(resumed["params"])
