"""Entry point: `python main.py --config=configs/<name>.py[:arg] [--workdir=DIR] [--config.key=value …]`.

`python main.py --mode=analyze --workdir=RUN [--compare=OTHER_RUN]` analyses a trained run (see
`vit_jax_struct/analysis/run.py`); `--mode=verify` decodes every example of the config's train and eval splits and
lists the unreadable ones (see `vit_jax_struct/data/verify.py`).
`python main.py --mode=analyze --config=configs/vit_l16.py --config.init_from=ViT-L_16.npz --workdir=OUT
[--compare_config=configs/bit.py:r50x1 --compare_init_from=R50x1.npz]`
analyses published checkpoint files without any training run (docs/published_models.md).

Without `--workdir` a run lives in `runs/<config name>[_<arg>]`, so rerunning the same command resumes it. A
workdir may be a `gs://bucket/…` URL (every file of the run then lives in the bucket).
`--config.multihost=True` (set by `launch/tpu_vm.sh`) calls `vit_jax_struct.train.distributed.initialize` first: one
process per host, every host running the same command; `--config.distributed.*` give the coordinator, process count
and index where the environment does not (see that module).

Exit codes: 0 done (or already complete); 1 a run error (storage, checkpoint, NaN loss, a busy or unwritable
workdir, an image found unreadable mid-run: one line); 2 a usage or config error (one line naming the key or flag,
before anything is written); 130 interrupted by Ctrl-C (the first one saves a checkpoint at the next step; a second
exits at once); 143 pre-empted by SIGTERM after the checkpoint was written (rerun to resume). `--traceback` shows the
whole trace instead of the one line.
"""

import os
import re
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment config file (file.py[:arg]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run folder or gs:// URL (default: runs/<config name>[_<arg>]).")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "analyze", "verify", "predict"],
                          "train: train (and resume) the config in the workdir; analyze: restore the workdir's latest "
                          "checkpoint and write RUN/analysis/ (plots, analysis.json, report.md); verify: decode every "
                          "example of the config's train and eval splits and list the bad ones; predict: classify "
                          "--images with the workdir's latest checkpoint (or --config with its init_from), top-k to "
                          "--out.")
_IMAGES = flags.DEFINE_multi_string("images", [], "predict: image files, folders (searched recursively) or globs "
                                    "(repeatable).")
_TOP = flags.DEFINE_integer("top", 5, "predict: how many classes per image, most probable first.")
_OUT = flags.DEFINE_string("out", None, "predict: write the predictions to this .csv or .json file.")
_PREDICT_BATCH = flags.DEFINE_integer("predict_batch", 64, "predict: images per forward pass.")
_COMPARE = flags.DEFINE_string("compare", None, "analyze: a second run for cross-model CKA (e.g. a ResNet).")
_COMPARE_CONFIG = config_flags.DEFINE_config_file(
    "compare_config", None, "analyze: config of a second model loaded from a checkpoint file (its init_from, or "
    "--compare_init_from) for cross-model CKA, e.g. configs/bit.py:r50x1; it sees the first model's images.",
    lock_config=True)
_COMPARE_INIT = flags.DEFINE_string("compare_init_from", None, "analyze: checkpoint file of the --compare_config "
                                    "model (a ViT .npz, timm .safetensors or Hugging Face folder, or a BiT .npz; "
                                    "local or URL); sets its init_from.")
_EXAMPLES = flags.DEFINE_integer("analysis_examples", 1024, "analyze: eval examples to use.")
_BATCH = flags.DEFINE_integer("analysis_batch", 256, "analyze: minibatch size for CKA (examples).")
_WORKERS = flags.DEFINE_integer("verify_workers", 0, "verify: decoding threads (0: one per CPU core).")
_TRACEBACK = flags.DEFINE_bool("traceback", False, "On a usage, config or run error print the whole traceback, "
                               "not one line.")

USAGE_EXIT, INTERRUPTED_EXIT, PREEMPTED_EXIT = 2, 130, 143
_PROBE = flags.DEFINE_integer("analysis_probe_examples", 2000, "analyze: train-split examples for the linear "
                              "probes (10-shot on 1,000 classes needs ≥ 12,500: 10 per class plus the held-out 20 %).")
_OUTLIER_NORM = flags.DEFINE_float("outlier_norm", 150.0, "analyze: fixed norm threshold of high-norm patch tokens "
                                   "(Darcet et al. 2024 use 150 for DINOv2 ViT-g/14).")
_OUTLIER_K = flags.DEFINE_float("outlier_mad_k", 6.0, "analyze: robust high-norm threshold, median + k * 1.4826 * MAD "
                                "of each block's patch-token norms.")


def default_workdir(config_arg: str) -> str:
    """`configs/vit_l16.py:runlocal` -> `runs/vit_l16_runlocal`."""
    path, _, arg = config_arg.partition(":")
    name = os.path.splitext(os.path.basename(path))[0]
    if arg:
        name += "_" + re.sub(r"[^A-Za-z0-9.=-]+", "_", arg)
    return os.path.join("runs", name)


def _fail(message: str, code: int):
    """Prints `error: <message>` as one line on stderr and exits with `code`; with `--traceback`, the trace of the
    exception being handled comes first (the exit code stays the same)."""
    if _traceback_requested() and sys.exc_info()[0] is not None:
        import traceback

        traceback.print_exc(file=sys.stderr)
    line = " ".join(str(message).split())  # one line, whatever the message
    print(f"error: {line}" + ("" if _traceback_requested() else "  (--traceback for the full trace)"),
          file=sys.stderr)
    sys.exit(code)


def _traceback_requested() -> bool:
    return any(a in ("--traceback", "--traceback=true", "--traceback=True") for a in sys.argv[1:])


def _parse_flags(argv):
    """absl's flag parsing, with a bad flag or config (`--config.model.widht=3`, a missing or failing config file)
    reported as one line and exit code 2. Config files are loaded here (ml_collections loads them lazily)."""
    try:
        rest = flags.FLAGS(argv)
        for flag in (_CONFIG, _COMPARE_CONFIG):
            if flag.value is not None:
                flag.value.keys()  # a config that failed to load raises its error on any attribute access
        return rest
    except Exception as e:
        _fail(_flag_error_line(e, argv), USAGE_EXIT)


def _unquote(text: str) -> str:
    """Undoes the quoting of a KeyError's text (ml_collections puts the key and a suggestion in one, so `str()` gives
    an escaped repr of both): returns the key line and the suggestion line as plain text."""
    import ast

    while len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        try:
            text = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            break
    return text


def _flag_error_line(e: Exception, argv) -> str:
    """One readable line for a flag-parsing error: an unknown config key (ml_collections raises a KeyError or
    AttributeError whose text is a quoted key and a suggestion) names the flag and the suggestion; a config file
    that cannot be loaded names the flag and the cause."""
    text = _unquote(str(e).strip())
    key, _, hint = text.partition("\n")
    key = key.strip().strip("'\"")
    if isinstance(e, (AttributeError, KeyError)) and re.fullmatch(r"[\w.]+", key):
        # ml_collections' text is the quoted key, with a suggestion when one is close ("Did you mean …"); without
        # one, the quotes are all there is, and _unquote has removed them.
        bad = next((a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.") and
                    f".{key}" in a.split("=", 1)[0]), None)
        return f"unknown config key {bad or key}: " + (hint.strip() if hint else "this config has no such field")
    if isinstance(e, OSError) and "Failed loading config file" in text:  # no such file, or it cannot be imported
        cause = text.strip().splitlines()[-1].strip()
        flag = next((a for a in argv[1:] if a.startswith(("--config=", "--compare_config=")) and
                     a.split("=", 1)[1].split(":")[0] in text), "--config")
        return f"cannot load {flag}: {cause}"
    if "Error whilst parsing config file" in text:  # get_config raised: its last traceback line is the message
        flag = text.split(": Error whilst parsing", 1)[0].removeprefix("flag ")
        return f"{flag}: {text.strip().splitlines()[-1].strip()}"
    return text.strip().splitlines()[-1] if text.strip() else type(e).__name__


def main(argv):
    from vit_jax_struct.train import runlog

    logging.get_absl_handler().addFilter(runlog.QuietLibraries())
    runlog.hold_back_library_errors(hold=not _traceback_requested())
    if len(argv) > 1:
        _fail(f"unexpected arguments: {argv[1:]}", USAGE_EXIT)
    from vit_jax_struct import storage
    from vit_jax_struct.train import checkpoint, lock, trainer, validate

    user_errors = (validate.ConfigError, app.UsageError, ValueError, FileNotFoundError, NotADirectoryError)
    run_errors = (storage.StorageError, lock.WorkdirBusyError, checkpoint.CheckpointError, FloatingPointError,
                  trainer.RunError, TimeoutError, RuntimeError)

    try:
        _run()
    except trainer.Preempted as e:  # the trainer has logged it, after the checkpoint was complete
        sys.exit(e.EXIT_CODE)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began
        _fail("interrupted", INTERRUPTED_EXIT)
    except run_errors as e:
        _fail(runlog.short_error(e, 2000), 1)
    except user_errors as e:
        _fail(str(e), USAGE_EXIT)


def _run():
    config = _CONFIG.value
    if config.get("multihost"):  # Before anything touches JAX; fails within config.distributed.initialization_timeout.
        from vit_jax_struct.train import distributed

        distributed.initialize(config.get("distributed"))
    workdir = _WORKDIR.value or default_workdir(config_flags.get_config_filename(flags.FLAGS["config"]))
    from vit_jax_struct import storage

    logging.info("workdir: %s", storage.path(workdir))
    if _MODE.value == "verify":
        from vit_jax_struct.data import verify

        if verify.verify_config(config, workers=_WORKERS.value or None):
            sys.exit(1)
    elif config.get("task") == "theory":  # configs/theory/*: the synthetic experiments, their own loop
        from vit_jax_struct.theory import run as theory_run

        theory_run.run(config, workdir)
    elif _MODE.value == "predict":
        from vit_jax_struct import predict

        if not _WORKDIR.value and not flags.FLAGS["config"].present:
            raise app.UsageError("--mode=predict needs --workdir=RUN (a trained run) or --config=FILE.py "
                                 "--config.init_from=CHECKPOINT")
        explicit = config if flags.FLAGS["config"].present else None  # else the run's own config.json
        predict.run_from_flags(_WORKDIR.value, explicit, _IMAGES.value, _TOP.value, _OUT.value, _PREDICT_BATCH.value)
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
                                    compare_config, _PROBE.value, _OUTLIER_NORM.value, _OUTLIER_K.value)


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
