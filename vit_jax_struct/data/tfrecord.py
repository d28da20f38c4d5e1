"""TFRecord files without TensorFlow: a checked reader and a writer (numpy-free, pure Python + google-crc32c).

A TFRecord file is a sequence of records, each framed as (TensorFlow `core/lib/io/record_writer.cc`,
documented in the TensorFlow guide "TFRecord and tf.train.Example"):

    uint64 length            little-endian
    uint32 masked_crc32c(length)
    byte   data[length]
    uint32 masked_crc32c(data)

with `masked_crc(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)` over CRC-32C (Castagnoli). Paths go
through `etils.epath`, so `gs://` works where epath has a backend for it (gcsfs, or TensorFlow's gfile).
Used by `vit_jax_struct.data.prepare` to convert TFRecord-prepared TFDS datasets to array_record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import google_crc32c
from etils import epath

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """The TFRecord checksum of `data`: CRC-32C rotated right by 15 bits plus 0xa282ead8, as a uint32."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def read_records(path, verify: bool = True) -> Iterator[bytes]:
    """Yields the records of the TFRecord file `path` (uncompressed) as bytes, in file order.

    Args:
      path: local path or any `etils.epath` URL (e.g. `gs://bucket/…`).
      verify: check both CRCs of every record (CRC-32C in C, about 1 GB/s; off only for speed tests).

    Raises:
      ValueError: a truncated record or a CRC mismatch, naming the file and the record's byte offset.
    """
    with epath.Path(path).open("rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError(f"TFRecord file {path} is truncated: {len(header)}-byte header at byte {offset}")
            length, length_crc = struct.unpack("<QI", header)
            if verify and masked_crc32c(header[:8]) != length_crc:
                raise ValueError(f"TFRecord file {path}: corrupt length at byte {offset} (CRC mismatch); "
                                 "is it a GZIP/ZLIB-compressed TFRecord? Only uncompressed files are read")
            body = f.read(length + 4)
            if len(body) < length + 4:
                raise ValueError(f"TFRecord file {path} is truncated: record at byte {offset} needs {length} bytes")
            data = body[:length]
            if verify and masked_crc32c(data) != struct.unpack("<I", body[length:])[0]:
                raise ValueError(f"TFRecord file {path}: corrupt record at byte {offset} (data CRC mismatch)")
            offset += 16 + length
            yield data


def write_records(path, records: Iterable[bytes]) -> int:
    """Writes `records` (bytes) to the TFRecord file `path` in the framing above; returns how many were written.

    Byte-identical to `tf.io.TFRecordWriter` without compression.
    """
    n = 0
    with epath.Path(path).open("wb") as f:
        for record in records:
            data = bytes(record)
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked_crc32c(length)) + data +
                    struct.pack("<I", masked_crc32c(data)))
            n += 1
    return n
