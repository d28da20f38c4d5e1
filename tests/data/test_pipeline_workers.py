"""grain worker processes (`data.worker_count`): the threads' examples, exact resume after SIGTERM, picklable."""

import os
import pickle

import numpy as np
import pytest

from tests.conftest import sigterm_after_first_save, tiny_config, write_image_folder
from vit_jax_struct.data import pipeline, preprocess, sources
from vit_jax_struct.train import checkpoint, metrics, trainer


def _losses(workdir):
    return {r["step"]: r["train/loss"] for r in metrics.read_metrics(workdir) if "train/loss" in r}


def test_sources_and_preprocess_pickle(tmp_path):
    write_image_folder(tmp_path, classes=("a", "b"), per_class=2)
    folder = sources.ImageFolderSource(str(tmp_path), "train")
    digits = sources.DigitsSource("train")
    tp = preprocess.TrainPreprocess(16, "inception", 0.3, value_range=None, randaug_layers=1)
    for obj in (folder, digits, sources.SkipUnreadable(folder), tp, preprocess.EvalPreprocess(16)):
        back = pickle.loads(pickle.dumps(obj))
        assert type(back) is type(obj)
    back = pickle.loads(pickle.dumps(folder))
    assert back.paths == folder.paths and np.array_equal(back[1]["image"], folder[1]["image"])
    rec = digits[3]
    a, b = tp(rec, np.random.default_rng(5)), pickle.loads(pickle.dumps(tp))(rec, np.random.default_rng(5))
    assert np.array_equal(a["image"], b["image"])


def test_worker_batches_are_the_threads_examples_and_state_resumes_at_next_batch():
    src = sources.DigitsSource("train")
    tp = preprocess.TrainPreprocess(16, "inception", 0.3, value_range=None)
    ref = pipeline.train_iterator(src, tp, 8, seed=1, num_threads=1)
    stream = [next(ref) for _ in range(6)]  # examples 0..47 of the stream, as threads batch them
    img = np.concatenate([b["image"] for b in stream])
    lab = np.concatenate([b["label"] for b in stream])
    it = pipeline.train_iterator(src, tp, 8, seed=1, num_threads=1, worker_count=2)
    got = [next(it) for _ in range(3)]
    state = it.get_state()
    assert [s["next_index"] for s in state["iterators_in_use_states"]] == [16, 8]  # worker 0: 2 batches, 1: one
    assert checkpoint.data_workers_of_state(state) == 2
    assert checkpoint.data_workers_of_state({"next_index": 8}) == 0  # reader threads
    resumed = pipeline.train_iterator(src, tp, 8, seed=1, num_threads=1, worker_count=2)
    resumed.set_state(state)  # before the first next(): the workers start from this state, not from the beginning
    got += [next(resumed) for _ in range(3)]
    for k, g in enumerate(got):  # batch k: worker k % 2's batch k // 2 of its examples k % 2, k % 2 + 2, ...
        idx = k % 2 + 2 * np.arange(8 * (k // 2), 8 * (k // 2 + 1))
        assert np.array_equal(g["image"], img[idx]) and np.array_equal(g["label"], lab[idx])
    with pytest.raises(ValueError, match="worker_count -1"):
        pipeline.train_iterator(src, tp, 8, seed=1, worker_count=-1)


def test_worker_processes_sigterm_then_rerun_resumes_bitwise(tmp_path, monkeypatch):
    host = {"data.device_augment": False}  # the grain pipeline (the digits are otherwise augmented on the device)
    cfg = tiny_config(total_steps=6, checkpoint_every_steps=2, eval_every_steps=6,
                      **{"data.worker_count": 2, "data.num_threads": 1, "data.prefetch": 16, **host})
    state_a, last_a = trainer.train_and_evaluate(cfg, str(tmp_path / "a"))

    sent = sigterm_after_first_save(monkeypatch)  # pre-emption notice right after the first checkpoint
    with pytest.raises(trainer.Preempted) as stop:
        trainer.train_and_evaluate(cfg, str(tmp_path / "b"))
    monkeypatch.undo()
    assert sent == [2] and stop.value.step == 3
    threads = tiny_config(total_steps=6, checkpoint_every_steps=2, eval_every_steps=6,
                          **{"data.worker_count": 0, "data.num_threads": 1, "data.prefetch": 16, **host})
    with pytest.raises(checkpoint.DataStateMismatch, match=r"written with data.worker_count=2, this run has "
                                                           r"data.worker_count=0.*--config.data.worker_count=2"):
        trainer.train_and_evaluate(threads, str(tmp_path / "b"))  # refused, not skipped as a broken checkpoint
    assert not (tmp_path / "b" / "checkpoints.broken").exists()
    assert sorted(os.listdir(tmp_path / "b" / "checkpoints")) == ["2", "3"]  # the first save and the pre-emption one
    state_b, last_b = trainer.train_and_evaluate(cfg, str(tmp_path / "b"))  # workers start after the restore
    la, lb = _losses(tmp_path / "a"), _losses(tmp_path / "b")
    assert sorted(la) == list(range(1, 7)) and sorted(lb) == sorted(la)
    assert all(la[s] == lb[s] for s in la), {s: (la[s], lb[s]) for s in la if la[s] != lb[s]}
    assert checkpoint.params_equal(state_a["params"], state_b["params"])
    assert last_a["eval/accuracy"] == last_b["eval/accuracy"]
