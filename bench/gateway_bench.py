"""Hearth gateway benchmark: through Hearth vs direct to the fake upstream vs through the LiteLLM proxy.

One run starts, on this machine and on loopback only:

* the fake upstream (``hearth fake-upstream``, 20 chunks, no latency), pinned to the upstream core;
* Hearth (``hearth serve``, one uvicorn worker, SQLite in a temp dir, request logging on, memory or
  Redis state), pinned to the system-under-test core;
* the LiteLLM proxy (one process, installed on first use into ``bench/.venv-litellm``), pinned to
  the same system-under-test core, and measured in turn with Hearth (never at the same time);

then measures, for each target, fixed-duration runs after a warm-up, interleaved over ``--rounds``:

(a) non-stream requests/s at concurrency 64, (b) non-stream p50 latency at concurrency 1,
(c) streaming time-to-first-token p50 at concurrency 1, (d) streams/s (20 chunks, fully read) at
concurrency 64, (e) Hearth's RSS idle after warm-up and after the load, (f) time from process start
until ``GET /readyz`` answers 200. Optionally it samples Hearth with ``py-spy`` during an extra
concurrency-64 run and prints the hottest functions.

Results: a table on stdout, ``bench/results/<timestamp>.json`` and ``<timestamp>.md`` (a snippet
for BENCHMARKS.md). Every process started here is stopped on exit, error or Ctrl-C.

Usage: ``python bench/gateway_bench.py [--quick] [--skip-litellm] [--state redis] [--no-profile]``
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
LITELLM_VENV = BENCH / ".venv-litellm"
LITELLM_STAMP = LITELLM_VENV / ".bench-installed"
LOADGEN = BENCH / "loadgen.py"

HOST = "127.0.0.1"
CALLER_KEY = "bench-key-0123456789"
LITELLM_KEY = "sk-bench-litellm-0123456789"
UPSTREAM_KEY = "sk-bench-upstream-dummy-0000"
UPSTREAM_MODEL = "fake-chat"
PUBLIC_MODEL = "bench-chat"
CHUNKS = 20
PROMPT = "Say hello to the benchmark in one short sentence, please."

TARGETS_SPEC = {
    "nonstream_c64_rps": ">= 2500 req/s",
    "ratio_vs_litellm": ">= 25x LiteLLM req/s",
    "added_p50_ms": "<= 1.0 ms",
    "ttft_overhead_p50_ms": "<= 1.5 ms",
    "streams_c64_per_s": ">= 1000 streams/s",
    "idle_rss_mb": "<= 100 MB (read as MiB)",
    "ready_s": "<= 2.0 s",
}


# --------------------------------------------------------------------------------------------
# small helpers


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def http_post(port: int, path: str, body: dict[str, Any], headers: dict[str, str],
              timeout: float = 30.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM in kB from /proc/<pid>/status (empty when the process is gone)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


_CLK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a live process (all threads), in seconds."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def cpu_times() -> dict[str, list[int]]:
    """Per-CPU jiffies from /proc/stat: {cpuN: [user nice system idle iowait irq softirq steal]}."""
    out: dict[str, list[int]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            name, *vals = line.split()
            out[name] = [int(v) for v in vals[:8]]
    return out


def cpu_usage(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    usage: dict[str, dict[str, float]] = {}
    for name, a in after.items():
        b = before.get(name)
        if b is None:
            continue
        d = [x - y for x, y in zip(a, b, strict=True)]
        total = sum(d) or 1
        idle = d[3] + d[4]
        usage[name] = {"busy_pct": round(100 * (total - idle - d[7]) / total, 1),
                       "steal_pct": round(100 * d[7] / total, 1)}
    return usage


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{unit}"


def machine_info() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "mem_total_mb": _mem_total_mb(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def _mem_total_mb() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return None


# --------------------------------------------------------------------------------------------
# processes


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclass
class ProcGroup:
    """Every long-running process this run started; :meth:`stop_all` ends them (by process group)."""

    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str], log_path: Path, cwd: Path,
              cpus: str | None) -> Proc:
        full = (["taskset", "-c", cpus] if cpus is not None else []) + argv
        fh = log_path.open("wb")
        started = time.monotonic()
        popen = subprocess.Popen(full, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        fh.close()
        proc = Proc(name, popen, log_path, started)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, timeout: float = 15.0) -> int | None:
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{proc.name} did not stop within {timeout:.0f}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait(5)
        # children of the process (if any) share its process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc in self.procs:
            self.procs.remove(proc)
        return proc.popen.returncode

    def stop_all(self) -> None:
        for proc in list(reversed(self.procs)):
            with contextlib.suppress(Exception):
                self.stop(proc, timeout=10.0)


def wait_http_ok(proc: Proc, port: int, path: str, timeout: float, interval: float = 0.01) -> float:
    """Poll ``GET path`` until it answers 200; return seconds since the process was started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            tail = proc.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode} before it was ready:\n{tail}")
        try:
            status, _ = http_get(port, path, timeout=1.0)
            if status == 200:
                return time.monotonic() - proc.started_at
        except OSError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"{proc.name} was not ready on :{port}{path} within {timeout:.0f}s")


# --------------------------------------------------------------------------------------------
# configuration files


def hearth_yaml(upstream_port: int) -> str:
    # Demo-like registry (provider, quota group, endpoint, model, price, caller), pointed at the
    # fake upstream. Limits are high so admission never queues in the benchmark.
    return f"""\
providers:
  - name: fake
    kind: openai
    base_url: http://{HOST}:{upstream_port}/v1
quota_groups:
  - name: bench-account
    max_concurrency: 2000
endpoints:
  - name: fake-1
    provider: fake
    upstream_model: {UPSTREAM_MODEL}
    api_key: {UPSTREAM_KEY}
    quota_group: bench-account
    max_concurrency: 1000
    timeout_s: 30
    capabilities: [chat, streaming, json]
models:
  - name: {PUBLIC_MODEL}
    endpoints: [fake-1]
prices:
  - model: {UPSTREAM_MODEL}
    input_per_1m: 0.15
    output_per_1m: 0.60
callers:
  - name: bench
    key: {CALLER_KEY}
"""


def litellm_yaml(upstream_port: int) -> str:
    return f"""\
model_list:
  - model_name: {PUBLIC_MODEL}
    litellm_params:
      model: openai/{UPSTREAM_MODEL}
      api_base: http://{HOST}:{upstream_port}/v1
      api_key: {UPSTREAM_KEY}
litellm_settings:
  telemetry: false
  drop_params: true
  set_verbose: false
  json_logs: false
general_settings:
  master_key: {LITELLM_KEY}
  disable_spend_logs: true
"""


def litellm_env(base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update({
        "LITELLM_TELEMETRY": "False",
        "LITELLM_TELEMETRY_DISABLED": "True",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # do not fetch the price map from the internet
        "LITELLM_MODE": "PRODUCTION",  # do not read a .env file
        "LITELLM_LOG": "ERROR",  # no per-request access log lines
        "DISABLE_ADMIN_UI": "True",
    })
    for key in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL", "OPENAI_API_KEY"):
        env.pop(key, None)
    return env


def ensure_litellm(spec: str) -> tuple[Path | None, str]:
    """Install LiteLLM into its own venv once; return (litellm executable, note)."""
    exe = LITELLM_VENV / "bin" / "litellm"
    py = LITELLM_VENV / "bin" / "python"
    if exe.exists() and LITELLM_STAMP.exists():
        return exe, "cached"
    log(f"installing {spec!r} into {LITELLM_VENV} (first run only) ...")
    try:
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True, timeout=300)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=False,
                       timeout=600)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", spec], check=True, timeout=1500)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"install failed: {exc}"
    if not exe.exists():
        return None, "install finished but bin/litellm is missing"
    LITELLM_STAMP.write_text(spec + "\n")
    return exe, "installed now"


def litellm_version() -> str | None:
    py = LITELLM_VENV / "bin" / "python"
    try:
        out = subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
                             capture_output=True, text=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stdout.strip() or None


def hearth_version() -> str | None:
    try:
        out = subprocess.run([sys.executable, "-c", "import hearth; print(hearth.__version__)"],
                             capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stdout.strip() or None


def source_fingerprint() -> dict[str, Any]:
    """sha256 over src/hearth/**/*.py (path + content) and the newest mtime: which code was measured."""
    import hashlib

    digest = hashlib.sha256()
    newest = 0.0
    files = sorted((ROOT / "src" / "hearth").rglob("*.py"))
    for f in files:
        with contextlib.suppress(OSError):
            digest.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
            newest = max(newest, f.stat().st_mtime)
    return {"sha256": digest.hexdigest()[:16], "files": len(files),
            "newest_mtime_utc": datetime.fromtimestamp(newest, UTC).strftime("%Y-%m-%d %H:%M:%S") if newest else None}


def hearth_argv() -> list[str]:
    """Hearth on the interpreter running the bench: ``/tmp/py311/bin/python bench/…`` measures that venv's."""
    exe = Path(sys.executable).parent / "hearth"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "hearth"]


# --------------------------------------------------------------------------------------------
# targets and load generation


@dataclass
class Target:
    name: str  # "hearth" | "direct" | "litellm"
    port: int
    model: str
    key: str
    proc: Proc | None  # the server whose CPU is the subject (None for direct: the fake is the server)
    path: str = "/v1/chat/completions"

    def body(self, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": PROMPT}]}
        if stream:
            body["stream"] = True
        return body

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}{self.path}"


WRK_DONE = """
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"bytes":%d,"err_connect":%d,"err_read":%d,' ..
    '"err_write":%d,"err_status":%d,"err_timeout":%d,"mean_us":%.1f,"max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
"""


@dataclass
class Env:
    args: argparse.Namespace
    tmp: Path
    procs: ProcGroup
    sut_cpus: str
    upstream_cpus: str
    gen_cpus: str
    generator: str  # "wrk" | "python"
    fake: Proc | None = None
    all_servers: dict[str, Proc] = field(default_factory=dict)
    hearth_requests: int = 0

    @property
    def gc_file(self) -> Path:
        return self.tmp / "hearth-gc.txt"

    def write_body(self, target: Target, stream: bool) -> Path:
        path = self.tmp / f"body-{target.name}-{'stream' if stream else 'plain'}.json"
        path.write_text(json.dumps(target.body(stream)))
        return path

    def wrk_script(self, target: Target, stream: bool) -> Path:
        path = self.tmp / f"wrk-{target.name}-{'stream' if stream else 'plain'}.lua"
        body = json.dumps(target.body(stream))
        assert "]]" not in body
        path.write_text(
            'wrk.method = "POST"\n'
            f"wrk.body = [[{body}]]\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
            f'wrk.headers["Authorization"] = "Bearer {target.key}"\n' + WRK_DONE)
        return path


def check_alive(env: Env) -> None:
    """Fail clearly if a server this run started has exited (e.g. killed from outside)."""
    for name, proc in env.all_servers.items():
        code = proc.popen.poll()
        if code is not None:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            tail = proc.log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{name} (pid {proc.pid}) is gone ({how}) before this measurement; "
                               f"its log ends with:\n{tail}")


def _measure(env: Env, target: Target, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``fn`` and attach CPU use of every server, of the generator and of each core."""
    check_alive(env)
    servers = dict(env.all_servers)
    before = {n: proc_cpu_s(p.pid) for n, p in servers.items()}
    ru_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cores_before = cpu_times()
    t0 = time.monotonic()
    try:
        result = fn()
    except RuntimeError:
        check_alive(env)  # a dead server explains the failure better than the generator's error
        raise
    wall = time.monotonic() - t0
    cores_after = cpu_times()
    ru_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = {n: proc_cpu_s(p.pid) for n, p in servers.items()}
    gen_cpu = (ru_after.ru_utime + ru_after.ru_stime) - (ru_before.ru_utime + ru_before.ru_stime)
    result["window"] = [t0, t0 + wall]
    result["cpu_pct_of_one_core"] = {n: round(100 * (after[n] - before[n]) / wall, 1) for n in servers}
    result["cpu_pct_of_one_core"]["generator"] = round(100 * gen_cpu / wall, 1)
    result["cores"] = cpu_usage(cores_before, cores_after)
    return result


def run_wrk(env: Env, target: Target, *, stream: bool, concurrency: int, duration: int,
            gen_cpus: str) -> dict[str, Any]:
    script = env.wrk_script(target, stream)
    argv = ["taskset", "-c", gen_cpus, "wrk", "-t1", f"-c{concurrency}", f"-d{duration}s", "--timeout", "10s",
            "-s", str(script), target.url]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60, check=False)
    match = re.search(r"^BENCHJSON (\{.*\})$", out.stdout, re.M)
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}")
    raw = json.loads(match.group(1))
    if target.name == "hearth":
        env.hearth_requests += raw["requests"]
    secs = raw["duration_us"] / 1e6
    errors = raw["err_connect"] + raw["err_read"] + raw["err_write"] + raw["err_status"] + raw["err_timeout"]
    return {
        "generator": "wrk", "requests": raw["requests"], "errors": errors, "non_2xx": raw["err_status"],
        "duration_s": secs, "rps": raw["requests"] / secs if secs else 0.0,
        "latency_ms": {"p50": raw["p50_us"] / 1000, "p90": raw["p90_us"] / 1000, "p99": raw["p99_us"] / 1000,
                       "p99.9": raw["p999_us"] / 1000, "mean": raw["mean_us"] / 1000, "max": raw["max_us"] / 1000},
        "wrk_raw": raw,
    }


def run_loadgen(env: Env, target: Target, mode: str, *, stream: bool, concurrency: int, duration: float,
                warmup: float, gen_cpus: str, max_requests: int = 2_000_000) -> dict[str, Any]:
    body = env.write_body(target, stream)
    argv = ["taskset", "-c", gen_cpus, sys.executable, str(LOADGEN), mode, "--url", target.url,
            "--body-file", str(body), "--header", f"Authorization: Bearer {target.key}",
            "--concurrency", str(concurrency), "--duration", str(duration), "--warmup", str(warmup),
            "--max-requests", str(max_requests)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + warmup + 120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"loadgen {mode} failed: {out.stderr[-2000:]}")
    raw = json.loads(out.stdout.strip().splitlines()[-1])
    if target.name == "hearth":
        env.hearth_requests += raw["requests"] + raw["errors"] + raw.get("warmup_requests", 0)
    raw["generator"] = "python"
    raw["rps"] = raw["requests"] / raw["duration_s"] if raw["duration_s"] else 0.0
    return dict(raw)


def throughput_run(env: Env, target: Target, *, stream: bool, concurrency: int) -> dict[str, Any]:
    a = env.args
    # The generator sits on the core that is not the bottleneck: through a proxy, the proxy's core
    # is kept for the proxy (the generator shares the upstream's core); direct, the fake upstream
    # is the subject and the generator takes the otherwise idle system-under-test core.
    gen_cpus = env.gen_cpus if target.name != "direct" else env.sut_cpus
    if env.generator == "wrk":
        if a.warmup > 0:
            run_wrk(env, target, stream=stream, concurrency=concurrency, duration=a.warmup, gen_cpus=gen_cpus)
        res = _measure(env, target, lambda: run_wrk(env, target, stream=stream, concurrency=concurrency,
                                                     duration=a.duration, gen_cpus=gen_cpus))
    else:
        res = _measure(env, target, lambda: run_loadgen(env, target, "closed", stream=stream,
                                                         concurrency=concurrency, duration=a.duration,
                                                         warmup=a.warmup, gen_cpus=gen_cpus))
    res["gen_cpus"] = gen_cpus
    return res


def latency_run(env: Env, target: Target) -> dict[str, Any]:
    """Non-stream, concurrency 1, raw samples from the sequential client on the generator core."""
    a = env.args
    res = _measure(env, target, lambda: run_loadgen(env, target, "latency", stream=False, concurrency=1,
                                                     duration=a.duration, warmup=a.warmup,
                                                     gen_cpus=env.gen_cpus, max_requests=500_000))
    res["gen_cpus"] = env.gen_cpus
    return res


def ttft_run(env: Env, target: Target) -> dict[str, Any]:
    a = env.args
    res = _measure(env, target, lambda: run_loadgen(env, target, "ttft", stream=True, concurrency=1,
                                                     duration=a.duration, warmup=a.warmup,
                                                     gen_cpus=env.gen_cpus, max_requests=200_000))
    res["gen_cpus"] = env.gen_cpus
    return res


# --------------------------------------------------------------------------------------------
# sanity checks


def _stream_text(port: int, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str, bool]:
    status, raw = http_post(port, path, body, headers)
    text: list[str] = []
    done = False
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            piece = json.loads(data)["choices"][0]["delta"].get("content")
            if piece:
                text.append(piece)
    return status, "".join(text), done


def sanity_check(target: Target) -> dict[str, Any]:
    """One non-stream and one stream request; both must return the fake's exact reply text."""
    headers = {"Authorization": f"Bearer {target.key}"}
    status, raw = http_post(target.port, target.path, target.body(False), headers)
    if status != 200:
        raise RuntimeError(f"{target.name}: non-stream sanity request answered {status}: {raw[:500]!r}")
    text = json.loads(raw)["choices"][0]["message"]["content"]
    s_status, s_text, done = _stream_text(target.port, target.path, target.body(True), headers)
    if s_status != 200 or not done:
        raise RuntimeError(f"{target.name}: stream sanity request failed (status {s_status}, [DONE] {done})")
    return {"text": text, "stream_text": s_text}


# --------------------------------------------------------------------------------------------
# profiling


def profile_hearth(env: Env, target: Target, *, stream: bool, out_dir: Path, stamp: str) -> dict[str, Any]:
    """Sample Hearth with py-spy during one extra concurrency-64 run (not counted in the results)."""
    pyspy = ROOT / ".venv" / "bin" / "py-spy"
    exe = str(pyspy) if pyspy.exists() else shutil.which("py-spy")
    assert target.proc is not None
    if exe is None:
        return {"skipped": "py-spy not installed (.venv/bin/pip install py-spy)"}
    kind = "stream" if stream else "nonstream"
    raw_path = out_dir / f"{stamp}-pyspy-hearth-{kind}-c64.txt"
    dur = max(3, min(env.args.duration, 10))
    argv = ["taskset", "-c", env.gen_cpus, exe, "record", "-p", str(target.proc.pid), "-d", str(dur + 1),
            "-r", "100", "-f", "raw", "-o", str(raw_path)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)
        load = run_wrk(env, target, stream=stream, concurrency=64, duration=dur, gen_cpus=env.gen_cpus) \
            if env.generator == "wrk" else run_loadgen(env, target, "closed", stream=stream, concurrency=64,
                                                       duration=dur, warmup=0, gen_cpus=env.gen_cpus)
        _, err = spy.communicate(timeout=dur + 60)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait(5)
    if spy.returncode != 0 or not raw_path.exists():
        return {"skipped": f"py-spy failed: {err.decode(errors='replace')[-500:]}"}
    summary = summarize_collapsed(raw_path.read_text())
    summary["file"] = str(raw_path.relative_to(ROOT))
    summary["rps_while_sampling"] = load["rps"]
    return summary


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

# Frames where a worker thread sits blocked in C code; py-spy cannot tell that this is idle.
_IDLE_LEAVES = ("_connection_worker_thread (aiosqlite/core.py:59)", "_worker (concurrent/futures/thread.py")


def _parse_frame(frame: str) -> tuple[str, str]:
    """(``func (path)`` without the line number, path) for a py-spy frame ``func (path:line)``."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip(), ""
    return f"{m.group('func')} ({m.group('file')})", m.group("file")


def _package(file: str) -> str:
    if not file or file.startswith("<"):
        return "other"
    head = file.split("/", 1)[0]
    return head[:-3] if head.endswith(".py") else head


def summarize_collapsed(text: str, top: int = 25) -> dict[str, Any]:
    """Shares of py-spy samples (raw/collapsed stacks): the event-loop (main) thread by function and by
    package, self and inclusive; worker threads separately, their blocked-idle samples dropped."""
    main_self: dict[str, int] = {}
    main_incl: dict[str, int] = {}
    main_pkg: dict[str, int] = {}
    hearth_incl: dict[str, int] = {}
    worker_self: dict[str, int] = {}
    main_total = worker_total = worker_idle = 0
    for line in text.splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = [f for f in stack.split(";") if f.endswith(")")]
        if not frames:
            continue
        if "threading.py" in frames[0]:
            if any(frames[-1].startswith(idle) for idle in _IDLE_LEAVES):
                worker_idle += count
                continue
            worker_total += count
            leaf, _ = _parse_frame(frames[-1])
            worker_self[leaf] = worker_self.get(leaf, 0) + count
            continue
        main_total += count
        leaf, leaf_file = _parse_frame(frames[-1])
        main_self[leaf] = main_self.get(leaf, 0) + count
        pkg = _package(leaf_file)
        main_pkg[pkg] = main_pkg.get(pkg, 0) + count
        seen: set[str] = set()
        for f in frames:
            name, file = _parse_frame(f)
            if name in seen:
                continue
            seen.add(name)
            main_incl[name] = main_incl.get(name, 0) + count
            if file.startswith("hearth/"):
                hearth_incl[name] = hearth_incl.get(name, 0) + count

    def share(d: dict[str, int], total: int, n: int = top) -> list[tuple[str, float]]:
        return [(k, round(100 * v / (total or 1), 1)) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:n]]

    return {"main_thread_samples": main_total, "worker_thread_busy_samples": worker_total,
            "worker_thread_idle_samples_dropped": worker_idle,
            "self_top": share(main_self, main_total), "inclusive_top": share(main_incl, main_total, top + 20),
            "hearth_inclusive_top": share(hearth_incl, main_total), "self_by_package": share(main_pkg, main_total),
            "worker_self_top": share(worker_self, main_total)}


# --------------------------------------------------------------------------------------------
# the run


def start_fake(env: Env, port: int) -> Proc:
    argv = [*hearth_argv(), "fake-upstream", "--host", HOST, "--port", str(port), "--latency-ms", "0",
            "--chunks", str(CHUNKS)]
    proc = env.procs.start("fake-upstream", argv, dict(os.environ), env.tmp / "fake-upstream.log", ROOT,
                           env.upstream_cpus)
    wait_http_ok(proc, port, "/_fake/stats", timeout=60)
    return proc


def hearth_env(env: Env, port: int, config: Path, db: Path, redis_url: str | None) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    e.update({
        "HEARTH_CONFIG": str(config),
        "HEARTH_HOST": HOST,
        "HEARTH_PORT": str(port),
        "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "HEARTH_STATE_BACKEND": env.args.state,
        "HEARTH_MASTER_KEY": secrets.token_hex(32),
        "HEARTH_LOG_LEVEL": env.args.hearth_log_level,
    })
    for item in env.args.hearth_env:
        key, _, value = item.partition("=")
        if not key.startswith("HEARTH_"):
            raise SystemExit(f"--hearth-env takes HEARTH_*=value, got {item!r}")
        e[key] = value
    if env.args.gc_probe:
        e["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH / "gcprobe"), e.get("PYTHONPATH")) if p)
        e["BENCH_GC_OUT"] = str(env.gc_file)
    if redis_url is not None:
        e["HEARTH_REDIS_URL"] = redis_url
        e["HEARTH_REDIS_PREFIX"] = f"hearth-bench-{secrets.token_hex(4)}:"
    return e


def start_hearth(env: Env, port: int, henv: dict[str, str], label: str,
                 argv: list[str] | None = None) -> tuple[Proc, float]:
    """``argv`` runs Hearth otherwise than this tree's ``.venv`` does (gateway_ab.py's ``--other-python``)."""
    proc = env.procs.start(f"hearth[{label}]", [*(argv or hearth_argv()), "serve"], henv,
                           env.tmp / f"hearth-{label}.log", env.tmp, env.sut_cpus)
    ready = wait_http_ok(proc, port, "/readyz", timeout=60, interval=0.005)
    return proc, ready


def start_redis(env: Env) -> tuple[Proc, str]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("--state redis needs redis-server on PATH (apt-get install -y redis-server)")
    port = free_port()
    argv = [exe, "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no",
            "--protected-mode", "yes", "--dir", str(env.tmp)]
    proc = env.procs.start("redis", argv, dict(os.environ), env.tmp / "redis.log", env.tmp, env.upstream_cpus)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                return proc, f"redis://{HOST}:{port}/0"
        time.sleep(0.05)
    raise RuntimeError("redis-server did not answer PING")


def gc_report(path: Path, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """GC pauses of the Hearth process during each Hearth run (from the --gc-probe file)."""
    pauses: list[tuple[float, int, float]] = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            t, g, ms = line.split()
            pauses.append((float(t), int(g), float(ms)))
    out: dict[str, Any] = {"note": "pauses of the Hearth process while each Hearth run was measured"}
    for r in runs:
        if r["target"] != "hearth" or "window" not in r:
            continue
        lo, hi = r["window"]
        inside = [(g, ms) for t, g, ms in pauses if lo <= t <= hi]
        secs = max(hi - lo, 1e-9)
        per_gen = {}
        for gen in (0, 1, 2):
            vals = [ms for g, ms in inside if g == gen]
            per_gen[f"gen{gen}"] = {"count": len(vals), "total_ms": round(sum(vals), 1),
                                    "max_ms": round(max(vals), 2) if vals else 0.0}
        r["gc"] = per_gen
        key = f"{r['scenario']}#r{r['round']}"
        out[key] = {**per_gen, "gc_share_pct": round(100 * sum(ms for _, ms in inside) / 1000 / secs, 1)}
    return out


def count_request_logs(db: Path) -> int | None:
    try:
        with contextlib.closing(sqlite3.connect(str(db))) as conn:
            row = conn.execute("SELECT count(*) FROM request_logs").fetchone()
            return int(row[0])
    except sqlite3.Error:
        return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-bench-"))
    procs = ProcGroup()
    generator = "python" if args.generator == "python" or shutil.which("wrk") is None else "wrk"
    if generator == "python" and args.generator != "python":
        log("wrk not found (apt-get install -y wrk); falling back to the Python aiohttp generator, "
            "which is much heavier per request and may be the bottleneck")
    if shutil.which("taskset") is None:
        raise SystemExit("taskset (util-linux) is required")
    env = Env(args=args, tmp=tmp, procs=procs, sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
              gen_cpus=args.gen_cpus, generator=generator)
    # keep this orchestrator off the system-under-test core
    with contextlib.suppress(OSError, ValueError):
        os.sched_setaffinity(0, {int(c) for c in args.gen_cpus.split(",")})

    results: dict[str, Any] = {
        "stamp": stamp, "machine": machine_info(), "hearth_version": hearth_version(),
        "hearth_source": source_fingerprint(),
        "config": {"duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds,
                   "state_backend": args.state, "generator": generator, "sut_cpus": args.sut_cpus,
                   "upstream_cpus": args.upstream_cpus, "gen_cpus": args.gen_cpus, "chunks": CHUNKS,
                   "hearth_log_level": args.hearth_log_level, "hearth_env": args.hearth_env, "gc_probe": args.gc_probe,
                   "quick": args.quick},
        "runs": [],
    }
    if generator == "wrk":
        v = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
        results["config"]["wrk"] = (v.stdout or v.stderr).splitlines()[0] if (v.stdout or v.stderr) else "wrk"

    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old_term = signal.signal(signal.SIGTERM, interrupted)
    old_hup = signal.signal(signal.SIGHUP, interrupted)
    old_int = signal.signal(signal.SIGINT, interrupted)  # also when started with SIGINT ignored (`cmd &`)
    try:
        fake_port = free_port()
        log(f"fake upstream on :{fake_port} (cpus {env.upstream_cpus}); temp dir {tmp}")
        env.fake = start_fake(env, fake_port)
        env.all_servers["fake"] = env.fake

        redis_url: str | None = None
        if args.state == "redis":
            rproc, redis_url = start_redis(env)
            env.all_servers["redis"] = rproc
            log(f"redis for the state backend at {redis_url} (cpus {env.upstream_cpus})")

        # ---- Hearth: readiness from a fresh database, then restarts on the migrated one
        config = tmp / "hearth.yaml"
        config.write_text(hearth_yaml(fake_port))
        db = tmp / "hearth.db"
        hport = free_port()
        henv = hearth_env(env, hport, config, db, redis_url)
        ready: dict[str, list[float]] = {"fresh_db": [], "restart": []}
        hearth: Proc | None = None
        for i in range(args.starts):
            proc, secs = start_hearth(env, hport, henv, f"start{i}")
            ready["fresh_db" if i == 0 else "restart"].append(round(secs, 3))
            log(f"Hearth ready in {secs:.3f}s ({'fresh database' if i == 0 else 'restart'})")
            if i < args.starts - 1:
                procs.stop(proc)
            else:
                hearth = proc
        assert hearth is not None
        env.all_servers["hearth"] = hearth
        results["ready_s"] = ready
        rss_start = proc_status(hearth.pid)

        targets: list[Target] = [
            Target("hearth", hport, PUBLIC_MODEL, CALLER_KEY, hearth),
            Target("direct", fake_port, UPSTREAM_MODEL, "not-checked-by-the-fake", None),
        ]

        # ---- LiteLLM
        results["litellm"] = {"measured": False}
        if args.skip_litellm:
            results["litellm"]["reason"] = "skipped with --skip-litellm"
        else:
            exe, note = ensure_litellm(args.litellm_spec)
            if exe is None:
                log(f"LiteLLM not measured: {note}")
                results["litellm"]["reason"] = note
            else:
                lport = free_port()
                lconf = tmp / "litellm.yaml"
                lconf.write_text(litellm_yaml(fake_port))
                lproc = procs.start("litellm", [str(exe), "--config", str(lconf), "--host", HOST, "--port",
                                                str(lport), "--num_workers", "1"],
                                    litellm_env(dict(os.environ)), tmp / "litellm.log", tmp, env.sut_cpus)
                try:
                    lready = wait_http_ok(lproc, lport, "/health/liveliness", timeout=180, interval=0.02)
                    ltarget = Target("litellm", lport, PUBLIC_MODEL, LITELLM_KEY, lproc)
                    sanity_check(ltarget)
                except (RuntimeError, OSError, ValueError, KeyError) as exc:
                    log(f"LiteLLM not measured: it did not start or answer correctly: {exc}")
                    results["litellm"]["reason"] = f"did not start or answer correctly: {str(exc)[:500]}"
                    procs.stop(lproc)
                else:
                    log(f"LiteLLM {litellm_version()} ready in {lready:.2f}s on :{lport} ({note})")
                    results["litellm"] = {"measured": True, "version": litellm_version(), "install": note,
                                          "ready_s": round(lready, 3), "spec": args.litellm_spec}
                    env.all_servers["litellm"] = lproc
                    targets.append(ltarget)

        # ---- sanity: every target returns the fake's exact reply, stream and non-stream
        texts = {t.name: sanity_check(t) for t in targets}
        reference = texts["direct"]
        for name, got in texts.items():
            if got["text"] != reference["text"] or got["stream_text"] != reference["stream_text"]:
                raise RuntimeError(f"{name} does not relay the upstream's reply faithfully: {got} vs {reference}")
        log("sanity: every target relays the upstream's exact text (stream and non-stream)")

        # ---- warm-up of Hearth, then idle RSS
        warm = Target("hearth", hport, PUBLIC_MODEL, CALLER_KEY, hearth)
        for stream in (False, True):
            if generator == "wrk":
                run_wrk(env, warm, stream=stream, concurrency=16, duration=max(1, args.warmup),
                        gen_cpus=env.gen_cpus)
            else:
                run_loadgen(env, warm, "closed", stream=stream, concurrency=16, duration=max(1, args.warmup),
                            warmup=0, gen_cpus=env.gen_cpus)
        time.sleep(2.0)  # let the request-log batch writer flush and the loop go idle
        rss_idle = proc_status(hearth.pid)
        log(f"Hearth idle RSS after warm-up: {rss_idle.get('VmRSS', 0) / 1024:.1f} MiB")
        if "litellm" in env.all_servers:
            results["litellm"]["idle_rss_kb"] = proc_status(env.all_servers["litellm"].pid).get("VmRSS")

        # ---- scenarios, interleaved over rounds
        scenarios: list[tuple[str, Callable[[Target], dict[str, Any]]]] = [
            ("nonstream_c64", lambda t: throughput_run(env, t, stream=False, concurrency=64)),
            ("nonstream_c1", lambda t: latency_run(env, t)),
            ("stream_ttft_c1", lambda t: ttft_run(env, t)),
            ("stream_c64", lambda t: throughput_run(env, t, stream=True, concurrency=64)),
        ]
        for scen, fn in scenarios:
            for rnd in range(args.rounds):
                for t in targets:
                    res = fn(t)
                    res.update({"scenario": scen, "target": t.name, "round": rnd})
                    results["runs"].append(res)
                    log(describe_run(res))

        time.sleep(2.0)
        rss_after = proc_status(hearth.pid)
        if args.gc_probe:
            results["gc_probe"] = gc_report(env.gc_file, results["runs"])
        results["rss_kb"] = {"start": rss_start, "idle_after_warmup": rss_idle, "after_load": rss_after}

        # ---- profile (extra runs, not part of the numbers above)
        if args.profile:
            log("profiling Hearth with py-spy during an extra c=64 run of each kind ...")
            results["profile"] = {
                "nonstream_c64": profile_hearth(env, warm, stream=False, out_dir=RESULTS, stamp=stamp),
                "stream_c64": profile_hearth(env, warm, stream=True, out_dir=RESULTS, stamp=stamp),
            }

        # ---- stop Hearth gracefully (flushes the request-log writer) and count its rows
        code = procs.stop(hearth, timeout=20)
        env.all_servers.pop("hearth", None)
        results["hearth_exit_code"] = code
        results["request_logs"] = {"rows": count_request_logs(db),
                                   "completed_by_generators": env.hearth_requests}
        with contextlib.suppress(OSError):
            results["fake_stats"] = json.loads(http_get(fake_port, "/_fake/stats")[1])
            results["fake_stats"].pop("last_body", None)
            results["fake_stats"].pop("last_headers", None)
    finally:
        procs.stop_all()
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGHUP, old_hup)
        signal.signal(signal.SIGINT, old_int)
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    end_source = source_fingerprint()
    if end_source["sha256"] != results["hearth_source"]["sha256"]:
        results["hearth_source"]["changed_during_run_to"] = end_source
        log("note: src/hearth changed while this run was in progress (the Hearth processes run the code as it "
            "was when they started)")
    results["summary"] = summarize(results)
    json_path = RESULTS / f"{stamp}.json"
    json_path.write_text(json.dumps(results, indent=2))
    md = markdown(results)
    (RESULTS / f"{stamp}.md").write_text(md)
    print(table(results))
    print()
    print(md)
    log(f"wrote {json_path.relative_to(ROOT)} and {stamp}.md")
    return results


# --------------------------------------------------------------------------------------------
# reporting


def describe_run(r: dict[str, Any]) -> str:
    cpu = r.get("cpu_pct_of_one_core", {})
    cpu_s = " ".join(f"{k}={v:.0f}%" for k, v in cpu.items())
    steal = " ".join(f"{k}:steal={v['steal_pct']}%" for k, v in r.get("cores", {}).items())
    if r["scenario"] == "stream_ttft_c1":
        return (f"{r['scenario']:<15} {r['target']:<8} r{r['round']} ttft p50={r['ttft_ms'].get('p50', 0):.3f}ms "
                f"n={r['requests']} err={r['errors']} | cpu {cpu_s} | {steal}")
    return (f"{r['scenario']:<15} {r['target']:<8} r{r['round']} {r['rps']:,.0f}/s "
            f"p50={r['latency_ms'].get('p50', 0):.3f}ms p99={r['latency_ms'].get('p99', 0):.2f}ms "
            f"err={r['errors']} | cpu {cpu_s} | {steal}")


def _cpu_getter(key: str) -> Callable[[dict[str, Any]], float | None]:
    def get(r: dict[str, Any]) -> float | None:
        value: float | None = r["cpu_pct_of_one_core"].get(key)
        return value
    return get


def _runs(results: dict[str, Any], scen: str, target: str) -> list[dict[str, Any]]:
    return [r for r in results["runs"] if r["scenario"] == scen and r["target"] == target]


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    names = ["hearth", "direct", "litellm"]

    def med(scen: str, target: str, getter: Callable[[dict[str, Any]], float | None]) -> float | None:
        return median([getter(r) for r in _runs(results, scen, target)])

    s: dict[str, Any] = {}
    for t in names:
        server = t if t != "direct" else "fake"
        s[t] = {
            "nonstream_c64_rps": med("nonstream_c64", t, lambda r: r["rps"]),
            "nonstream_c64_p50_ms": med("nonstream_c64", t, lambda r: r["latency_ms"].get("p50")),
            "nonstream_c64_p99_ms": med("nonstream_c64", t, lambda r: r["latency_ms"].get("p99")),
            "nonstream_c1_p50_ms": med("nonstream_c1", t, lambda r: r["latency_ms"].get("p50")),
            "nonstream_c1_p99_ms": med("nonstream_c1", t, lambda r: r["latency_ms"].get("p99")),
            "nonstream_c1_max_ms": med("nonstream_c1", t, lambda r: r["latency_ms"].get("max")),
            "ttft_c1_p50_ms": med("stream_ttft_c1", t, lambda r: r["ttft_ms"].get("p50")),
            "ttft_c1_p99_ms": med("stream_ttft_c1", t, lambda r: r["ttft_ms"].get("p99")),
            "ttft_c1_max_ms": med("stream_ttft_c1", t, lambda r: r["ttft_ms"].get("max")),
            "stream_c64_per_s": med("stream_c64", t, lambda r: r["rps"]),
            "stream_c64_p50_ms": med("stream_c64", t, lambda r: r["latency_ms"].get("p50")),
            "errors": sum(r["errors"] for r in results["runs"] if r["target"] == t),
            "sut_cpu_pct_nonstream_c64": med("nonstream_c64", t,
                                             _cpu_getter(server)),
            "gen_cpu_pct_nonstream_c64": med("nonstream_c64", t, lambda r: r["cpu_pct_of_one_core"].get("generator")),
        }
    h, d, lite = s["hearth"], s["direct"], s["litellm"]

    def sub(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a - b

    derived: dict[str, Any] = {
        "ratio_vs_litellm": (h["nonstream_c64_rps"] / lite["nonstream_c64_rps"])
        if h["nonstream_c64_rps"] and lite["nonstream_c64_rps"] else None,
        "added_p50_ms": sub(h["nonstream_c1_p50_ms"], d["nonstream_c1_p50_ms"]),
        "litellm_added_p50_ms": sub(lite["nonstream_c1_p50_ms"], d["nonstream_c1_p50_ms"]),
        "ttft_overhead_p50_ms": sub(h["ttft_c1_p50_ms"], d["ttft_c1_p50_ms"]),
        "litellm_ttft_overhead_p50_ms": sub(lite["ttft_c1_p50_ms"], d["ttft_c1_p50_ms"]),
        # per-round paired differences, to show the spread
        "added_p50_ms_by_round": _paired(results, "nonstream_c1", lambda r: r["latency_ms"].get("p50")),
        "ttft_overhead_p50_ms_by_round": _paired(results, "stream_ttft_c1", lambda r: r["ttft_ms"].get("p50")),
        "nonstream_c64_rps_by_round": [r["rps"] for r in _runs(results, "nonstream_c64", "hearth")],
        "stream_c64_per_s_by_round": [r["rps"] for r in _runs(results, "stream_c64", "hearth")],
    }
    rss = results.get("rss_kb", {})
    idle_mb = rss.get("idle_after_warmup", {}).get("VmRSS", 0) / 1024 or None
    ready = results.get("ready_s", {})
    ready_all = ready.get("fresh_db", []) + ready.get("restart", [])
    s["derived"] = derived
    s["hearth_idle_rss_mb"] = idle_mb
    s["hearth_rss_after_load_mb"] = rss.get("after_load", {}).get("VmRSS", 0) / 1024 or None
    s["hearth_peak_rss_mb"] = rss.get("after_load", {}).get("VmHWM", 0) / 1024 or None
    s["hearth_ready_s_worst"] = max(ready_all) if ready_all else None

    def check(value: float | None, ok: Callable[[float], bool]) -> str:
        if value is None:
            return "not measured"
        return "met" if ok(value) else "MISSED"

    s["targets"] = {
        "nonstream_c64_rps": {"value": h["nonstream_c64_rps"], "target": TARGETS_SPEC["nonstream_c64_rps"],
                              "status": check(h["nonstream_c64_rps"], lambda v: v >= 2500)},
        "ratio_vs_litellm": {"value": derived["ratio_vs_litellm"], "target": TARGETS_SPEC["ratio_vs_litellm"],
                             "status": check(derived["ratio_vs_litellm"], lambda v: v >= 25)},
        "added_p50_ms": {"value": derived["added_p50_ms"], "target": TARGETS_SPEC["added_p50_ms"],
                         "status": check(derived["added_p50_ms"], lambda v: v <= 1.0)},
        "ttft_overhead_p50_ms": {"value": derived["ttft_overhead_p50_ms"],
                                 "target": TARGETS_SPEC["ttft_overhead_p50_ms"],
                                 "status": check(derived["ttft_overhead_p50_ms"], lambda v: v <= 1.5)},
        "streams_c64_per_s": {"value": h["stream_c64_per_s"], "target": TARGETS_SPEC["streams_c64_per_s"],
                              "status": check(h["stream_c64_per_s"], lambda v: v >= 1000)},
        "idle_rss_mb": {"value": idle_mb, "target": TARGETS_SPEC["idle_rss_mb"],
                        "status": check(idle_mb, lambda v: v <= 100)},
        "ready_s": {"value": s["hearth_ready_s_worst"], "target": TARGETS_SPEC["ready_s"],
                    "status": check(s["hearth_ready_s_worst"], lambda v: v <= 2.0)},
    }
    return s


def _paired(results: dict[str, Any], scen: str, getter: Callable[[dict[str, Any]], float | None]) -> list[float]:
    out: list[float] = []
    by_round: dict[int, dict[str, float | None]] = {}
    for r in results["runs"]:
        if r["scenario"] == scen:
            by_round.setdefault(r["round"], {})[r["target"]] = getter(r)
    for rnd in sorted(by_round):
        h, d = by_round[rnd].get("hearth"), by_round[rnd].get("direct")
        if h is not None and d is not None:
            out.append(round(h - d, 3))
    return out


def table(results: dict[str, Any]) -> str:
    s = results["summary"]
    h, d, lite = s["hearth"], s["direct"], s["litellm"]
    dv = s["derived"]
    rows = [
        ("non-stream c=64 req/s", fmt(h["nonstream_c64_rps"], 0), fmt(d["nonstream_c64_rps"], 0),
         fmt(lite["nonstream_c64_rps"], 0)),
        ("non-stream c=64 p50 / p99 ms", f"{fmt(h['nonstream_c64_p50_ms'], 2)} / {fmt(h['nonstream_c64_p99_ms'], 2)}",
         f"{fmt(d['nonstream_c64_p50_ms'], 2)} / {fmt(d['nonstream_c64_p99_ms'], 2)}",
         f"{fmt(lite['nonstream_c64_p50_ms'], 2)} / {fmt(lite['nonstream_c64_p99_ms'], 2)}"),
        ("non-stream c=1 p50 ms", fmt(h["nonstream_c1_p50_ms"], 3), fmt(d["nonstream_c1_p50_ms"], 3),
         fmt(lite["nonstream_c1_p50_ms"], 3)),
        ("non-stream c=1 p99 / max ms", f"{fmt(h['nonstream_c1_p99_ms'], 2)} / {fmt(h['nonstream_c1_max_ms'], 1)}",
         f"{fmt(d['nonstream_c1_p99_ms'], 2)} / {fmt(d['nonstream_c1_max_ms'], 1)}",
         f"{fmt(lite['nonstream_c1_p99_ms'], 2)} / {fmt(lite['nonstream_c1_max_ms'], 1)}"),
        ("stream c=1 TTFT p50 ms", fmt(h["ttft_c1_p50_ms"], 3), fmt(d["ttft_c1_p50_ms"], 3),
         fmt(lite["ttft_c1_p50_ms"], 3)),
        ("stream c=1 TTFT p99 / max ms", f"{fmt(h['ttft_c1_p99_ms'], 2)} / {fmt(h['ttft_c1_max_ms'], 1)}",
         f"{fmt(d['ttft_c1_p99_ms'], 2)} / {fmt(d['ttft_c1_max_ms'], 1)}",
         f"{fmt(lite['ttft_c1_p99_ms'], 2)} / {fmt(lite['ttft_c1_max_ms'], 1)}"),
        ("stream c=64 streams/s", fmt(h["stream_c64_per_s"], 0), fmt(d["stream_c64_per_s"], 0),
         fmt(lite["stream_c64_per_s"], 0)),
        ("errors (all runs)", str(h["errors"]), str(d["errors"]), str(lite["errors"]) if lite["errors"] else "0"),
    ]
    widths = [max(len(r[i]) for r in [*rows, ("scenario", "Hearth", "direct", "LiteLLM")]) for i in range(4)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(("scenario", "Hearth", "direct", "LiteLLM")))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)) for r in rows]
    lines.append("")
    lines.append(f"Hearth/LiteLLM req/s ratio: {fmt(dv['ratio_vs_litellm'], 1, 'x')}; added p50 (Hearth - direct): "
                 f"{fmt(dv['added_p50_ms'], 3, ' ms')}; TTFT overhead p50: {fmt(dv['ttft_overhead_p50_ms'], 3, ' ms')}")
    lines.append(f"Hearth RSS idle {fmt(s['hearth_idle_rss_mb'], 1, ' MiB')}, after load "
                 f"{fmt(s['hearth_rss_after_load_mb'], 1, ' MiB')}, peak {fmt(s['hearth_peak_rss_mb'], 1, ' MiB')}; "
                 f"ready: {results.get('ready_s')}")
    lines.append("")
    lines.append("target                     value          goal                    status")
    for name, t in s["targets"].items():
        lines.append(f"{name:<26} {fmt(t['value'], 3):<14} {t['target']:<23} {t['status']}")
    gcp = results.get("gc_probe")
    if gcp:
        lines.append("")
        lines.append("GC pauses in Hearth during its runs (gen2 count / total ms / max ms; share of wall time):")
        for key, v in gcp.items():
            if isinstance(v, dict):
                g2 = v["gen2"]
                lines.append(f"  {key:<22} gen2 {g2['count']} / {g2['total_ms']} / {g2['max_ms']}; "
                             f"all gens {v['gc_share_pct']}%")
    prof = results.get("profile")
    if prof:
        for kind, p in prof.items():
            if "self_top" not in p:
                lines.append(f"profile {kind}: {p.get('skipped')}")
                continue
            lines.append("")
            lines.append(f"py-spy {kind}: {p['main_thread_samples']} event-loop samples, "
                         f"{p['rps_while_sampling']:,.0f}/s while sampling; raw stacks in {p['file']}; "
                         "shares are % of event-loop-thread samples")
            lines.append("  self time by package: " + ", ".join(f"{k} {v}%" for k, v in p["self_by_package"][:12]))
            lines.append("  busy worker threads (same scale): "
                         + (", ".join(f"{k} {v}%" for k, v in p["worker_self_top"][:5]) or "none"))
            lines.append("  top self:")
            lines += [f"    {v:5.1f}%  {k}" for k, v in p["self_top"][:15]]
            lines.append("  top inclusive (all code; the start-up trunk above 95% left out):")
            lines += [f"    {v:5.1f}%  {k}" for k, v in p["inclusive_top"] if v <= 95][:15]
            lines.append("  top inclusive (Hearth code):")
            lines += [f"    {v:5.1f}%  {k}" for k, v in p["hearth_inclusive_top"] if v <= 95][:15]
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    s = results["summary"]
    h, d, lite = s["hearth"], s["direct"], s["litellm"]
    dv = s["derived"]
    m = results["machine"]
    c = results["config"]
    lmeasured = results.get("litellm", {}).get("measured")
    lv = results["litellm"].get("version") if lmeasured else None

    def lcol(v: float | None, digits: int) -> str:
        return fmt(v, digits) if lmeasured else "not measured"

    out = [
        f"Run {results['stamp']} — {m['date_utc']}, {m['nproc']} CPUs ({m['cpu_model']}), kernel {m['kernel']}, "
        f"Python {m['python']}, Hearth {results.get('hearth_version')} "
        f"(src sha256 {results['hearth_source']['sha256']}, newest file "
        f"{results['hearth_source']['newest_mtime_utc']} UTC), "
        f"LiteLLM {lv or 'not measured'}; generator {c['generator']} ({c.get('wrk', '')}); "
        f"{c['duration_s']} s per run after {c['warmup_s']} s warm-up, median of {c['rounds']} interleaved rounds; "
        f"state backend {c['state_backend']}; system under test on CPU {c['sut_cpus']}, fake upstream on CPU "
        f"{c['upstream_cpus']}.",
        "",
        "| scenario | Hearth | direct to fake | LiteLLM |",
        "|---|---:|---:|---:|",
        f"| non-stream c=64, req/s | {fmt(h['nonstream_c64_rps'], 0)} | {fmt(d['nonstream_c64_rps'], 0)} | "
        f"{lcol(lite['nonstream_c64_rps'], 0)} |",
        f"| non-stream c=64, p50 / p99 ms (wrk, CO-corrected) | "
        f"{fmt(h['nonstream_c64_p50_ms'], 2)} / {fmt(h['nonstream_c64_p99_ms'], 2)} "
        f"| {fmt(d['nonstream_c64_p50_ms'], 2)} / {fmt(d['nonstream_c64_p99_ms'], 2)} | "
        f"{lcol(lite['nonstream_c64_p50_ms'], 2)} / {lcol(lite['nonstream_c64_p99_ms'], 2)} |",
        f"| non-stream c=1, p50 ms | {fmt(h['nonstream_c1_p50_ms'], 3)} | {fmt(d['nonstream_c1_p50_ms'], 3)} | "
        f"{lcol(lite['nonstream_c1_p50_ms'], 3)} |",
        f"| non-stream c=1, p99 / max ms | {fmt(h['nonstream_c1_p99_ms'], 2)} / {fmt(h['nonstream_c1_max_ms'], 1)} | "
        f"{fmt(d['nonstream_c1_p99_ms'], 2)} / {fmt(d['nonstream_c1_max_ms'], 1)} | "
        f"{lcol(lite['nonstream_c1_p99_ms'], 2)} / {lcol(lite['nonstream_c1_max_ms'], 1)} |",
        f"| stream c=1, TTFT p50 ms | {fmt(h['ttft_c1_p50_ms'], 3)} | {fmt(d['ttft_c1_p50_ms'], 3)} | "
        f"{lcol(lite['ttft_c1_p50_ms'], 3)} |",
        f"| stream c=1, TTFT p99 / max ms | {fmt(h['ttft_c1_p99_ms'], 2)} / {fmt(h['ttft_c1_max_ms'], 1)} | "
        f"{fmt(d['ttft_c1_p99_ms'], 2)} / {fmt(d['ttft_c1_max_ms'], 1)} | "
        f"{lcol(lite['ttft_c1_p99_ms'], 2)} / {lcol(lite['ttft_c1_max_ms'], 1)} |",
        f"| stream c=64 (20 chunks), streams/s | {fmt(h['stream_c64_per_s'], 0)} | {fmt(d['stream_c64_per_s'], 0)} | "
        f"{lcol(lite['stream_c64_per_s'], 0)} |",
        f"| failed requests, all runs | {h['errors']} | {d['errors']} | "
        f"{lite['errors'] if lmeasured else 'not measured'} |",
        f"| server CPU during non-stream c=64 (% of its core) | {fmt(h['sut_cpu_pct_nonstream_c64'], 0)} | "
        f"{fmt(d['sut_cpu_pct_nonstream_c64'], 0)} | {lcol(lite['sut_cpu_pct_nonstream_c64'], 0)} |",
        f"| generator CPU during non-stream c=64 (% of a core) | {fmt(h['gen_cpu_pct_nonstream_c64'], 0)} | "
        f"{fmt(d['gen_cpu_pct_nonstream_c64'], 0)} | {lcol(lite['gen_cpu_pct_nonstream_c64'], 0)} |",
        "",
        "| target (issue 2) | goal | measured | status |",
        "|---|---|---:|---|",
    ]
    labels = {
        "nonstream_c64_rps": "non-stream c=64 through Hearth",
        "ratio_vs_litellm": "Hearth / LiteLLM req/s (c=64)",
        "added_p50_ms": "added p50 latency, c=1 (Hearth − direct)",
        "ttft_overhead_p50_ms": "TTFT overhead p50, c=1 (Hearth − direct)",
        "streams_c64_per_s": "streams/s at c=64 (20 chunks)",
        "idle_rss_mb": "Hearth idle RSS after warm-up",
        "ready_s": "start → /readyz 200 (worst of the starts)",
    }
    units = {"nonstream_c64_rps": " req/s", "ratio_vs_litellm": "×", "added_p50_ms": " ms",
             "ttft_overhead_p50_ms": " ms", "streams_c64_per_s": "/s", "idle_rss_mb": " MiB", "ready_s": " s"}
    digits = {"nonstream_c64_rps": 0, "ratio_vs_litellm": 1, "added_p50_ms": 3, "ttft_overhead_p50_ms": 3,
              "streams_c64_per_s": 0, "idle_rss_mb": 1, "ready_s": 2}
    for name, t in s["targets"].items():
        out.append(f"| {labels[name]} | {t['target']} | {fmt(t['value'], digits[name], units[name])} | "
                   f"**{t['status']}** |")
    out.append("")
    out.append(f"Per-round values: Hearth c=64 req/s {[round(v) for v in dv['nonstream_c64_rps_by_round']]}; "
               f"added p50 ms {dv['added_p50_ms_by_round']}; TTFT overhead ms {dv['ttft_overhead_p50_ms_by_round']}; "
               f"streams/s {[round(v) for v in dv['stream_c64_per_s_by_round']]}.")
    if lmeasured:
        out.append(f"LiteLLM for comparison: added p50 {fmt(dv['litellm_added_p50_ms'], 2)} ms, TTFT overhead "
                   f"{fmt(dv['litellm_ttft_overhead_p50_ms'], 2)} ms, ready in {results['litellm'].get('ready_s')} s, "
                   f"idle RSS {fmt((results['litellm'].get('idle_rss_kb') or 0) / 1024, 1)} MiB.")
    else:
        out.append(f"LiteLLM was not measured: {results['litellm'].get('reason')}.")
    ready = results.get("ready_s", {})
    logs = results.get("request_logs", {})
    out.append(f"Hearth ready (s): fresh database {ready.get('fresh_db')}, restarts {ready.get('restart')}. "
               f"RSS MiB (VmRSS kB / 1024): idle {fmt(s['hearth_idle_rss_mb'], 1)} "
               f"(= {fmt((s['hearth_idle_rss_mb'] or 0) * 1.048576, 1)} MB decimal), "
               f"after load {fmt(s['hearth_rss_after_load_mb'], 1)}, "
               f"peak {fmt(s['hearth_peak_rss_mb'], 1)}. Request-log rows written: "
               f"{logs.get('rows')} (requests the generators completed through Hearth, warm-ups and profiling "
               f"included: {logs.get('completed_by_generators')}; rows also include requests cut at the end of "
               f"a run).")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Hearth vs direct vs LiteLLM benchmark (loopback only).")
    ap.add_argument("--quick", action="store_true", help="3 s runs, 1 s warm-up, 1 round")
    ap.add_argument("--skip-litellm", action="store_true", help="do not install or run the LiteLLM proxy")
    ap.add_argument("--state", choices=("memory", "redis"), default="memory", help="Hearth state backend")
    ap.add_argument("--duration", type=int, default=None, help="seconds per measured run (default 10; quick 3)")
    ap.add_argument("--warmup", type=int, default=None, help="seconds of warm-up before each run (default 2)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved repetitions (default 3; quick 1)")
    ap.add_argument("--starts", type=int, default=3, help="Hearth starts timed (first on a fresh database)")
    ap.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto")
    ap.add_argument("--sut-cpus", default="0", help="CPU list for Hearth and LiteLLM (default 0)")
    ap.add_argument("--upstream-cpus", default="1", help="CPU list for the fake upstream (default 1)")
    ap.add_argument("--gen-cpus", default="1", help="CPU list for the load generator (default 1)")
    ap.add_argument("--no-profile", dest="profile", action="store_false", help="skip the py-spy profile")
    ap.add_argument("--litellm-spec", default="litellm[proxy]", help="pip requirement for the LiteLLM venv")
    ap.add_argument("--hearth-log-level", default="info", help="HEARTH_LOG_LEVEL for the Hearth process")
    ap.add_argument("--hearth-env", action="append", default=[], metavar="HEARTH_X=VALUE",
                    help="extra setting for the Hearth process (repeatable), e.g. HEARTH_REQUEST_LOG_BATCH=50")
    ap.add_argument("--gc-probe", action="store_true",
                    help="time Hearth's garbage collections (bench/gcprobe on PYTHONPATH; changes no GC setting)")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs, database)")
    args = ap.parse_args(argv)
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.duration < 1 or args.duration > 120 or args.rounds < 1 or args.rounds > 10:
        ap.error("--duration must be 1..120 s and --rounds 1..10 (runs stay bounded)")
    if args.starts < 1 or args.starts > 10:
        ap.error("--starts must be 1..10")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except KeyboardInterrupt:
        log("interrupted; every process started by this run has been stopped")
        return 130
    except RuntimeError as exc:
        log(f"failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
