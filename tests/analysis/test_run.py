"""`--mode=analyze` on real (tiny) trained runs: a ViT compared with a ResNet."""

import json
import os

import jax
import ml_collections
import numpy as np
import pytest

from tests.conftest import tiny_config, write_image_folder
from vit_jax_struct.analysis import posemb, run
from vit_jax_struct.models import bit, get_model, official
from vit_jax_struct.train import trainer


def test_analyze_vit_against_resnet_writes_plots_json_and_report(tmp_path):
    vit_dir, cnn_dir = str(tmp_path / "vit"), str(tmp_path / "cnn")
    trainer.train_and_evaluate(tiny_config(total_steps=3, **{"data.permute_patches": True}), vit_dir)
    cnn = tiny_config(total_steps=2)
    cnn.model = ml_collections.ConfigDict(dict(name="resnet", depth=18, stem="cifar", width=8, norm="batch",
                                               weight_standardization=False, dtype="float32"))
    cnn.data.permute_patches, cnn.data.permutation_patch_size = False, 4
    trainer.train_and_evaluate(cnn, cnn_dir)

    res = run.analyze(vit_dir, compare=cnn_dir, num_examples=96, batch=32, probe_train_examples=120)
    out = os.path.join(vit_dir, "analysis")
    for f in ("cka.png", "cka_vs_cnn.png", "attention_distance.png", "posemb_similarity.png", "localization.png",
              "probes.png", "skip_norms.png", "report.md", "analysis.json", "posemb_similarity_token_order.png",
              "norm_outliers.png"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    with open(os.path.join(out, "analysis.json")) as f:
        saved = json.load(f)
    assert saved["examples"] == 96 and saved["cka"]["layers"] == ["stem", "block00"]
    m = np.asarray(saved["cka"]["matrix"])
    np.testing.assert_allclose(np.diag(m), 1.0, atol=1e-9)
    across = np.asarray(saved["cka_across"]["matrix"])
    assert across.shape == (2, 9) and np.isfinite(across).all()  # ResNet-18: stem + 8 units
    heads = saved["attention_distance_pixels"]["block00"]
    assert len(heads) == 2 and all(0 <= h <= 4 * np.hypot(1, 1) for h in heads)  # 2x2 grid of 4-px patches
    assert saved["posemb"]["reindexed_by_inverse_permutation"] is True
    assert set(saved["probes"]) == {"stem/patch_mean", "block00/cls", "block00/patch_mean",
                                    *(f"block00/token{t:02d}" for t in range(5))}  # CLS + 2x2 patch tokens
    assert 0 <= saved["probes"]["block00/cls"]["full"] <= 1
    assert set(saved["skip_norm_ratios"]) == {"block00/mhsa/cls", "block00/mhsa/patches", "block00/mlp/cls",
                                              "block00/mlp/patches"}
    no = saved["norm_outliers"]
    assert set(no["blocks"]) == {"block00"} and no["analysis_block"] == "block00" and no["grid"] == [2, 2]
    assert len(no["outliers"]["position_fraction"]) == 4 and no["outliers"]["tokens"] == 96 * 4
    assert sum(no["blocks"]["block00"]["histogram"]) == 96 * 4  # every patch token (not CLS) binned once
    with open(os.path.join(out, "report.md")) as f:
        text = f.read()
    assert "![CKA between layers](cka.png)" in text and "Locality" in text and "High-norm patch tokens" in text
    assert res["step"] == 3
    # Without the probes (the verdicts' analyses): the same measures, no probes, no stale probes.png.
    quick = run.analyze(vit_dir, compare=cnn_dir, num_examples=96, batch=32, probes=False)
    assert "probes" not in quick and not os.path.exists(os.path.join(out, "probes.png"))
    np.testing.assert_array_equal(quick["cka"]["matrix"], saved["cka"]["matrix"])
    assert quick["attention_distance_pixels"] == saved["attention_distance_pixels"]
    # Analysed again without a second model: the earlier cross-model figure is stale and goes.
    run.analyze(vit_dir, num_examples=96, batch=32, probes=False)
    assert not os.path.exists(os.path.join(out, "cka_vs_cnn.png"))
    quick = run.analyze(vit_dir, compare=cnn_dir, num_examples=96, batch=32, probes=False)
    # R1's cross-model CKA alone: the same matrix as analyze's, written beside analysis.json, never into it.
    cross = run.cross_cka(vit_dir, cnn_dir, num_examples=96, batch=32)
    np.testing.assert_allclose(cross["matrix"], across, rtol=1e-6, atol=1e-9)
    assert (cross["layers"], cross["other_layers"]) == (saved["cka_across"]["layers"], saved["cka_across"]["other_layers"])
    assert os.path.getsize(os.path.join(out, "cross_cka", "cnn.png")) > 0
    with open(os.path.join(out, "cross_cka", "cnn.json")) as f:
        assert json.load(f)["other"] == cnn_dir
    with open(os.path.join(out, "analysis.json")) as f:
        assert json.load(f)["cka_across"]["matrix"] == quick["cka_across"]["matrix"]
    # Each analysis stores its last block's Gram matrices: two runs' last-block CKA from those files alone equals
    # the live one, up to their float32 storage; the ResNet analysed on its own (unpermuted) images is refused.
    run.analyze(cnn_dir, num_examples=96, batch=32, probes=False)
    assert run.load_last_block_grams(cnn_dir)["sizes"] == [32, 32, 32]
    with pytest.raises(ValueError, match="analysed on different batches"):
        run.stored_cka_across(vit_dir, cnn_dir)
    vit2 = str(tmp_path / "vit2")
    trainer.train_and_evaluate(tiny_config(total_steps=2, seed=1, **{"data.permute_patches": True}), vit2)
    run.analyze(vit2, num_examples=96, batch=32, probes=False)
    live = run.analyze(vit_dir, compare=vit2, num_examples=96, batch=32, probes=False)["cka_across"]
    stored = run.stored_cka_across(vit_dir, vit2)
    assert (stored["layers"], stored["other_layers"], stored["other"]) == (["block00"], ["block00"], vit2)
    np.testing.assert_allclose(stored["matrix"][0][0], live["matrix"][1][1], rtol=1e-5)


def test_analyze_published_vit_file_against_bit_file_without_training(tmp_path):
    """`--mode=analyze --config… --config.init_from=ViT.npz --compare_config… --compare_init_from=BiT.npz`: a random
    ViT in the original vit_jax layout (ImageNet-21k-like: pre_logits + 21-class head) against a random BiT-layout
    ResNet-v2, both written here; no training run, no checkpoint in the workdir."""
    root = write_image_folder(tmp_path / "data", classes=("a", "b", "c"), per_class=8, size=32)
    vit_cfg = tiny_config(**{"data.source": "folder", "data.root": root, "data.image_size": 32,
                             "data.num_classes": 0, "pp.eval_crop_fraction": 1.0})
    vit_cfg.model.update(variant="mu/8", width=32, depth=2, num_heads=2, mlp_dim=64)
    published = get_model({**vit_cfg.model, "representation_size": 8}, 21)
    shapes = jax.eval_shape(lambda: published.init(jax.random.key(0), np.zeros((1, 32, 32, 3))))["params"]
    rng = np.random.default_rng(0)
    vit_params = jax.tree.map(lambda s: 0.3 * rng.standard_normal(s.shape).astype(np.float32), shapes)
    vit_cfg.init_from = official.save_npz(str(tmp_path / "ViT-mu_8.npz"), vit_params)

    bit_model = dict(name="resnetv2", units=(1, 1, 1, 1), width=8, num_groups=4, ws_eps=1e-10, dtype="float32")
    flat = bit.to_bit_layout(bit.random_params(get_model(bit_model, 21843 // 1000), 32))
    assert "resnet/block1/unit01/a/proj/standardized_conv2d/kernel" in flat
    bit_path = str(tmp_path / "BiT-tiny.npz")
    np.savez(bit_path, **flat)
    bit_cfg = tiny_config(init_from=bit_path)
    bit_cfg.model = ml_collections.ConfigDict(bit_model)

    workdir = str(tmp_path / "analysis_run")
    run.run_from_flags(workdir, None, vit_cfg, 24, 12, compare_config=bit_cfg, probe_train_examples=24)
    out = os.path.join(workdir, "analysis")
    for f in ("cka.png", "cka_vs_BiT-tiny.png", "attention_distance.png", "posemb_similarity.png", "localization.png",
              "probes.png", "skip_norms.png", "report.md", "analysis.json"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))
    with open(os.path.join(out, "analysis.json")) as f:
        saved = json.load(f)
    assert saved["checkpoint"] == vit_cfg.init_from and saved["step"] == 0 and saved["examples"] == 24
    assert saved["cka"]["layers"] == ["stem", "block00", "block01"]
    across = np.asarray(saved["cka_across"]["matrix"])
    assert saved["cka_across"]["other_layers"] == ["stem", "block00", "block01", "block02", "block03"]
    assert across.shape == (3, 5) and np.isfinite(across).all() and np.abs(across).max() <= 1.0
    np.testing.assert_allclose(np.diag(np.asarray(saved["cka"]["matrix"])), 1.0, atol=1e-9)
    # The loaded encoder is the file's: the posemb locality equals that of the file's own posemb.
    want = posemb.locality_score(posemb.posemb_patches(vit_params, True), (4, 4))
    np.testing.assert_allclose(saved["posemb"]["locality_spearman"], want, rtol=1e-6)
    assert len(saved["attention_distance_pixels"]["block01"]) == 2
    assert {"block01/cls", "block01/token00", "block01/token16"} <= set(saved["probes"])


def test_analyze_with_fewer_than_4_images_says_how_many_the_split_gave_and_writes_nothing(tmp_path):
    import pytest

    workdir = str(tmp_path / "run")
    cfg = tiny_config(total_steps=2, checkpoint_every_steps=2, eval_every_steps=0)
    trainer.train_and_evaluate(cfg, workdir)
    # Three images reach the analysis (as a `:runlocal` config's two sample photos would): too few for the CKA.
    with pytest.raises(ValueError, match=r"the eval split gave 3 example\(s\) \(--analysis_examples=3, "
                                         r"--analysis_batch=256\)"):
        run.analyze(workdir, num_examples=3)
    assert not os.path.exists(os.path.join(workdir, "analysis"))
