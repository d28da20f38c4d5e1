"""`--mode=analyze` on real (tiny) trained runs: a ViT compared with a ResNet."""

import json
import os

import ml_collections
import numpy as np

from tests.conftest import tiny_config
from vit_jax_struct.analysis import run
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
              "probes.png", "skip_norms.png", "report.md", "analysis.json"):
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
    with open(os.path.join(out, "report.md")) as f:
        text = f.read()
    assert "![CKA between layers](cka.png)" in text and "Locality" in text
    assert res["step"] == 3
