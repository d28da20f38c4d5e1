"""Test set-up: 8 fake CPU devices (set before JAX is imported) so mesh and resharding tests run anywhere."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No persistent compilation cache unless a test asks for one: runs stay hermetic (nothing under ~/.cache), also the
# main.py subprocesses, which inherit this ("" = off; see trainer.configure_compilation_cache).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", "")

import numpy as np
import pytest
from PIL import Image


def write_image_folder(root, splits=("train", "test"), classes=("cat", "dog", "frog"), per_class=4, size=12,
                       seed=0):
    """Writes `root/<split>/<class>/<i>.jpg` random RGB JPEGs; returns root."""
    rng = np.random.default_rng(seed)
    for split in splits:
        for c in classes:
            d = os.path.join(root, split, c)
            os.makedirs(d, exist_ok=True)
            for i in range(per_class):
                img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(img).save(os.path.join(d, f"{i}.jpg"))
    return str(root)


@pytest.fixture
def image_folder(tmp_path):
    return write_image_folder(tmp_path / "folder")


def tiny_config(**overrides):
    """The default digits config shrunk to a 1-block, 32-wide ViT on 8-px digits: compiles and runs in seconds."""
    from configs import default

    c = default.get_config()
    c.total_steps = 6
    c.batch_size = 16
    c.log_every_steps = 1
    c.eval_every_steps = 3
    c.checkpoint_every_steps = 2
    c.tensorboard = False
    c.data.image_size = 8
    c.data.eval_examples = 32
    c.model.variant = "mu/4"
    c.model.update(width=32, depth=1, mlp_dim=64, num_heads=2)
    c.pp.pad = 1
    c.optim.warmup_steps = 2
    c.mesh.data, c.mesh.fsdp = 1, 1
    return apply_overrides(c, overrides)


def apply_overrides(c, overrides):
    """Sets dotted keys (`"optim.lr"`) of a ConfigDict like `--config.optim.lr=…` would; returns it."""
    for k, v in overrides.items():
        node = c
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return c


@pytest.fixture(scope="session")
def gcs():
    """A GCS emulator for this test process, its client variables set in `os.environ` (see tests/gcs_emulator.py).

    Tests make their own bucket (`gcs.bucket(name)`), so they do not see each other's objects."""
    from tests.gcs_emulator import Emulator

    emu = Emulator().start()
    old = {k: os.environ.get(k) for k in emu.env()}
    os.environ.update(emu.env())
    try:
        import gcsfs

        gcsfs.GCSFileSystem.clear_instance_cache()
    except ImportError:
        pass
    yield emu
    emu.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def sigterm_after_first_save(monkeypatch) -> list:
    """Patches `Checkpointer.save` so the process gets a SIGTERM (a pre-emption notice) right after the first save;
    returns the list the saved step is appended to. Undo with `monkeypatch.undo()` before the resumed run."""
    import signal

    from vit_jax_struct.train import checkpoint

    original_save, sent = checkpoint.Checkpointer.save, []

    def save_then_sigterm(self, step, state, it):
        original_save(self, step, state, it)
        if not sent:
            sent.append(step)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", save_then_sigterm)
    return sent
