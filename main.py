"""Entry point: `python main.py --config=configs/<name>.py[:arg] [--workdir=DIR] [--config.key=value …]`.

`python main.py --mode=analyze --workdir=RUN [--compare=OTHER_RUN]` analyses a trained run (see
`vit_jax_struct/analysis/run.py`); `python main.py --mode=analyze --config=configs/vit_l16.py
--config.init_from=ViT-L_16.npz --workdir=OUT [--compare_config=configs/bit.py:r50x1 --compare_init_from=R50x1.npz]`
analyses published checkpoint files without any training run (docs/published_models.md).

Without `--workdir` a run lives in `runs/<config name>[_<arg>]`, so rerunning the same command resumes it.
`--config.multihost=True` (set by `launch/tpu_vm.sh`) calls `vit_jax_struct.train.distributed.initialize` first: one
process per host, every host running the same command; `--config.distributed.*` give the coordinator, process count
and index where the environment does not (see that module).
"""

import logging as logging_std
import os
import re

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment config file (file.py[:arg]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder (default: runs/<config name>[_<arg>]).")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "analyze"],
                          "train: train (and resume) the config in the workdir; analyze: restore the workdir's latest "
                          "checkpoint and write RUN/analysis/ (plots, analysis.json, report.md).")
_COMPARE = flags.DEFINE_string("compare", None, "analyze: a second run for cross-model CKA (e.g. a ResNet).")
_COMPARE_CONFIG = config_flags.DEFINE_config_file(
    "compare_config", None, "analyze: config of a second model loaded from a checkpoint file (its init_from, or "
    "--compare_init_from) for cross-model CKA, e.g. configs/bit.py:r50x1; it sees the first model's images.",
    lock_config=True)
_COMPARE_INIT = flags.DEFINE_string("compare_init_from", None, "analyze: checkpoint file of the --compare_config "
                                    "model (a published ViT or BiT .npz, local or URL); sets its init_from.")
_EXAMPLES = flags.DEFINE_integer("analysis_examples", 1024, "analyze: eval examples to use.")
_BATCH = flags.DEFINE_integer("analysis_batch", 256, "analyze: minibatch size for CKA (examples).")
_PROBE = flags.DEFINE_integer("analysis_probe_examples", 2000, "analyze: train-split examples for the linear "
                              "probes (10-shot on 1,000 classes needs ≥ 12,500: 10 per class plus the held-out 20 %).")


def default_workdir(config_arg: str) -> str:
    """`configs/vit_l16.py:runlocal` -> `runs/vit_l16_runlocal`."""
    path, _, arg = config_arg.partition(":")
    name = os.path.splitext(os.path.basename(path))[0]
    if arg:
        name += "_" + re.sub(r"[^A-Za-z0-9.=-]+", "_", arg)
    return os.path.join("runs", name)


class _QuietLibraries(logging_std.Filter):
    """Drops INFO chatter of orbax and grain (every save logs dozens of lines); their warnings still show."""

    def filter(self, record):
        return record.levelno >= logging_std.WARNING or not any(
            f"/{lib}/" in record.pathname for lib in ("orbax", "grain", "array_record"))


def main(argv):
    logging.get_absl_handler().addFilter(_QuietLibraries())
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    if config.get("multihost"):  # Before anything touches JAX; fails within config.distributed.timeout_s.
        from vit_jax_struct.train import distributed

        distributed.initialize(config.get("distributed"))
    workdir = _WORKDIR.value or default_workdir(config_flags.get_config_filename(flags.FLAGS["config"])
                                                + _config_arg_suffix())
    logging.info("workdir: %s", os.path.abspath(workdir))
    if config.get("task") == "theory":  # configs/theory/*: the synthetic experiments, their own loop
        from vit_jax_struct.theory import run as theory_run

        theory_run.run(config, workdir)
    elif _MODE.value == "train":
        from vit_jax_struct.train import trainer

        trainer.train_and_evaluate(config, workdir)
    else:
        from vit_jax_struct.analysis import run as analysis_run

        if not _WORKDIR.value:
            raise app.UsageError("--mode=analyze needs --workdir=RUN")
        explicit = config if flags.FLAGS["config"].present else None  # else the run's own config.json
        compare_config = _COMPARE_CONFIG.value
        if _COMPARE_INIT.value:
            if compare_config is None:
                raise app.UsageError("--compare_init_from needs --compare_config (the model to load it into)")
            with compare_config.unlocked():
                compare_config.init_from = _COMPARE_INIT.value
        analysis_run.run_from_flags(workdir, _COMPARE.value, explicit, _EXAMPLES.value, _BATCH.value,
                                    compare_config, _PROBE.value)


def _config_arg_suffix() -> str:
    value = flags.FLAGS["config"].serialize().split("=", 1)[-1]
    _, sep, arg = value.partition(":")
    return sep + arg if sep else ""


if __name__ == "__main__":
    app.run(main)
