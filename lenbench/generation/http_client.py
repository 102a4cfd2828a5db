"""JSON over HTTP for the server backends: one call with retries, and a bounded request pool.

429, 408, 5xx, connection errors and timeouts are retried with exponential backoff and jitter
(honouring `Retry-After`); other HTTP errors fail at once. After one request fails for good, the
queued ones are not sent: the runner then writes no shard, and a rerun resumes there.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from lenbench.configs.generation import ServerClient
from lenbench.generation.length_counts import DEFAULT_PROBE_MAX_TOKENS, DEFAULT_PROBE_PROMPTS

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class ServerError(RuntimeError):
    """A request failed for good (retries exhausted, or an error that retrying cannot fix)."""


class JSONClient:
    """A base URL, an optional bearer key and the retry policy."""

    def __init__(self, base_url: str, *, api_key: str | None = None, max_retries: int = 5,
                 timeout_s: float = 600.0, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 api_suffix: str = "/v1"):
        self.base_url = base_url.rstrip("/")
        if api_suffix and not self.base_url.endswith(api_suffix):
            self.base_url += api_suffix
        self.api_key = api_key
        self.max_retries = int(max_retries)
        self.timeout_s = float(timeout_s)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)

    def _http(self, method: str, path: str, body: dict | None = None) -> dict:
        """One call with retries; returns the decoded JSON body."""
        url = f"{self.base_url}{path}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                detail = e.read()[:500].decode(errors="replace")
                last = f"HTTP {e.code}: {detail}"
                if e.code not in RETRY_STATUS:
                    raise ServerError(f"{method} {url} failed: {last}") from e
                retry_after = e.headers.get("Retry-After") if e.headers else None
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError,
                    TimeoutError, json.JSONDecodeError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
            if attempt == self.max_retries:
                break
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
            delay *= 0.5 + random.random()  # jitter: concurrent clients do not retry in step
            if retry_after is not None:
                with contextlib.suppress(ValueError):
                    delay = min(self.max_backoff_s, max(delay, float(retry_after)))
            time.sleep(delay)
        raise ServerError(f"{method} {url} failed after {self.max_retries + 1} attempts "
                          f"(max_retries={self.max_retries}); last error: {last}")


def run_pool(n: int, concurrency: int, name: str, work: Callable[[int], None],
             on_done: Callable[[int], None] | None = None) -> None:
    """`work(i)` for i in range(n) on `concurrency` threads; the first failure is raised and
    stops the requests not yet sent."""
    failed = threading.Event()

    def one(i: int) -> None:
        if failed.is_set():
            return
        try:
            work(i)
            if on_done is not None:  # a failure here (a shard write) stops the pool too
                on_done(i)
        except BaseException:
            failed.set()
            raise

    pool = ThreadPoolExecutor(max_workers=max(1, min(concurrency, n)), thread_name_prefix=name)
    try:
        futures = [pool.submit(one, i) for i in range(n)]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def client_kwargs(gen: ServerClient, concurrency: int | None = None) -> dict:
    """The client settings of a server backend's `generation` group (shared by HTTP backends);
    `concurrency` stands in when the group leaves it null (llamacpp: its slots)."""
    key_env = getattr(gen, "api_key_env", None)  # llamacpp's server takes no key
    if key_env and not os.environ.get(key_env):
        raise ValueError(f"generation.api_key_env={key_env!r}: that environment variable "
                         "is not set")
    extra, counts = gen.extra_body, gen.usage_counts_eos
    return {"api_key": os.environ.get(key_env) if key_env else None,
            "concurrency": gen.concurrency or concurrency or 8,
            "max_retries": gen.max_retries,
            "timeout_s": gen.timeout_s,
            "backoff_s": gen.backoff_s,
            "max_backoff_s": gen.max_backoff_s,
            "extra_body": dict(extra) if extra is not None else None,
            "token_ids_via_logprobs": bool(getattr(gen, "token_ids_via_logprobs", False)),
            "length_source": getattr(gen, "length_source", None) or "auto",
            "usage_counts_eos": None if counts is None else bool(counts),
            "probe_prompts": list(gen.probe_prompts or DEFAULT_PROBE_PROMPTS),
            "probe_max_tokens": int(gen.probe_max_tokens or DEFAULT_PROBE_MAX_TOKENS)}
