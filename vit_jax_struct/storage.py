"""One path layer for every file a run reads or writes: local paths and object-store URLs (`gs://bucket/…`).

Everything goes through `etils.epath` (local files through `os`, `gs://` through `gcsfs`), so a workdir, a
`data.root`, an `init_from` or a report folder can live in a bucket. URLs never go through `os.path`: joins are
done by `epath.Path`. Object stores have no append and no rename, and an object is replaced whole, so:

- `write_text` / `write_bytes` replace a file atomically: locally a temporary file (given the mode the process's umask
  gives any new file, e.g. 0644 under 022) then `os.replace`; on a store one upload (an object is either the old or
  the new version, never half of one).
- Appending logs (`train/metrics.py`) keep their records in memory and rewrite the whole object.

Errors of the store (bucket missing, no credentials, the service gone) are raised as `StorageError` naming the
URL; `check_workdir` finds the first two at start-up, before anything is written.

Emulators: `STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` (honoured by gcsfs and google-cloud-storage) and, for
Orbax's tensorstore, `TENSORSTORE_GCS_HTTP_URL` (same host) + `GOOGLE_AUTH_TOKEN_FOR_TESTING`.
"""

from __future__ import annotations

import io
import logging as logging_std
import os
import tempfile

from etils import epath

SCHEMES = ("gs://",)


class StorageError(OSError):
    """A read or write of an object store (or a local disk) failed; the message names the path."""


class _QuietHierarchicalNamespaceProbe(logging_std.Filter):
    """gcsfs probes each bucket for a hierarchical namespace and warns when the probe cannot authenticate (it then
    uses the plain GCS API, which is what we want); one line per call, so drop it."""

    def filter(self, record):
        return "Could not determine bucket type" not in record.getMessage()


logging_std.getLogger("gcsfs").addFilter(_QuietHierarchicalNamespaceProbe())


def is_url(p) -> bool:
    """True for an object-store URL (`gs://…`), False for a local path."""
    return str(p).startswith(SCHEMES) or "://" in str(p)


def path(p) -> epath.Path:
    """`epath.Path` of `p`: a URL as is; a local path with `~` expanded, made absolute.

    Raises:
      ValueError: a URL scheme other than `gs://`.
    """
    s = str(p)
    if is_url(s):
        if not s.startswith(SCHEMES):
            raise ValueError(f"path {s!r}: scheme not supported; use a local path or one of {SCHEMES}")
        return epath.Path(s)
    return epath.Path(os.path.abspath(os.path.expanduser(s)))


def join(base, *parts) -> str:
    """`base/part/…` as a string (a URL stays a URL; a local path stays as given, not made absolute)."""
    if is_url(base):
        return str(epath.Path(str(base)).joinpath(*[str(x) for x in parts]))
    return os.path.join(str(base), *[str(x) for x in parts])


def basename(p) -> str:
    """The last component of a path or URL (`gs://b/runs/vit/` -> `vit`)."""
    return str(p).rstrip("/").rsplit("/", 1)[-1]


def dirname(p) -> str:
    """The path or URL above the last component (`gs://b/runs/vit/` -> `gs://b/runs`; "" for a bare name)."""
    s = str(p).rstrip("/")
    return s.rsplit("/", 1)[0] if "/" in s else ""


def _wrap(what: str, p, e: Exception) -> StorageError:
    if isinstance(e, StorageError):
        return e
    return StorageError(f"{what} {p}: {type(e).__name__}: {e}")


def exists(p) -> bool:
    try:
        return path(p).exists()
    except Exception as e:
        raise _wrap("cannot check", p, e) from e


def isdir(p) -> bool:
    try:
        return path(p).is_dir()
    except Exception as e:
        raise _wrap("cannot check", p, e) from e


def listdir(p) -> list[str]:
    """Sorted names in folder `p` (a URL prefix: the names one level below it)."""
    try:
        return sorted(basename(c) for c in path(p).iterdir())
    except Exception as e:
        raise _wrap("cannot list", p, e) from e


def makedirs(p) -> None:
    """Creates folder `p` and its parents (a no-op on an object store, where folders are prefixes).

    Raises:
      StorageError: `p` or a parent exists and is a file, or it cannot be created.
    """
    if is_url(p):
        return
    try:
        os.makedirs(path(p), exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:  # name the file in the way, in words
        blocker = next((str(q) for q in (path(p), *path(p).parents) if q.exists() and not q.is_dir()), None)
        if blocker is None:
            raise _wrap("cannot create the folder", p, e) from e
        raise StorageError(f"cannot create the folder {p}: {blocker} is a file, not a folder") from e
    except Exception as e:
        raise _wrap("cannot create the folder", p, e) from e


def read_bytes(p) -> bytes:
    try:
        return path(p).read_bytes()
    except FileNotFoundError:
        raise
    except Exception as e:
        raise _wrap("cannot read", p, e) from e


def read_text(p) -> str:
    return read_bytes(p).decode("utf-8")


def write_bytes(p, data: bytes) -> None:
    """Replaces file `p` with `data` atomically (readers see the old or the new file, never part of one).

    Raises:
      StorageError: naming `p` (disk full, read-only, bucket gone, …).
    """
    try:
        if is_url(p):
            path(p).write_bytes(data)
            return
        target = path(p)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent))
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; the file gets the mode open() would give it
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
    except Exception as e:
        raise _wrap("cannot write", p, e) from e


def _umask() -> int:
    """The process's file-creation mask, read from /proc (setting and resetting it, the portable way, would open a
    moment in which another thread's new files get mode 0666)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(p, text: str) -> None:
    write_bytes(p, text.encode("utf-8"))


def append_line(f, p, line: str) -> None:
    """Appends `line` and a newline to `f`, an open local file (of path `p`: append-only logs), and flushes it.

    Raises:
      StorageError: naming `p` (disk full, read-only, …).
    """
    try:
        f.write(line + "\n")
        f.flush()
    except OSError as e:
        raise StorageError(f"cannot write {p}: {e}") from e


def remove(p) -> None:
    """Deletes file `p` if it exists."""
    try:
        q = path(p)
        if q.exists():
            q.unlink()
    except Exception as e:
        raise _wrap("cannot delete", p, e) from e


def move(src, dst) -> None:
    """Moves file or folder `src` to `dst` (a rename locally; copy + delete of every object on a store)."""
    try:
        if is_url(src):
            import gcsfs

            gcsfs.GCSFileSystem().mv(str(src), str(dst), recursive=True)
        else:
            os.makedirs(os.path.dirname(path(dst)), exist_ok=True)
            os.replace(path(src), path(dst))
    except Exception as e:
        raise _wrap(f"cannot move to {dst}:", src, e) from e


def find_folders_with(root, name: str, skip=()) -> list[str]:
    """Every folder below `root` (itself included) that holds a file `name`, skipping folders named in `skip` and
    everything below them; sorted. On an object store one recursive listing (`gcsfs.find`), not a walk."""
    out = []
    if is_url(root):
        import gcsfs

        base = str(root).rstrip("/")
        for key in gcsfs.GCSFileSystem().find(base):
            parts = key.split("/")
            if parts[-1] == name and not set(parts[:-1]) & set(skip):
                out.append("gs://" + "/".join(parts[:-1]))
        return sorted(out)
    for d, dirs, files in os.walk(path(root)):
        dirs[:] = [x for x in dirs if x not in skip]
        if name in files:
            out.append(d)
    return sorted(out)


def savefig(fig, p, **kwargs) -> None:
    """`fig.savefig` to a local path or a URL (rendered in memory, then written whole); format from the suffix."""
    buf = io.BytesIO()
    fig.savefig(buf, format=str(p).rsplit(".", 1)[-1], **kwargs)
    write_bytes(p, buf.getvalue())


def gcs_bucket_and_key(url: str) -> tuple[str, str]:
    """`gs://bucket/a/b` -> `("bucket", "a/b")`."""
    rest = str(url)[len("gs://"):]
    bucket, _, key = rest.partition("/")
    return bucket, key.rstrip("/")


def gcs_client():
    """A `google.cloud.storage.Client` (anonymous against an emulator named by `STORAGE_EMULATOR_HOST`).

    Raises:
      StorageError: no credentials (application default credentials, or a TPU VM's service account).
    """
    from google.cloud import storage as gcs

    try:
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            return gcs.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "test"),
                              credentials=AnonymousCredentials())
        return gcs.Client()
    except Exception as e:
        raise StorageError(
            f"no Google Cloud credentials for gs:// paths ({type(e).__name__}: {e}). On a TPU VM give the VM a "
            "service account with storage access (`--scopes=cloud-platform`); elsewhere run "
            "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS") from e


def check_workdir(workdir, timeout_s: float = 60.0) -> None:
    """Fails fast, before anything is written, when a `gs://` workdir cannot be used (local paths: no-op).

    Raises:
      StorageError: no credentials, the bucket does not exist, or the store does not answer in `timeout_s`,
        each naming the URL.
    """
    if not is_url(workdir):
        return
    p = path(workdir)  # Validates the scheme.
    bucket, _ = gcs_bucket_and_key(str(p))
    try:
        client = gcs_client()
    except StorageError as e:
        raise StorageError(f"workdir {workdir}: {e}") from e
    try:
        found = client.lookup_bucket(bucket, timeout=timeout_s, retry=None)
    except Exception as e:
        raise StorageError(f"workdir {workdir}: cannot reach bucket gs://{bucket} ({type(e).__name__}: {e})") from e
    if found is None:
        raise StorageError(f"workdir {workdir}: bucket gs://{bucket} does not exist (create it in the TPU's region: "
                           f"`gcloud storage buckets create gs://{bucket} --location=REGION`)")
