"""Prepares datasets: CIFAR from the official python archives (`--cifar`, see `data/cifar.py`), and TFRecord-prepared
TFDS datasets to array_record (`--tfds`), so that training reads them with `tfds.data_source`.

    python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-10-python.tar.gz --out=data/cifar10
    python -m vit_jax_struct.data.prepare --cifar=PATH/cifar-100-python.tar.gz --out=data/cifar100

Datasets prepared the usual way (`tfds build imagenet2012`, or downloaded from a bucket) are TFRecord files, which
`tfds.data_source` cannot read (no random access). This tool rewrites every shard as array_record (the format
`tfds build --file_format=array_record` writes) and updates `dataset_info.json`; it needs no TensorFlow:

    python -m vit_jax_struct.data.prepare --tfds=imagenet2012 --data_dir=~/tensorflow_datasets
    python -m vit_jax_struct.data.prepare --tfds=imagenet2012:5.1.0 --data_dir=gs://bucket/tfds --out_dir=/data/tfds

Records are read with the TFRecord reader of `vit_jax_struct.data.tfrecord` (CRC-checked, `etils.epath` paths, so
`gs://` works through gcsfs, installed by requirements.txt) and written with TFDS' own
`ArrayRecordFileAdapter` (array_record `group_size:1`, as `tfds build` does). The serialized `tf.train.Example`
bytes are copied unchanged, so the converted dataset decodes exactly as the original.

Without `--out_dir` the array_record shards are written beside the TFRecord ones and array_record is added to the
dataset's `alternative_file_formats` (TFDS' `convert_format` convention): TensorFlow readers still see TFRecord,
`tfds.data_source` picks array_record. With `--out_dir` a new dataset folder `out_dir/<name>/[<config>/]<version>`
is written with file format array_record; train with `--config.data.root=out_dir`. Finished shards are skipped on
a rerun, so an interrupted conversion resumes.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile

from absl import app, flags, logging
from etils import epath

from vit_jax_struct.data import tfrecord


def _is_local(path: epath.Path) -> bool:
    return "://" not in os.fspath(path)


def find_dataset(name: str, data_dir: str | None):
    """The read-only TFDS builder of the prepared dataset `name` (`name[/config][:version]`) in `data_dir`.

    Raises:
      ValueError: no prepared dataset of that name (and version) in `data_dir`.
    """
    from tensorflow_datasets.core import read_only_builder

    try:
        return read_only_builder.builder_from_files(name, data_dir=data_dir)
    except Exception as e:  # tfds raises DatasetNotFoundError / FileNotFoundError / ValueError
        raise ValueError(f"--tfds={name!r}: no prepared TFDS dataset of that name in --data_dir={data_dir!r} "
                         f"({type(e).__name__}: {e}); expected <data_dir>/{name.split(':')[0]}/<version>/"
                         "dataset_info.json") from e


def _convert_shard(in_path: epath.Path, out_path: epath.Path, expected: int, verify: bool) -> int:
    """Writes the records of TFRecord `in_path` to array_record `out_path` (via a temp file); returns the count."""
    from tensorflow_datasets.core import file_adapters

    count = 0

    def records():
        nonlocal count
        for count, data in enumerate(tfrecord.read_records(in_path, verify=verify), 1):
            yield count - 1, data

    if _is_local(out_path):
        tmp = out_path.parent / (out_path.name + ".incomplete")
        file_adapters.ArrayRecordFileAdapter.write_examples(tmp, records())
    else:  # array_record writes local files only: write here, then copy to the bucket.
        local = tempfile.mkdtemp(prefix="prepare_")
        tmp = epath.Path(local) / out_path.name
        file_adapters.ArrayRecordFileAdapter.write_examples(tmp, records())
    if count != expected:
        tmp.unlink()
        raise ValueError(f"TFRecord shard {in_path} has {count} records but dataset_info.json says {expected}")
    if _is_local(out_path):
        tmp.rename(out_path)
    else:
        tmp.copy(out_path, overwrite=True)
        shutil.rmtree(local)
    return count


def convert(name: str, data_dir: str | None = None, out_dir: str | None = None, num_workers: int = 4,
            verify: bool = True, overwrite: bool = False) -> epath.Path:
    """Converts the TFRecord TFDS dataset `name` in `data_dir` to array_record; returns the converted version dir.

    Args:
      name: TFDS name, `name[/config][:version]` (latest prepared version if none).
      data_dir: TFDS data dir (None: the TFDS default, $TFDS_DATA_DIR or ~/tensorflow_datasets); `gs://` works.
      out_dir: root of a new TFDS data dir for the array_record copy (None: write beside the TFRecord shards).
      num_workers: shards converted in parallel (threads).
      verify: check every record's CRC-32C.
      overwrite: rewrite array_record shards that already exist (default: keep them, i.e. resume).

    Raises:
      ValueError: the dataset is not prepared there, is not TFRecord, or a shard is corrupt, truncated or has a
        different number of records than its `dataset_info.json` says.
    """
    from tensorflow_datasets.core import dataset_info, file_adapters

    builder = find_dataset(name, data_dir)
    in_dir = epath.Path(builder.data_dir)
    proto = dataset_info.read_proto_from_builder_dir(in_dir)
    fmt = file_adapters.FileFormat.from_value(proto.file_format or "tfrecord")
    array_record = file_adapters.FileFormat.ARRAY_RECORD
    if fmt != file_adapters.FileFormat.TFRECORD:
        raise ValueError(f"TFDS dataset {name!r} in {in_dir} is stored as {fmt.value}, not tfrecord; "
                         + ("tfds.data_source reads it as it is" if fmt == array_record else "nothing to convert"))
    out = in_dir if out_dir is None else epath.Path(out_dir).expanduser() / builder.info.full_name
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for split in builder.info.splits.values():
        for in_path, n in zip(split.filepaths, split.shard_lengths, strict=True):
            out_path = out / file_adapters.convert_path_to_file_format(in_path, array_record).name
            if overwrite or not out_path.exists():
                jobs.append((in_path, out_path, n))
    logging.info("converting %d TFRecord shards of %s (%s) to array_record in %s", len(jobs), name, in_dir, out)
    with concurrent.futures.ThreadPoolExecutor(max(1, num_workers)) as pool:
        for done, _ in enumerate(pool.map(lambda j: _convert_shard(*j, verify), jobs), 1):
            if done % 16 == 0 or done == len(jobs):
                logging.info("%d / %d shards", done, len(jobs))
    if out == in_dir:  # in place: array_record becomes an alternative format (TFDS' convert_format convention)
        if array_record.value not in proto.alternative_file_formats:
            proto.alternative_file_formats.append(array_record.value)
    else:  # a new dataset folder: copy the other metadata (features.json, label files), then the updated info
        for f in in_dir.iterdir():
            if f.name != "dataset_info.json" and not file_adapters.is_example_file(f.name) and f.is_file():
                f.copy(out / f.name, overwrite=True)
        proto.file_format = array_record.value
        del proto.alternative_file_formats[:]
    dataset_info.write_dataset_info_proto(proto, out)
    return out


def data_source(name: str, split: str, data_dir: str | None = None):
    """`tfds.data_source(name, split, data_dir)` that also reads array_record shards converted in place.

    TFDS 4.9.10's registered (code) builders, e.g. `imagenet2012`, do not restore `alternative_file_formats` when
    they read `dataset_info.json`, so they refuse a TFRecord dataset whose array_record copy sits beside it (as this
    tool writes by default). The read-only builder made from the files alone (what TFDS uses for datasets without
    code) does, and decodes with the stored `features.json`; `tfds.data_source` is the fallback, and its errors are
    the ones raised.

    Returns:
      a random-access sequence of decoded examples (dicts of numpy arrays), with `.dataset_info`.
    """
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import read_only_builder

    try:
        builder = read_only_builder.builder_from_files(name, data_dir=data_dir)
    except Exception:  # not prepared there: let tfds.data_source say why
        builder = None
    if builder is not None and "array_record" in {f.value for f in builder.info.available_file_formats()}:
        return builder.as_data_source(split)
    return tfds.data_source(name, split=split, data_dir=data_dir, download=False)


def main(argv):
    import sys

    f = flags.FLAGS
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        sys.exit(2)
    if f.cifar:
        from vit_jax_struct.data import cifar

        if f.tfds:
            print("error: give --cifar=ARCHIVE or --tfds=NAME, not both", file=sys.stderr)
            sys.exit(2)
        if not f.out:
            print("error: --cifar needs --out=FOLDER (e.g. --out=data/cifar10, where the sweeps look)", file=sys.stderr)
            sys.exit(2)
        try:
            record = cifar.prepare(f.cifar, f.out, f.labels, overwrite=f.overwrite)
        except (FileNotFoundError, FileExistsError, ValueError) as e:
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
            sys.exit(2)
        name = "cifar10" if record["dataset"] == "cifar10" else "cifar100"
        print(f"{record['dataset']} image folder in {os.path.abspath(f.out)}; train with "
              f"--config.data.root={f.out} (the sweeps' default for {name}: data/{name})")
        return
    if not f.tfds:
        print("error: give --cifar=PATH/cifar-10-python.tar.gz --out=data/cifar10 (CIFAR from the official archives) "
              "or --tfds=NAME (a TFRecord TFDS dataset to array_record)", file=sys.stderr)
        sys.exit(2)
    out = convert(f.tfds, f.data_dir, f.out_dir, f.num_workers, overwrite=f.overwrite)
    root = f.out_dir or f.data_dir or "(the TFDS default data dir)"
    print(f"array_record dataset in {out}; train with --config.data.source=tfds --config.data.name={f.tfds} "
          f"--config.data.root={root}")


if __name__ == "__main__":
    flags.DEFINE_string("tfds", None, "TFDS dataset: name[/config][:version], e.g. imagenet2012:5.1.0")
    flags.DEFINE_string("data_dir", None, "TFDS data dir holding the TFRecord dataset (local or gs://)")
    flags.DEFINE_string("out_dir", None, "new data dir for the array_record copy (default: in place)")
    flags.DEFINE_integer("num_workers", 4, "shards converted in parallel")
    flags.DEFINE_bool("overwrite", False, "rewrite array_record shards (or the --cifar output) that already exist")
    flags.DEFINE_string("cifar", None, "the official python archive: cifar-10-python.tar.gz or "
                        "cifar-100-python.tar.gz (https://www.cs.toronto.edu/~kriz/cifar.html)")
    flags.DEFINE_string("out", None, "with --cifar: the image folder to write, e.g. data/cifar10")
    flags.DEFINE_enum("labels", "fine", ["fine", "coarse"], "with --cifar: CIFAR-100's 100 fine classes or 20 "
                      "coarse superclasses (CIFAR-10 has fine only)")
    app.run(main)
