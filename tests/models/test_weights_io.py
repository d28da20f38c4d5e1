"""Weights in and out: `vit_jax_struct.export` and `init_from` timm / Hugging Face files (issue #20).

Cross-library fixtures (tests/fixtures/make_torch_reference.py, run by hand with torch 2.13.0 CPU, timm 1.0.31,
transformers 5.24.0): (a) a random tiny ViT exported here to timm (token, GAP) and Hugging Face files, loaded there,
with the logits timm and transformers computed; (b) tiny ViTs made in timm (token, GAP) and transformers with
fixed seeds, saved there, with their logits. Measured max |ours − theirs| over the 4 x 5 logits (float32, CPU,
logits up to ≈ 2.3): (a) here -> timm 7.2e-7 (token), 2.5e-7 (GAP), here -> transformers 7.2e-7; (b) timm -> here
6.0e-7 (token), 3.6e-7 (GAP), transformers -> here 9.5e-7. The tolerance is 1e-5, below the 1.1e-4 … 2.8e-4 by
which timm's default erf-GELU moves the same logits.
"""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from tests.conftest import tiny_config
from tests.models.test_published_reference import FIXTURES, load_reference
from vit_jax_struct import export
from vit_jax_struct.models import get_model, official, torch_layouts, vit
from vit_jax_struct.train import checkpoint, trainer

WEIGHTS = os.path.join(FIXTURES, "weights_io")
TOL = 1e-5


@pytest.fixture(scope="module")
def reference():
    return load_reference(os.path.join(WEIGHTS, "reference_logits.json"))


def _tiny(ref, classifier):
    m = ref["model"]
    cfg = dict(name="vit", variant=f"mu/{m['patch_size']}", width=m["width"], depth=m["depth"],
               num_heads=m["num_heads"], mlp_dim=m["mlp_dim"], classifier=classifier)
    model = get_model(cfg, m["classes"])
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 64, 64, 3))))["params"]
    return cfg, model, shapes


def _logits(model, params, x):
    return np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x)[0])(params, x))


@pytest.mark.parametrize("name", ["timm_token", "timm_gap", "hf_token"])
def test_models_made_in_timm_and_transformers_give_their_logits_here(reference, name):
    ref, x = reference
    made = ref["made_there"][name]
    _, model, shapes = _tiny(ref, made["classifier"])
    params = official.load(os.path.join(FIXTURES, made["file"]), shapes, classifier=made["classifier"], reinit="")
    logits, want = _logits(model, params, x), np.asarray(made["logits"])
    assert logits.shape == want.shape == (4, 5)
    np.testing.assert_allclose(logits, want, rtol=0, atol=TOL)
    assert np.ptp(want, axis=0).min() > 1000 * TOL  # every logit differs between the images by far more than TOL


@pytest.mark.parametrize("name", ["timm_token", "timm_gap", "hf_token"])
def test_models_exported_here_give_our_logits_in_timm_and_transformers(reference, name):
    ref, x = reference
    there = ref["exported_here"][name]
    path = os.path.join(FIXTURES, there["file"])
    side_path = os.path.join(path, export.SIDECAR_IN_FOLDER) if name == "hf_token" else path + ".json"
    with open(side_path) as f:
        side = json.load(f)
    cfg, model, shapes = _tiny(ref, side["model"]["classifier"])
    params = official.load(path, shapes, classifier=cfg["classifier"], reinit="")
    # The file is this project's export of exactly these parameters (bitwise).
    again = export.convert(params, side["format"])
    stored = official.read_weights(path)
    assert sorted(again) == sorted(stored) and all(np.array_equal(again[k], stored[k]) for k in stored)
    logits, want = _logits(model, params, x), np.asarray(there["logits"])
    np.testing.assert_allclose(logits, want, rtol=0, atol=TOL)
    if "logits_erf_gelu" in there:  # timm's default GELU is measurably another function
        assert np.abs(logits - np.asarray(there["logits_erf_gelu"])).max() > 5 * TOL
    if name == "hf_token":
        assert there["id2label"] == {str(i): c for i, c in enumerate(side["class_names"])}
        assert there["processor_max_abs_diff"] < 1e-6  # preprocessor_config.json gives our value_range


def test_timm_kwargs_and_hf_config_follow_the_model():
    arch = dict(width=768, depth=12, mlp_dim=3072, num_heads=12, patch_size=16, classifier="gap", num_classes=10)
    kw = export.timm_kwargs(arch, 224)
    assert kw == dict(img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0,
                      qkv_bias=True, num_classes=10, class_token=False, global_pool="avg", fc_norm=False,
                      act_layer="gelu_tanh")
    cfg = export.hf_config({**arch, "classifier": "token", "num_classes": 3}, 224, ["cat", "dog", "frog"])
    assert cfg["layer_norm_eps"] == 1e-6 and cfg["hidden_act"] == "gelu_pytorch_tanh"
    assert cfg["id2label"] == {"0": "cat", "1": "dog", "2": "frog"} and cfg["label2id"]["frog"] == 2
    assert export.hf_config({**arch, "num_classes": 2}, 224)["id2label"] == {"0": "LABEL_0", "1": "LABEL_1"}
    pp = export.preprocessing(224, (0.0, 1.0))
    assert pp["mean"] == [0.0] * 3 and pp["std"] == [1.0] * 3
    erf = {**arch, "gelu": "erf"}  # model.gelu=erf: the libraries' own default GELU
    assert export.timm_kwargs(erf, 224)["act_layer"] == "gelu"
    assert export.hf_config({**erf, "classifier": "token"}, 224)["hidden_act"] == "gelu"
    with pytest.raises(export.ExportError, match=r"model.gelu 'erf': the vit_jax ViT uses flax's tanh GELU"):
        export.check_model({"name": "vit", "gelu": "erf"}, "vit_jax")


def test_the_mlp_gelu_is_the_exact_erf_or_the_tanh_approximation():
    """`model.gelu`: x·Φ(x) with Φ from scipy's erf, or the tanh formula (Hendrycks & Gimpel 2016), computed in
    numpy float64 as the reference for the MLP block's float32 output."""
    from scipy.special import erf

    x = np.linspace(-4, 4, 64, dtype=np.float32).reshape(1, 8, 8)
    ref = {"erf": lambda h: 0.5 * h * (1 + erf(h / np.sqrt(2))),
           "tanh": lambda h: 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))}
    for gelu, f in ref.items():
        block = vit.MlpBlock(mlp_dim=16, gelu=gelu)
        params = block.init(jax.random.key(0), x)["params"]
        h = x.astype(np.float64) @ np.asarray(params["Dense_0"]["kernel"], np.float64) + np.asarray(
            params["Dense_0"]["bias"], np.float64)
        want = f(h) @ np.asarray(params["Dense_1"]["kernel"], np.float64) + np.asarray(params["Dense_1"]["bias"])
        np.testing.assert_allclose(np.asarray(block.apply({"params": params}, x)), want, atol=2e-6)
    other = vit.MlpBlock(mlp_dim=16, gelu="erf").apply({"params": params}, x)  # the two differ measurably
    assert float(np.abs(np.asarray(other) - np.asarray(vit.MlpBlock(mlp_dim=16).apply({"params": params}, x))).max()) > 1e-4
    with pytest.raises(ValueError, match=r"model.gelu 'exact' is not one of 'tanh', 'erf'"):
        get_model({"name": "vit", "variant": "mu/8", "gelu": "exact"}, 2).init(jax.random.key(0), np.zeros((1, 16, 16, 3)))


def test_the_checkpoint_gelu_is_read_and_a_mismatch_refused_in_one_line(tmp_path, caplog):
    assert official.checkpoint_gelu(os.path.join(WEIGHTS, "hf_token"))[0] == "tanh"  # gelu_pytorch_tanh
    assert official.checkpoint_gelu(os.path.join(WEIGHTS, "timm_token.safetensors"))[0] is None  # timm: unsaid
    assert official.checkpoint_gelu("x.npz")[0] == "tanh"
    ours = str(tmp_path / "erf.safetensors")  # our export's header names the GELU (timm's files do not)
    torch_layouts.write_safetensors(ours, {"w": np.zeros(2, np.float32)}, {"format": "pt", "gelu": "erf"})
    assert official.checkpoint_gelu(ours) == ("erf", f"the header of {ours}")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(open(os.path.join(WEIGHTS, "hf_token", "model.safetensors"),
                                                    "rb").read())
    with pytest.raises(ValueError, match=r"a Hugging Face folder without config.json"):
        official.checkpoint_gelu(str(folder))
    cfg = json.load(open(os.path.join(WEIGHTS, "hf_token", "config.json")))
    (folder / "config.json").write_text(json.dumps({**cfg, "hidden_act": "gelu"}))  # transformers' default
    assert official.checkpoint_gelu(str(folder)) == ("erf", f"{folder}/config.json (hidden_act 'gelu')")
    (folder / "config.json").write_text(json.dumps({**cfg, "hidden_act": "relu"}))
    with pytest.raises(ValueError, match=r"hidden_act 'relu' is not supported; allowed: gelu, gelu_fast"):
        official.checkpoint_gelu(str(folder))
    (folder / "config.json").write_text(json.dumps({**cfg, "hidden_act": "gelu"}))
    c = tiny_config()
    c.init_from = str(folder)
    model = get_model(c.model, c.data.num_classes)
    with pytest.raises(ValueError, match=r"was trained with the erf GELU .* but model.gelu is 'tanh': set "
                                         r"--config.model.gelu=erf"):
        checkpoint.official_options(c, model)
    c.model.gelu = "erf"
    assert checkpoint.official_options(c, get_model(c.model, c.data.num_classes))["classifier"] == "token"
    c.model.gelu, c.init_from = "tanh", os.path.join(WEIGHTS, "timm_token.safetensors")
    with caplog.at_level("WARNING"):
        checkpoint.official_options(c, get_model(c.model, c.data.num_classes))
    assert "does not record its GELU (timm files do not; timm's default is the exact erf" in caplog.text


def test_timm_file_with_foreign_keys_lists_every_difference(reference, tmp_path):
    ref, _ = reference
    _, _, shapes = _tiny(ref, "token")
    sd = official.read_weights(os.path.join(WEIGHTS, "timm_token.safetensors"))
    sd["fc_norm.weight"] = np.ones(16, np.float32)
    del sd["norm.bias"]
    sd["blocks.1.mlp.fc1.weight"] = np.zeros((48, 16), np.float32)
    path = str(tmp_path / "bad.safetensors")
    torch_layouts.write_safetensors(path, sd)
    with pytest.raises(ValueError) as e:
        official.load(path, shapes, classifier="token", reinit="")
    msg = str(e.value)
    assert "1 checkpoint entries not in the model [fc_norm.weight (16,)]" in msg
    assert "1 model parameters not in the checkpoint [Transformer/encoder_norm/bias (16,)]" in msg
    assert ("Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel: checkpoint (16, 48) vs model (16, 32)"
            in msg)


def test_hf_names_of_transformers_5_and_vitmodel_and_timm_without_class_posemb(reference):
    ref, _ = reference
    _, _, shapes = _tiny(ref, "token")
    sd = official.read_weights(os.path.join(WEIGHTS, "hf_token"))
    want = official.load(sd, shapes, classifier="token", reinit="")
    renames = (("encoder.layer.", "layers."), ("attention.attention.query", "attention.q_proj"),
               ("attention.attention.key", "attention.k_proj"), ("attention.attention.value", "attention.v_proj"),
               ("attention.output.dense", "attention.o_proj"), ("intermediate.dense", "mlp.fc1"),
               ("output.dense", "mlp.fc2"))
    v5 = {}
    for k, v in sd.items():  # transformers 5's module names, as `ViTModel` keeps them in memory
        name = k
        for old, new in renames:
            name = name.replace(old, new)
        v5[name] = v
    got = official.load(v5, shapes, classifier="token", reinit="")
    assert checkpoint.params_equal(got, want)
    # A ViTModel file (no `vit.` prefix) with a pooler: the pooler is pre_logits, dropped by the default re-init.
    backbone = {k[len("vit."):]: v for k, v in sd.items() if k.startswith("vit.")}
    backbone["pooler.dense.weight"] = np.zeros((16, 16), np.float32)
    backbone["pooler.dense.bias"] = np.zeros(16, np.float32)
    init = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    got = official.load(backbone, init, classifier="token")
    assert np.array_equal(got["head"]["kernel"], init["head"]["kernel"])
    assert np.array_equal(got["embedding"]["kernel"], want["embedding"]["kernel"])
    # timm no_embed_class=True: a class token, posemb for the grid only -> the CLS entry is zero.
    timm = official.read_weights(os.path.join(WEIGHTS, "timm_token.safetensors"))
    timm["pos_embed"] = timm["pos_embed"][:, 1:]
    got = official.load(timm, shapes, classifier="token", reinit="")
    pe = got["Transformer"]["posembed_input"]["pos_embedding"]
    assert np.all(pe[:, 0] == 0) and np.array_equal(pe[:, 1:], timm["pos_embed"])


def test_timm_posemb_of_a_non_square_grid_keeps_its_class_entry_when_the_grid_is_given(reference):
    """A timm file whose grid is 3x5 with a class token has 16 posemb entries, a square: the grid, not the length,
    says that entry 0 is the class token's (it was read as a CLS-less 4x4 grid)."""
    ref, _ = reference
    _, _, shapes = _tiny(ref, "token")
    timm = official.read_weights(os.path.join(WEIGHTS, "timm_token.safetensors"))
    d = timm["pos_embed"].shape[-1]
    pe = np.random.default_rng(0).normal(size=(1, 16, d)).astype(np.float32)
    timm["pos_embed"] = pe
    flat, has_cls = official.canonical_layout(timm, source_grid=(3, 5))
    assert has_cls
    assert not official.canonical_layout(timm, source_grid=(4, 4))[1]  # 16 = 4x4: no class entry
    got = official.load(timm, shapes, classifier="token", reinit="", source_grid=(3, 5))
    ours = got["Transformer"]["posembed_input"]["pos_embedding"]
    g = int(round((ours.shape[1] - 1) ** 0.5))
    assert np.array_equal(ours[:, :1], pe[:, :1])  # the class entry, untouched by the resize
    np.testing.assert_array_equal(ours, official.resize_posemb(pe, (g, g), old_grid=(3, 5), num_prefix=1))
    # A distilled DeiT (a second token and head, 2 posemb prefix entries) is refused by name, not by its posemb.
    deit = {**official.read_weights(os.path.join(WEIGHTS, "timm_token.safetensors")),
            "dist_token": np.zeros((1, 1, d), np.float32), "head_dist.weight": np.zeros((3, d), np.float32)}
    deit["pos_embed"] = np.zeros((1, 2 + g * g, d), np.float32)
    with pytest.raises(ValueError, match=r"distilled DeiT \(timm `dist_token`, `head_dist`\)"):
        official.load(deit, shapes, classifier="token", reinit="")
    # Without the grid the usual lengths still decide: 1 + 14² holds a class entry, 14² (no_embed_class) does not.
    for n, want in ((197, True), (196, False)):
        timm["pos_embed"] = np.zeros((1, n, d), np.float32)
        assert official.canonical_layout(timm)[1] is want


# ----------------------------------------------------------------------------------------------------------------
# Real runs: export from the checkpoint, import through init_from, bitwise.


@pytest.fixture(scope="module", params=["token_unscanned", "gap_scanned_fsdp"])
def run(request, tmp_path_factory):
    scanned = request.param != "token_unscanned"
    c = tiny_config(total_steps=2, checkpoint_every_steps=2, eval_every_steps=0, **{
        "model.depth": 2, "model.scan": scanned, "model.classifier": "gap" if scanned else "token",
        "mesh.fsdp": 2 if scanned else 1})
    workdir = str(tmp_path_factory.mktemp(request.param) / "run")
    trainer.train_and_evaluate(c, workdir)
    return request.param, workdir


def _run_model(workdir, reinit=""):
    with open(os.path.join(workdir, "config.json")) as f:
        config = ml_collections.ConfigDict(json.load(f))
    config.init_reinit = reinit
    parts = trainer.build(config)
    return config, parts


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_export_then_init_from_is_bitwise(run, fmt, tmp_path):
    name, workdir = run
    gap = name.startswith("gap")
    out = str(tmp_path / "new" / ("out" + export.SUFFIX[fmt]))  # its parent folder is made
    if fmt == "hf" and gap:
        assert export.main([f"--workdir={workdir}", "--format=hf", f"--out={out}"]) == 2
        assert not os.path.exists(out)
        return
    assert export.main([f"--workdir={workdir}", f"--format={fmt}", f"--out={out}"]) == 0
    with open(os.path.join(out, "export.json") if fmt == "hf" else out + ".json") as f:
        side = json.load(f)
    assert side["source"]["step"] == 2 and side["format"] == fmt
    assert side["class_names"] == [str(i) for i in range(10)]  # digits, from the run's class_names.json
    assert side["preprocessing"]["value_range"] == [-1.0, 1.0] and side["preprocessing"]["image_size"] == 8
    original, _ = checkpoint.host_params(workdir)
    assert vit.is_scanned(original) == (not name.endswith("unscanned"))
    stored = official.read_weights(out)
    if fmt == "big_vision":  # scanned blocks exactly where the run was scanned
        assert any(k.startswith("params/Transformer/encoderblock/") for k in stored) == vit.is_scanned(original)
    if fmt == "timm":
        assert side["timm"]["kwargs"]["global_pool"] == ("avg" if gap else "token")
        assert stored["patch_embed.proj.weight"].shape == (32, 3, 4, 4)  # OIHW
        assert stored["blocks.1.attn.qkv.weight"].shape == (96, 32)  # fused q, k, v

    config, parts = _run_model(workdir)
    abstract = parts["abstract_state"]["params"]
    loaded, src_step = checkpoint.load_params(out, abstract, None,
                                              checkpoint.official_options(config, parts["model"]))
    loaded = jax.tree.map(np.asarray, loaded)
    assert src_step == 0
    flat_a, flat_b = official.flatten(original), official.flatten(loaded)
    assert sorted(flat_a) == sorted(flat_b)
    folded = {"cls", official.POSEMB} if fmt == "big_vision" and not gap else set()
    for k in flat_a:
        if k not in folded:
            assert np.array_equal(flat_a[k], flat_b[k]), k
    if folded:  # big_vision's class token carries no posemb: the CLS posemb entry is folded into `cls`
        pe = flat_a[official.POSEMB]
        np.testing.assert_array_equal(flat_b["cls"], flat_a["cls"] + pe[:, :1])
        np.testing.assert_array_equal(flat_b[official.POSEMB], np.concatenate([0 * pe[:, :1], pe[:, 1:]], 1))
    x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (3, 8, 8, 3)).astype(np.float32))
    f = jax.jit(lambda p: parts["model"].apply({"params": p}, x)[0])
    np.testing.assert_array_equal(np.asarray(f(loaded)), np.asarray(f(original)))
    # And the loaded parameters export to the same tensors again.
    again = export.convert(loaded, fmt, scan=bool(config.model.scan))
    assert sorted(again) == sorted(stored) and all(np.array_equal(again[k], stored[k]) for k in stored)


@pytest.mark.parametrize("run", ["token_unscanned"], indirect=True)  # the hf layout has a class token only
def test_analyze_and_warm_start_take_a_hugging_face_folder(run, tmp_path):
    _, workdir = run
    out = str(tmp_path / "hf")
    assert export.main([f"--workdir={workdir}", "--format=hf", f"--out={out}"]) == 0
    assert official.is_weights_file(out) and official.is_weights_file(out + "/model.safetensors")
    assert not official.is_weights_file(workdir)
    from vit_jax_struct.analysis import run as analysis_run

    config, _ = _run_model(workdir)
    config.init_from = out
    _, _, variables, step = analysis_run.load_checkpoint_file(config)
    original, _ = checkpoint.host_params(workdir)
    assert step == 0
    # The default re-init regex keeps the fresh head; everything else is the run's.
    flat = official.flatten(jax.tree.map(np.asarray, variables["params"]))
    for k, v in official.flatten(original).items():
        if not k.startswith("head/"):
            assert np.array_equal(flat[k], v), k
    ft = tiny_config(total_steps=1, eval_every_steps=0, checkpoint_every_steps=1, init_from=out,
                     **{"model.depth": 2, "optim.warmup_steps": 0})
    state, _ = trainer.train_and_evaluate(ft, str(tmp_path / "ft"))
    assert int(state["step"]) == 1


@pytest.mark.parametrize("run", ["token_unscanned"], indirect=True)  # one run is enough
def test_bad_export_input_is_one_line_and_writes_nothing(run, tmp_path, capsys):
    _, workdir = run
    from absl import logging

    level = logging.get_absl_logger().level  # main() quiets Orbax while it runs, and only then
    out = str(tmp_path / "x.safetensors")
    cases = [
        ([f"--workdir={tmp_path / 'nope'}", "--format=timm", f"--out={out}"], "no such run folder"),
        ([f"--workdir={workdir}", "--format=onnx", f"--out={out}"],
         "--format 'onnx' is not one of vit_jax, big_vision, timm, hf"),
        ([f"--workdir={workdir}", "--format=timm", f"--out={tmp_path / 'x.npz'}"], "must end with .safetensors"),
        ([f"--workdir={workdir}", "--format=timm", "--step=7", f"--out={out}"], "--step 7: no checkpoint step 7"),
        ([f"--workdir={workdir}", "--format=hf", f"--out={tmp_path / 'h.npz'}"], "must be a folder"),
    ]
    for args, text in cases:
        assert export.main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and text in err, err
    assert os.listdir(tmp_path) == []
    for model, text in ((dict(name="resnet"), "model.name 'resnet' of the run is not a ViT"),
                        (dict(name="vit", classifier="gap"), "use --format=timm"),
                        (dict(name="vit", attention="positional"), "model.attention 'positional'")):
        fake = tmp_path / f"fake_{len(os.listdir(tmp_path))}"
        fake.mkdir()
        (fake / "config.json").write_text(json.dumps({"model": model, "data": {"image_size": 8}}))
        assert export.main([f"--workdir={fake}", "--format=hf", f"--out={tmp_path / 'hf'}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and text in err, err
    assert not (tmp_path / "hf").exists()
    with pytest.raises(SystemExit) as e:  # argparse: a missing flag, one line
        export.main([f"--workdir={workdir}", "--format=timm"])
    assert e.value.code == 2 and capsys.readouterr().err.strip() == "error: the following arguments are required: --out"
    assert export.main([f"--workdir={workdir}", "--format=timm", f"--out={out}"]) == 0
    assert export.main([f"--workdir={workdir}", "--format=timm", f"--out={out}"]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert export.main([f"--workdir={workdir}", "--format=timm", f"--out={out}", "--overwrite"]) == 0
    assert logging.get_absl_logger().level == level


def test_a_run_normalised_per_channel_exports_its_mean_and_std():
    """`pp.normalize=imagenet` (DeiT / DINOv2 inputs): the sidecar and the Hugging Face processor carry the
    per-channel mean and std themselves; a value range becomes the equivalent scalar mean / std."""
    from vit_jax_struct.data import preprocess

    pp = export.preprocessing(224, preprocess.input_scaling({"normalize": "imagenet"}))
    assert pp["value_range"] is None and pp["formula"] == "x = (uint8 / 255 - mean) / std"
    hf = export.hf_preprocessor_config(pp)
    assert (hf["image_mean"], hf["image_std"]) == ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    plain = export.preprocessing(224, preprocess.input_scaling({"value_range": (-1.0, 1.0)}))
    assert (plain["mean"], plain["std"], plain["value_range"]) == ([0.5] * 3, [0.5] * 3, [-1.0, 1.0])
