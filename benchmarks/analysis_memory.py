"""Wall time and peak memory (RSS) of `main.py --mode=analyze` on published-layout checkpoint files.

Writes random-valued checkpoints in the published layouts (the original vit_jax `.npz` of a ViT, with the
ImageNet-21k releases' `pre_logits` layer and 21,843-class head, and optionally a BiT `.npz`), then runs the analysis
of the ViT (against the BiT model with `--bit`) as a child process and reports its wall time and peak resident memory
(`getrusage(RUSAGE_CHILDREN).ru_maxrss`). Random weights cost the same time and memory as the real ones.

    python benchmarks/analysis_memory.py                                   # ViT-B/16, 64 synthetic images (~2 min)
    python benchmarks/analysis_memory.py --vit=B/16 --bit=r50x1 --images=/data/imagenet-sample --examples=100
    python benchmarks/analysis_memory.py --vit=L/16 --examples=1024 --batch=128 --images=/data/imagenet/val

`--timm=NAME` writes a random `.safetensors` in timm's layout with the tensor names and shapes of a published timm
model instead (no head where the published file has none), and analyses it with the config overrides a user gives
for the real file (`TIMM_MODELS`):

    python benchmarks/analysis_memory.py --timm=vit_small_patch14_dinov2.lvd142m --examples=64 --batch=32
    python benchmarks/analysis_memory.py --timm=vit_small_patch14_reg4_dinov2.lvd142m --examples=64 --batch=32
    python benchmarks/analysis_memory.py --timm=deit3_small_patch16_224.fb_in1k --examples=64 --batch=32

`--images` is a folder of `<class>/*.jpg` (read for both the analysis and the probes' train split); without it,
`--examples` random JPEGs in 4 classes are written to a temporary folder. Prints one JSON line: wall time, CPU time
of the analysis process (user + system, little changed by other work on the machine, unlike the wall time) and its
peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def write_vit(variant: str, path: str, image_size: int = 224, classes: int = 21843) -> str:
    """A random ViT `.npz` in the original vit_jax layout (as gs://vit_models/imagenet21k/*.npz), no compilation."""
    import jax
    import numpy as np

    from vit_jax_struct.models import get_model, official

    width = get_model(dict(variant=variant), 1).arch()["width"]
    model = get_model(dict(variant=variant, representation_size=width), classes)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, image_size, image_size, 3))))
    rng = np.random.default_rng(0)
    return official.save_npz(path, jax.tree.map(lambda s: 0.02 * rng.standard_normal(s.shape, np.float32),
                                                shapes["params"]))


def write_bit(spec: str, path: str, classes: int = 21843) -> str:
    """A random BiT `.npz` (`resnet/…` names, as BiT-M-R50x1.npz) for `spec` = 'r<depth>x<k>'."""
    import re

    import numpy as np

    from vit_jax_struct.models import bit, get_model

    m = re.fullmatch(r"r(\d+)x(\d+)", spec)
    model = get_model(dict(name="resnetv2", depth=int(m.group(1)), width_factor=int(m.group(2))), classes)
    np.savez(path, **bit.to_bit_layout(bit.random_params(model, 64)))
    return path


# timm name -> (our config.model for the file's shapes, image size of the file's posemb, head classes (0: the published
# file has no head), the `--config.…` overrides a user gives for the real file on top of configs/vit_s16.py).
TIMM_MODELS = {
    "vit_small_patch14_dinov2.lvd142m": (
        dict(variant="S/14", gelu="erf", layerscale=1e-5), 518, 0,
        ["--config.model.variant=S/14", "--config.model.gelu=erf", "--config.model.layerscale=1e-5",
         "--config.pp.normalize=imagenet", "--config.init_posemb_resize=bicubic"]),
    "vit_small_patch14_reg4_dinov2.lvd142m": (
        dict(variant="S/14", gelu="erf", layerscale=1e-5, num_registers=4), 518, 0,
        ["--config.model.variant=S/14", "--config.model.gelu=erf", "--config.model.layerscale=1e-5",
         "--config.model.num_registers=4", "--config.pp.normalize=imagenet",
         "--config.init_posemb_resize=bicubic"]),
    "deit3_small_patch16_224.fb_in1k": (
        dict(variant="S/16", gelu="erf", layerscale=1e-6), 224, 1000,
        ["--config.model.gelu=erf", "--config.model.layerscale=1e-6", "--config.pp.normalize=imagenet"]),
}


def write_timm(name: str, path: str) -> str:
    """A random `.safetensors` with the names and shapes of timm's published `name` (`TIMM_MODELS`), written without
    our export metadata (a published file records no activation)."""
    import jax
    import numpy as np

    from vit_jax_struct import export
    from vit_jax_struct.models import get_model, torch_layouts

    cfg, size, classes, _ = TIMM_MODELS[name]
    model = get_model(dict(cfg), max(classes, 1))
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), np.zeros((1, size, size, 3))))["params"]
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: 0.02 * rng.standard_normal(s.shape, np.float32), shapes)
    if not classes:
        params = {k: v for k, v in params.items() if k != "head"}
    tensors = export.convert(params, "timm")
    torch_layouts.write_safetensors(path, tensors, {"format": "pt"})
    return path


def synthetic_folder(root: str, n: int) -> str:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        d = os.path.join(root, f"class{i % 4}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (256, 320, 3), dtype=np.uint8)).save(os.path.join(d, f"{i}.jpg"))
    return root


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vit", default="B/16", help="ViT variant (configs/vit_<x><p>.py must exist), e.g. B/16, L/16")
    p.add_argument("--bit", default="", help="also a BiT model for cross-model CKA, e.g. r50x1 or r152x2")
    p.add_argument("--timm", default="", choices=["", *TIMM_MODELS],
                   help="a published timm model's layout and shapes instead of --vit (analysed at 224 px)")
    p.add_argument("--images", default="", help="image folder <class>/*.jpg (default: synthetic)")
    p.add_argument("--examples", type=int, default=64, help="analysis images (the probes' train split: as many)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workdir", default="", help="where files and the analysis go (default: a temporary folder)")
    a = p.parse_args(argv)

    work = a.workdir or tempfile.mkdtemp(prefix="analysis_memory_")
    os.makedirs(work, exist_ok=True)
    images = a.images or synthetic_folder(os.path.join(work, "images"), a.examples)
    t0 = time.time()
    if a.timm:
        vit_path = write_timm(a.timm, os.path.join(work, f"{a.timm}.safetensors"))
        config, overrides = os.path.join(ROOT, "configs", "vit_s16.py"), TIMM_MODELS[a.timm][3]
    else:
        vit_path = write_vit(a.vit, os.path.join(work, f"ViT-{a.vit.replace('/', '_')}.npz"))
        config, overrides = os.path.join(ROOT, "configs", "vit_" + a.vit.replace("/", "").lower() + ".py"), []
    cmd = [sys.executable, os.path.join(ROOT, "main.py"), "--mode=analyze", f"--config={config}:folder={images}",
           *overrides,
           f"--config.init_from={vit_path}", "--config.data.train_split=.", "--config.data.eval_split=.",
           f"--workdir={os.path.join(work, 'out')}", f"--analysis_examples={a.examples}",
           f"--analysis_batch={a.batch}", f"--analysis_probe_examples={a.examples}"]
    if a.bit:
        bit_path = write_bit(a.bit, os.path.join(work, f"BiT-M-{a.bit.upper().replace('X', 'x')}.npz"))
        cmd += [f"--compare_config={os.path.join(ROOT, 'configs', 'bit.py')}:{a.bit}",
                f"--compare_init_from={bit_path}"]
    write_s = time.time() - t0
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    t0 = time.time()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"analysis failed ({proc.returncode}): {' '.join(cmd)}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kib = usage.ru_maxrss  # Linux: KiB
    with open(os.path.join(work, "out", "analysis", "analysis.json")) as f:
        res = json.load(f)
    out = {"vit": a.timm or a.vit, "bit": a.bit or None, "examples": res["examples"], "batch": a.batch,
           "probe_train_examples": a.examples, "wall_s": round(wall, 1),
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_rss_gib": round(peak_kib / 2**20, 2),
           "checkpoint_write_s": round(write_s, 1), "file_mib": round(os.path.getsize(vit_path) / 2**20, 1),
           "cpus": os.cpu_count(), "workdir": work}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
