"""Hearth with governance on (signatures, rate limits, scene, budgets) vs off, memory vs Redis state.

One run starts, on this machine and on loopback only, the same process layout as ``gateway_bench.py``
(whose helpers it imports): the fake upstream (``hearth fake-upstream``, pinned to the upstream core),
a private ``redis-server`` on a free port (pinned to the upstream core as well), and four Hearth
processes (``hearth serve``, one uvicorn worker each, SQLite in a temp dir, request logging on), all
pinned to the system-under-test core and loaded one at a time:

=================  ==================================================================  =====
configuration      caller and request                                                  state
=================  ==================================================================  =====
``plain-memory``   like gateway_bench: caller key only, no limits, no budgets           memory
``gov-memory``     governance on (see below)                                            memory
``gov-redis``      governance on                                                        redis
``plain-redis``    like gateway_bench                                                   redis
=================  ==================================================================  =====

"Governance on": the caller has ``require_signature: true`` and its own ``signing_key``; limits on
caller, tenant, user and client IP (rpm 10,000,000, tpm 10,000,000,000, concurrency 10,000; user
stream_concurrency 1,000 — high enough never to refuse); every request names a scene in
``X-Hearth-Scene`` (``max_tokens_cap`` 256, so the cap becomes the reservation and the upstream's
``max_tokens``), one of four users in ``X-Hearth-User`` and one of two tenants in ``X-Hearth-Tenant``;
two budgets with huge limits are reserved and settled on every call (money per caller and day, priced
from the price table; tokens per user and month). Every request is signed (``X-Timestamp``,
``X-Nonce``, ``X-Signature``) with a nonce used once: the signed requests are generated before each
run (never during it) and ``wrk`` cycles through them with a Lua ``request()``; the c=1 client reads
them from a file. More nonces are generated than a run can send, and every run checks it sent no
request twice and got no non-2xx answer (the request logs give the status codes per configuration).

Scenarios per configuration, interleaved over ``--rounds``: (a) non-stream requests/s at concurrency
64 (``wrk -t1 -c64``), (b) non-stream p50 latency at concurrency 1 (a sequential ``http.client``
loop: ``loadgen.py latency`` for the plain configurations, the same per-request function here for the
signed ones). Optionally a ``py-spy`` profile of Hearth in the governance configurations at c=64.

Results: a table on stdout, ``bench/results/gov-<timestamp>.json`` and ``gov-<timestamp>.md``.

Usage: ``python bench/governance_bench.py [--quick] [--no-profile] [--gateway-figure REQ_PER_S]``
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import gateway_bench as gb
import loadgen
import yaml

from hearth.auth.signing import signed_headers
from hearth.registry.config import RegistrySpec

HOST = gb.HOST
PATH = "/v1/chat/completions"
GOV_CALLER = "bench-gov"
GOV_KEY = "bench-gov-key-0123456789"
SCENE = "bench-scene"
MAX_TOKENS_CAP = 256
USERS = ("user-a", "user-b", "user-c", "user-d")
TENANTS = ("tenant-1", "tenant-2")
HUGE_RPM = 10_000_000
HUGE_TPM = 10_000_000_000
HUGE_CONCURRENCY = 10_000
USER_STREAM_CONCURRENCY = 1000
MONEY_BUDGET_USD = 1_000_000_000.0
TOKEN_BUDGET = 1_000_000_000_000
CONFIGS = ("plain-memory", "gov-memory", "gov-redis", "plain-redis")
GATEWAY_RESULT = re.compile(r"^\d{8}-\d{6}\.json$")

TARGETS_SPEC = {
    "redis_added_p50_ms": "<= 1.0 ms (gov-redis p50 - gov-memory p50, c=1)",
    "throughput_pct": ">= 70 % of the gateway figure (non-stream c=64)",
}


def log(msg: str) -> None:
    print(f"[gov-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# configuration


def governance_registry(upstream_port: int, signing_key: str) -> str:
    """gateway_bench's registry plus the governed caller, its scene and its budgets."""
    spec = yaml.safe_load(gb.hearth_yaml(upstream_port))
    limits = {"rpm": HUGE_RPM, "tpm": HUGE_TPM, "concurrency": HUGE_CONCURRENCY}
    spec["callers"].append({
        "name": GOV_CALLER,
        "key": GOV_KEY,
        "signing_key": signing_key,
        "require_signature": True,
        "allowed_scenes": [SCENE],
        "limits": {"caller": dict(limits), "tenant": dict(limits),
                   "user": {**limits, "stream_concurrency": USER_STREAM_CONCURRENCY}, "ip": dict(limits)},
    })
    spec["scenes"] = [{"name": SCENE, "default_model": gb.PUBLIC_MODEL, "allowed_models": [gb.PUBLIC_MODEL],
                       "max_tokens_cap": MAX_TOKENS_CAP}]
    spec["budgets"] = [
        {"name": "bench-money-daily", "caller": GOV_CALLER, "scope": "caller", "period": "day", "unit": "money",
         "limit": MONEY_BUDGET_USD},
        {"name": "bench-tokens-monthly", "caller": GOV_CALLER, "scope": "user", "subject": "*", "period": "month",
         "unit": "tokens", "limit": TOKEN_BUDGET},
    ]
    RegistrySpec.model_validate(spec)  # refuse a bad file here rather than in four Hearth logs
    return yaml.safe_dump(spec, sort_keys=False)


@dataclass
class Config:
    name: str
    governed: bool
    state: str
    port: int
    proc: gb.Proc
    db: Path
    ready_s: float
    redis_prefix: str | None = None
    requests_sent: int = 0  # by the generators (warm-ups included; wrk's cut-off requests not)

    @property
    def target(self) -> gb.Target:
        key = GOV_KEY if self.governed else gb.CALLER_KEY
        return gb.Target(self.name, self.port, gb.PUBLIC_MODEL, key, self.proc)


# --------------------------------------------------------------------------------------------
# signed requests, generated before each run


def body_bytes() -> bytes:
    # exactly what gateway_bench's wrk script sends for the plain configurations
    target = gb.Target("x", 0, gb.PUBLIC_MODEL, "", None)
    return json.dumps(target.body(False)).encode()


def write_signed(path: Path, signing_key: str, count: int) -> None:
    """``count`` lines ``timestamp nonce signature user tenant``; every nonce is new."""
    body = body_bytes()
    tag = secrets.token_hex(6)
    ts = int(time.time())
    lines = []
    for i in range(count):
        nonce = f"{tag}-{i:08d}"
        h = signed_headers(signing_key, "POST", PATH, body, timestamp=ts, nonce=nonce)
        lines.append(f"{h['X-Timestamp']} {h['X-Nonce']} {h['X-Signature']} {USERS[i % len(USERS)]} "
                     f"{TENANTS[i % len(TENANTS)]}\n")
    path.write_text("".join(lines))


WRK_SIGNED = """
-- Signed requests: pre-formatted in init() from a file, one per request(), each sent once.
local reqs = {}
local n = 0
local i = 0
issued = 0
wraps = 0
loaded = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local body = [[__BODY__]]
  for line in io.lines("__DATA__") do
    local ts, nonce, sig, user, tenant = line:match("^(%S+) (%S+) (%S+) (%S+) (%S+)$")
    n = n + 1
    reqs[n] = wrk.format("POST", "__PATH__", {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer __KEY__",
      ["X-Hearth-Scene"] = "__SCENE__",
      ["X-Hearth-User"] = user,
      ["X-Hearth-Tenant"] = tenant,
      ["X-Timestamp"] = ts,
      ["X-Nonce"] = nonce,
      ["X-Signature"] = sig,
    }, body)
  end
  loaded = n
end

function request()
  -- wrk calls this once before the run to check the script: that request is never sent
  i = i + 1
  issued = issued + 1
  if i > n then
    i = 1
    wraps = wraps + 1
  end
  return reqs[i]
end
"""

WRK_SIGNED_DONE = """
local bench_done = done
function done(summary, latency, requests)
  local issued_all, wraps_all, loaded_all = 0, 0, 0
  for _, t in ipairs(threads) do
    issued_all = issued_all + (t:get("issued") or 0)
    wraps_all = wraps_all + (t:get("wraps") or 0)
    loaded_all = loaded_all + (t:get("loaded") or 0)
  end
  local f = io.open("__STATS__", "w")
  f:write(string.format('{"issued":%d,"wraps":%d,"loaded":%d}', issued_all, wraps_all, loaded_all))
  f:close()
  bench_done(summary, latency, requests)
end
"""


@dataclass
class GovEnv(gb.Env):
    """gateway_bench's Env; ``wrk_script`` hands out a prepared signed script when there is one."""

    signing_key: str = ""
    redis_url: str | None = None
    prepared: dict[str, Path] = field(default_factory=dict)
    seq: int = 0

    def prepare_signed(self, target: gb.Target, count: int) -> Path:
        """Sign ``count`` fresh requests now and make the next wrk run for ``target`` use them."""
        self.seq += 1
        data = self.tmp / f"signed-{target.name}-{self.seq}.txt"
        stats = self.tmp / f"signed-{target.name}-{self.seq}.stats.json"
        script = self.tmp / f"wrk-signed-{target.name}-{self.seq}.lua"
        write_signed(data, self.signing_key, count)
        body = body_bytes().decode()
        assert "]]" not in body
        text = (WRK_SIGNED.replace("__BODY__", body).replace("__DATA__", str(data)).replace("__PATH__", PATH)
                .replace("__KEY__", target.key).replace("__SCENE__", SCENE)
                + gb.WRK_DONE + WRK_SIGNED_DONE.replace("__STATS__", str(stats)))
        script.write_text(text)
        self.prepared[target.name] = script
        return stats

    def wrk_script(self, target: gb.Target, stream: bool) -> Path:
        prepared = self.prepared.pop(target.name, None)
        if prepared is None:
            return super().wrk_script(target, stream)
        return prepared

    def drop_signed(self) -> None:
        """Delete used signed-request files (tens of MB each) once no run is prepared on them."""
        if self.prepared:
            return
        for path in [*self.tmp.glob("signed-*"), *self.tmp.glob("wrk-signed-*")]:
            with contextlib.suppress(OSError):
                path.unlink()


# --------------------------------------------------------------------------------------------
# runs


def signed_wrk(env: GovEnv, cfg: Config, duration: int, measure: bool) -> dict[str, Any]:
    target = cfg.target
    count = int(env.args.max_rate * duration) + 1000
    stats_path = env.prepare_signed(target, count)

    def go() -> dict[str, Any]:
        return gb.run_wrk(env, target, stream=False, concurrency=64, duration=duration, gen_cpus=env.gen_cpus)

    if measure:
        before = redis_commandstats(env.redis_url if cfg.state == "redis" else None)
        res = gb._measure(env, target, go)
        if before:
            res["redis_commands"] = redis_per_request(before, redis_commandstats(env.redis_url), res["requests"])
    else:
        res = go()
    stats = json.loads(stats_path.read_text())
    res["signed"] = {**stats, "generated": count}
    if stats["wraps"] or stats["issued"] > count:
        res["signed"]["nonces_reused"] = True
        log(f"WARNING: {cfg.name} sent more requests than signed ones were generated; raise --max-rate")
    env.drop_signed()
    cfg.requests_sent += res["requests"]
    return res


def redis_commandstats(url: str | None) -> dict[str, tuple[int, int]]:
    """``INFO commandstats`` of the private redis-server: {command: (calls, usec)}; INFO itself left out."""
    if url is None:
        return {}
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    with socket.create_connection((HOST, port), timeout=2) as sock:
        sock.sendall(b"INFO commandstats\r\n")
        data = b""
        while b"\r\n" not in data:
            data += sock.recv(65536)
        head, _, rest = data.partition(b"\r\n")
        size = int(head[1:])
        while len(rest) < size:
            rest += sock.recv(65536)
    out: dict[str, tuple[int, int]] = {}
    for line in rest[:size].decode().splitlines():
        m = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line)
        if m and m.group(1) != "info":
            out[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return out


def redis_per_request(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                      requests: int) -> dict[str, dict[str, float]]:
    """Commands per completed request and Redis server time per call, by command, during one run."""
    out: dict[str, dict[str, float]] = {}
    for cmd, (calls, usec) in after.items():
        c0, u0 = before.get(cmd, (0, 0))
        if calls > c0 and requests:
            out[cmd] = {"per_request": round((calls - c0) / requests, 2),
                        "server_usec_per_call": round((usec - u0) / (calls - c0), 2)}
    return out


def throughput(env: GovEnv, cfg: Config) -> dict[str, Any]:
    a = env.args
    if cfg.governed:
        if a.warmup > 0:
            signed_wrk(env, cfg, a.warmup, measure=False)
        res = signed_wrk(env, cfg, a.duration, measure=True)
    else:
        # what gateway_bench's throughput_run does for Hearth, with the requests counted per configuration
        def go(duration: int) -> dict[str, Any]:
            r = gb.run_wrk(env, cfg.target, stream=False, concurrency=64, duration=duration, gen_cpus=env.gen_cpus)
            cfg.requests_sent += r["requests"]
            return r

        if a.warmup > 0:
            go(a.warmup)
        before = redis_commandstats(env.redis_url if cfg.state == "redis" else None)
        res = gb._measure(env, cfg.target, lambda: go(a.duration))
        if before:
            res["redis_commands"] = redis_per_request(before, redis_commandstats(env.redis_url), res["requests"])
    res["gen_cpus"] = env.gen_cpus
    return res


def latency(env: GovEnv, cfg: Config) -> dict[str, Any]:
    a = env.args
    if not cfg.governed:
        res = gb.latency_run(env, cfg.target)
        cfg.requests_sent += res["requests"] + res["errors"] + res.get("warmup_requests", 0)
        return res
    count = int(a.max_rate_c1 * (a.duration + a.warmup)) + 500
    data = env.tmp / f"signed-c1-{cfg.name}.txt"
    write_signed(data, env.signing_key, count)
    body = env.tmp / "body-signed.json"
    body.write_bytes(body_bytes())
    argv = ["taskset", "-c", env.gen_cpus, sys.executable, str(Path(__file__).resolve()), "latency-client",
            "--url", f"http://{HOST}:{cfg.port}{PATH}", "--body-file", str(body), "--signed-file", str(data),
            "--key", GOV_KEY, "--duration", str(a.duration), "--warmup", str(a.warmup)]

    def go() -> dict[str, Any]:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=a.duration + a.warmup + 120,
                             check=False)
        if out.returncode != 0:
            raise RuntimeError(f"latency client failed: {out.stderr[-2000:]}")
        raw: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        raw["generator"] = "python"
        raw["rps"] = raw["requests"] / raw["duration_s"] if raw["duration_s"] else 0.0
        return raw

    res = gb._measure(env, cfg.target, go)
    env.drop_signed()
    res["gen_cpus"] = env.gen_cpus
    res["signed"] = {"generated": count, "used": res["sent"]}
    if res.get("exhausted"):
        log(f"WARNING: the c=1 client for {cfg.name} ran out of signed requests; raise --max-rate-c1")
    cfg.requests_sent += res["sent"]
    return res


def latency_client(argv: list[str]) -> int:
    """Subprocess: loadgen's sequential non-stream loop, each request with its own signed headers."""
    ap = argparse.ArgumentParser(prog="governance_bench.py latency-client")
    ap.add_argument("--url", required=True)
    ap.add_argument("--body-file", required=True)
    ap.add_argument("--signed-file", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--warmup", type=float, required=True)
    args = ap.parse_args(argv)
    host, port, path = loadgen._check_loopback(args.url)
    body = Path(args.body_file).read_bytes()
    base = {"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {args.key}",
            "X-Hearth-Scene": SCENE}
    signed: list[dict[str, str]] = []
    for line in Path(args.signed_file).read_text().splitlines():
        ts, nonce, sig, user, tenant = line.split(" ")
        signed.append({**base, "X-Hearth-User": user, "X-Hearth-Tenant": tenant, "X-Timestamp": ts,
                       "X-Nonce": nonce, "X-Signature": sig})
    conn = http.client.HTTPConnection(host, port, timeout=30)
    statuses: dict[str, int] = {}
    totals: list[float] = []
    errors = sent = 0
    warm_end = time.monotonic() + args.warmup
    while time.monotonic() < warm_end and sent < len(signed):
        _, _, status = loadgen._one_plain(conn, path, body, signed[sent])
        sent += 1
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    warmup_requests = sent
    started = time.monotonic()
    end = started + args.duration
    while time.monotonic() < end and sent < len(signed):
        headers = signed[sent]
        sent += 1
        try:
            total, _, status = loadgen._one_plain(conn, path, body, headers)
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            continue
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status != 200:
            errors += 1
            continue
        totals.append(total)
    elapsed = time.monotonic() - started
    conn.close()
    out = {"mode": "latency-signed", "requests": len(totals), "errors": errors, "duration_s": elapsed,
           "warmup_requests": warmup_requests, "sent": sent, "status_counts": statuses,
           "exhausted": sent >= len(signed), "latency_ms": loadgen.percentiles(totals)}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


# --------------------------------------------------------------------------------------------
# checks


def post_raw(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request("POST", PATH, body=body, headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def error_code(raw: bytes) -> str | None:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return str(json.loads(raw)["error"]["code"])
    return None


def governance_checks(cfg: Config, signing_key: str, reference_text: str) -> dict[str, Any]:
    """A signed call succeeds with the fake's text and budget headers; replay and unsigned are refused."""
    body = body_bytes()
    base = {"Authorization": f"Bearer {GOV_KEY}", "X-Hearth-Scene": SCENE, "X-Hearth-User": USERS[0],
            "X-Hearth-Tenant": TENANTS[0]}
    signed = signed_headers(signing_key, "POST", PATH, body)
    status, headers, raw = post_raw(cfg.port, body, {**base, **signed})
    if status != 200:
        raise RuntimeError(f"{cfg.name}: signed request answered {status}: {raw[:500]!r}")
    text = json.loads(raw)["choices"][0]["message"]["content"]
    if text != reference_text:
        raise RuntimeError(f"{cfg.name}: reply differs from the fake's: {text!r} vs {reference_text!r}")
    if "x-hearth-budget" not in headers:
        raise RuntimeError(f"{cfg.name}: no x-hearth-budget header, so no budget was reserved: {headers}")
    replay_status, _, replay_raw = post_raw(cfg.port, body, {**base, **signed})
    unsigned_status, _, unsigned_raw = post_raw(cfg.port, body, base)
    checks = {"signed": status, "budget_header": headers.get("x-hearth-budget"),
              "budget_remaining": headers.get("x-hearth-budget-remaining"),
              "replay": [replay_status, error_code(replay_raw)],
              "unsigned": [unsigned_status, error_code(unsigned_raw)]}
    if checks["replay"] != [401, "nonce_replayed"] or checks["unsigned"] != [401, "signature_required"]:
        raise RuntimeError(f"{cfg.name}: signatures are not enforced as expected: {checks}")
    return checks


def db_counts(db: Path) -> dict[str, Any]:
    """After a graceful stop: request-log rows by status / error code, and budget-ledger rows by kind."""
    out: dict[str, Any] = {}
    try:
        with contextlib.closing(sqlite3.connect(str(db))) as conn:
            rows = conn.execute("SELECT status, coalesce(error_code, ''), count(*) FROM request_logs "
                                "GROUP BY 1, 2 ORDER BY 3 DESC").fetchall()
            out["request_logs"] = {f"{s}{' ' + c if c else ''}": n for s, c, n in rows}
            rows = conn.execute("SELECT kind, count(*) FROM budget_ledger GROUP BY 1").fetchall()
            out["budget_ledger"] = {k: n for k, n in rows}
            # a group commit stamps all its rows with one created_at: rows per commit = group-commit factor
            rows_, commits = conn.execute("SELECT count(*), count(DISTINCT created_at) FROM budget_ledger "
                                          "WHERE kind = 'reserve'").fetchone()
            if commits:
                out["reserve_rows_per_commit"] = round(rows_ / commits, 1)
    except sqlite3.Error as exc:
        out["error"] = str(exc)
    return out


def gateway_figure(override: float | None) -> dict[str, Any]:
    """The gateway issue's non-stream c=64 figure: newest full memory-state run of gateway_bench.py."""
    if override is not None:
        return {"rps": override, "source": "--gateway-figure"}
    best: dict[str, Any] | None = None
    for path in sorted(gb.RESULTS.glob("*.json")):
        if not GATEWAY_RESULT.match(path.name):
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(path.read_text())
            c = data["config"]
            rps = data["summary"]["hearth"]["nonstream_c64_rps"]
            if c.get("quick") or c.get("state_backend") != "memory" or c.get("hearth_env") or c.get("gc_probe") \
                    or not rps:
                continue
            if best is None or data["stamp"] > best["stamp"]:
                best = {"rps": rps, "stamp": data["stamp"], "source": f"bench/results/{path.name}",
                        "hearth_source_sha256": data.get("hearth_source", {}).get("sha256"),
                        "rounds": c.get("rounds"), "duration_s": c.get("duration_s")}
    return best or {"rps": None, "source": "no full gateway_bench.py run in bench/results"}


# --------------------------------------------------------------------------------------------
# profile


def profile(env: GovEnv, cfg: Config, stamp: str) -> dict[str, Any]:
    pyspy = gb.ROOT / ".venv" / "bin" / "py-spy"
    exe = str(pyspy) if pyspy.exists() else shutil.which("py-spy")
    if exe is None:
        return {"skipped": "py-spy not installed (.venv/bin/pip install py-spy)"}
    raw_path = gb.RESULTS / f"gov-{stamp}-pyspy-{cfg.name}-c64.txt"
    dur = max(3, min(env.args.duration, 10))
    stats_path = env.prepare_signed(cfg.target, int(env.args.max_rate * dur) + 1000)
    argv = ["taskset", "-c", env.gen_cpus, exe, "record", "--nonblocking", "-p", str(cfg.proc.pid), "-d", str(dur + 1),
            "-r", str(env.args.profile_rate), "-f", "raw", "-o", str(raw_path)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)
        load = gb.run_wrk(env, cfg.target, stream=False, concurrency=64, duration=dur, gen_cpus=env.gen_cpus)
        _, err = spy.communicate(timeout=dur + 60)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait(5)
    cfg.requests_sent += load["requests"]
    stats = json.loads(stats_path.read_text())
    if spy.returncode != 0 or not raw_path.exists():
        return {"skipped": f"py-spy failed: {err.decode(errors='replace')[-500:]}"}
    summary = gb.summarize_collapsed(raw_path.read_text())
    summary["file"] = str(raw_path.relative_to(gb.ROOT))
    summary["rps_while_sampling"] = load["rps"]
    summary["non_2xx_while_sampling"] = load["non_2xx"]
    summary["signed"] = stats
    return summary


# --------------------------------------------------------------------------------------------
# the run


def start_config(env: GovEnv, name: str, config_file: Path, redis_url: str | None) -> Config:
    governed = name.startswith("gov-")
    state = "redis" if name.endswith("-redis") else "memory"
    port = gb.free_port()
    db = env.tmp / f"hearth-{name}.db"
    henv = gb.hearth_env(env, port, config_file, db, redis_url if state == "redis" else None)
    henv["HEARTH_STATE_BACKEND"] = state
    proc, ready = gb.start_hearth(env, port, henv, name)
    env.all_servers[name] = proc
    log(f"{name}: Hearth pid {proc.pid} on :{port}, ready in {ready:.2f}s (state {state})")
    return Config(name, governed, state, port, proc, db, round(ready, 3), henv.get("HEARTH_REDIS_PREFIX"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    gb.RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-gov-bench-"))
    procs = gb.ProcGroup()
    generator = "wrk" if shutil.which("wrk") else None
    if generator is None:
        raise SystemExit("wrk is required for the signed c=64 runs (apt-get install -y wrk)")
    if shutil.which("taskset") is None:
        raise SystemExit("taskset (util-linux) is required")
    env = GovEnv(args=args, tmp=tmp, procs=procs, sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                 gen_cpus=args.gen_cpus, generator=generator, signing_key=secrets.token_hex(32))
    with contextlib.suppress(OSError, ValueError):
        os.sched_setaffinity(0, {int(c) for c in args.gen_cpus.split(",")})

    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    results: dict[str, Any] = {
        "stamp": stamp, "machine": gb.machine_info(), "hearth_version": gb.hearth_version(),
        "hearth_source": gb.source_fingerprint(),
        "config": {"duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds, "quick": args.quick,
                   "sut_cpus": args.sut_cpus, "upstream_cpus": args.upstream_cpus, "gen_cpus": args.gen_cpus,
                   "redis": "private redis-server on a free loopback port, pinned to the upstream CPU",
                   "wrk": (wrk_v.stdout or wrk_v.stderr).splitlines()[0] if (wrk_v.stdout or wrk_v.stderr) else "wrk",
                   "max_rate": args.max_rate, "max_rate_c1": args.max_rate_c1,
                   "hearth_log_level": args.hearth_log_level},
        "governance": {"caller": GOV_CALLER, "require_signature": True, "scene": SCENE,
                       "max_tokens_cap": MAX_TOKENS_CAP, "users": list(USERS), "tenants": list(TENANTS),
                       "limits_each_of_caller_tenant_user_ip": {"rpm": HUGE_RPM, "tpm": HUGE_TPM,
                                                                "concurrency": HUGE_CONCURRENCY},
                       "user_stream_concurrency": USER_STREAM_CONCURRENCY,
                       "budgets": [{"name": "bench-money-daily", "scope": "caller", "unit": "money",
                                    "limit_usd": MONEY_BUDGET_USD},
                                   {"name": "bench-tokens-monthly", "scope": "user (each)", "unit": "tokens",
                                    "limit": TOKEN_BUDGET}]},
        "gateway_figure": gateway_figure(args.gateway_figure),
        "runs": [],
    }

    def interrupted(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, interrupted) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    configs: dict[str, Config] = {}
    try:
        fake_port = gb.free_port()
        log(f"fake upstream on :{fake_port} (cpus {env.upstream_cpus}); temp dir {tmp}")
        env.fake = gb.start_fake(env, fake_port)
        env.all_servers["fake"] = env.fake
        rproc, redis_url = gb.start_redis(env)
        env.redis_url = redis_url
        env.all_servers["redis"] = rproc
        results["config"]["redis_url"] = redis_url
        log(f"private redis-server at {redis_url} (cpus {env.upstream_cpus})")

        config_file = tmp / "hearth.yaml"
        config_file.write_text(governance_registry(fake_port, env.signing_key))
        for name in CONFIGS:
            configs[name] = start_config(env, name, config_file, redis_url)
        results["ready_s"] = {c.name: c.ready_s for c in configs.values()}
        results["redis_prefixes"] = {c.name: c.redis_prefix for c in configs.values() if c.redis_prefix}

        # ---- sanity: same text as the fake; signatures enforced; budgets reserved
        direct = gb.Target("direct", fake_port, gb.UPSTREAM_MODEL, "not-checked-by-the-fake", None)
        reference = gb.sanity_check(direct)
        results["checks"] = {}
        for cfg in configs.values():
            if cfg.governed:
                results["checks"][cfg.name] = governance_checks(cfg, env.signing_key, reference["text"])
                cfg.requests_sent += 3
            else:
                got = gb.sanity_check(cfg.target)
                if got != reference:
                    raise RuntimeError(f"{cfg.name} does not relay the upstream's reply faithfully")
                results["checks"][cfg.name] = {"text_matches": True}
                cfg.requests_sent += 2
        log(f"sanity: {results['checks']}")

        # ---- warm-up (c=16, not measured)
        for cfg in configs.values():
            if cfg.governed:
                env.prepare_signed(cfg.target, int(args.max_rate * max(1, args.warmup)) + 1000)
            res = gb.run_wrk(env, cfg.target, stream=False, concurrency=16, duration=max(1, args.warmup),
                             gen_cpus=env.gen_cpus)
            cfg.requests_sent += res["requests"]
            env.drop_signed()
            if res["non_2xx"]:
                raise RuntimeError(f"{cfg.name}: {res['non_2xx']} non-2xx answers during the warm-up")
        time.sleep(2.0)

        scenarios: list[tuple[str, Callable[[Config], dict[str, Any]]]] = [
            ("nonstream_c64", lambda c: throughput(env, c)),
            ("nonstream_c1", lambda c: latency(env, c)),
        ]
        for scen, fn in scenarios:
            for rnd in range(args.rounds):
                for cfg in configs.values():
                    res = fn(cfg)
                    res.update({"scenario": scen, "target": cfg.name, "round": rnd})
                    res["foreign_sut_cpu_pct"] = foreign_load(res, args.sut_cpus)
                    results["runs"].append(res)
                    log(describe(res))

        if args.profile:
            results["profile"] = {}
            for name in args.profile_configs.split(","):
                if name in configs:
                    log(f"profiling {name} with py-spy during an extra c=64 run ...")
                    results["profile"][name] = profile(env, configs[name], stamp)

        # ---- graceful stops (flush the request-log and ledger writers), then count their rows
        results["db"] = {}
        for cfg in configs.values():
            code = procs.stop(cfg.proc, timeout=20)
            env.all_servers.pop(cfg.name, None)
            results["db"][cfg.name] = {**db_counts(cfg.db), "exit_code": code, "requests_sent": cfg.requests_sent}
    finally:
        procs.stop_all()
        for s, handler in old.items():
            signal.signal(s, handler)
        if args.keep_tmp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    end_source = gb.source_fingerprint()
    if end_source["sha256"] != results["hearth_source"]["sha256"]:
        results["hearth_source"]["changed_during_run_to"] = end_source
        log("note: src/hearth changed while this run was in progress")
    results["summary"] = summarize(results)
    json_path = gb.RESULTS / f"gov-{stamp}.json"
    json_path.write_text(json.dumps(results, indent=2))
    md = markdown(results)
    (gb.RESULTS / f"gov-{stamp}.md").write_text(md)
    print(md)
    log(f"wrote {json_path.relative_to(gb.ROOT)} and gov-{stamp}.md")
    return results


# --------------------------------------------------------------------------------------------
# reporting


def foreign_load(r: dict[str, Any], sut_cpus: str) -> float | None:
    """Busy share of the system-under-test core not explained by the Hearth processes: other load."""
    if not sut_cpus.isdigit():
        return None
    core = r.get("cores", {}).get(f"cpu{sut_cpus}")
    if core is None:
        return None
    ours = sum(v for k, v in r["cpu_pct_of_one_core"].items() if k in CONFIGS)
    return round(max(0.0, core["busy_pct"] - ours), 1)


def describe(r: dict[str, Any]) -> str:
    cpu = " ".join(f"{k}={v:.0f}%" for k, v in r.get("cpu_pct_of_one_core", {}).items())
    lat = r.get("latency_ms", {})
    extra = f" signed={r['signed']}" if "signed" in r else ""
    foreign = r.get("foreign_sut_cpu_pct")
    warn = f" | FOREIGN LOAD on the Hearth core: {foreign}%" if foreign is not None and foreign > 10 else ""
    return (f"{r['scenario']:<14} {r['target']:<13} r{r['round']} {r['rps']:,.0f}/s p50={lat.get('p50', 0):.3f}ms "
            f"p99={lat.get('p99', 0):.2f}ms err={r['errors']} non2xx={r.get('non_2xx', r.get('status_counts'))}"
            f"{extra} | cpu {cpu}{warn}")


def _runs(results: dict[str, Any], scen: str, target: str) -> list[dict[str, Any]]:
    return [r for r in results["runs"] if r["scenario"] == scen and r["target"] == target]


def _paired(results: dict[str, Any], scen: str, a: str, b: str, key: str) -> list[float]:
    out = []
    for ra, rb in zip(_runs(results, scen, a), _runs(results, scen, b), strict=True):
        va, vb = ra["latency_ms"].get(key), rb["latency_ms"].get(key)
        if va is not None and vb is not None:
            out.append(round(va - vb, 3))
    return out


def _redis_median(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    cmds = sorted({c for r in runs for c in r.get("redis_commands", {})})
    return {c: {k: gb.median([r["redis_commands"][c][k] for r in runs if c in r.get("redis_commands", {})])
                for k in ("per_request", "server_usec_per_call")} for c in cmds}


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    def med(scen: str, target: str, getter: Callable[[dict[str, Any]], float | None]) -> float | None:
        return gb.median([getter(r) for r in _runs(results, scen, target)])

    s: dict[str, Any] = {}
    for name in CONFIGS:
        s[name] = {
            "nonstream_c64_rps": med("nonstream_c64", name, lambda r: r["rps"]),
            "nonstream_c64_p50_ms": med("nonstream_c64", name, lambda r: r["latency_ms"].get("p50")),
            "nonstream_c64_p99_ms": med("nonstream_c64", name, lambda r: r["latency_ms"].get("p99")),
            "nonstream_c1_p50_ms": med("nonstream_c1", name, lambda r: r["latency_ms"].get("p50")),
            "nonstream_c1_p99_ms": med("nonstream_c1", name, lambda r: r["latency_ms"].get("p99")),
            "nonstream_c1_max_ms": med("nonstream_c1", name, lambda r: r["latency_ms"].get("max")),
            "errors": sum(r["errors"] for r in results["runs"] if r["target"] == name),
            "non_2xx_c64": sum(r.get("non_2xx", 0) for r in _runs(results, "nonstream_c64", name)),
            "hearth_cpu_pct_c64": med("nonstream_c64", name, lambda r, n=name: r["cpu_pct_of_one_core"].get(n)),
            "redis_cpu_pct_c64": med("nonstream_c64", name, lambda r: r["cpu_pct_of_one_core"].get("redis")),
            "fake_cpu_pct_c64": med("nonstream_c64", name, lambda r: r["cpu_pct_of_one_core"].get("fake")),
            "gen_cpu_pct_c64": med("nonstream_c64", name, lambda r: r["cpu_pct_of_one_core"].get("generator")),
            "foreign_cpu_pct_c64": med("nonstream_c64", name, lambda r: r.get("foreign_sut_cpu_pct")),
            "idle_hearths_cpu_pct_c64": med("nonstream_c64", name, lambda r, n=name: sum(
                v for k, v in r["cpu_pct_of_one_core"].items() if k in CONFIGS and k != n)),
            "rps_by_round": [round(r["rps"]) for r in _runs(results, "nonstream_c64", name)],
            "redis_commands_c64": _redis_median(_runs(results, "nonstream_c64", name)),
            "c1_p50_by_round": [round(r["latency_ms"].get("p50", 0), 3) for r in _runs(results, "nonstream_c1", name)],
        }

    def sub(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(a - b, 3)

    def pct(a: float | None, b: float | None) -> float | None:
        return None if not a or not b else round(100 * a / b, 1)

    gw = results["gateway_figure"].get("rps")
    p50 = {n: s[n]["nonstream_c1_p50_ms"] for n in CONFIGS}
    rps = {n: s[n]["nonstream_c64_rps"] for n in CONFIGS}
    derived = {
        "redis_added_p50_ms_governance": sub(p50["gov-redis"], p50["gov-memory"]),
        "redis_added_p50_ms_governance_by_round": _paired(results, "nonstream_c1", "gov-redis", "gov-memory", "p50"),
        "redis_added_p50_ms_plain": sub(p50["plain-redis"], p50["plain-memory"]),
        "redis_added_p50_ms_plain_by_round": _paired(results, "nonstream_c1", "plain-redis", "plain-memory", "p50"),
        "governance_added_p50_ms_memory": sub(p50["gov-memory"], p50["plain-memory"]),
        "governance_added_p50_ms_redis": sub(p50["gov-redis"], p50["plain-redis"]),
        "gov_memory_pct_of_plain_memory": pct(rps["gov-memory"], rps["plain-memory"]),
        "gov_redis_pct_of_plain_memory": pct(rps["gov-redis"], rps["plain-memory"]),
        "gov_redis_pct_of_plain_redis": pct(rps["gov-redis"], rps["plain-redis"]),
        "plain_redis_pct_of_plain_memory": pct(rps["plain-redis"], rps["plain-memory"]),
        "gov_memory_pct_of_gateway_figure": pct(rps["gov-memory"], gw),
        "gov_redis_pct_of_gateway_figure": pct(rps["gov-redis"], gw),
        "plain_memory_pct_of_gateway_figure": pct(rps["plain-memory"], gw),
    }
    s["derived"] = derived

    def check(value: float | None, ok: Callable[[float], bool]) -> str:
        if value is None:
            return "not measured"
        return "met" if ok(value) else "MISSED"

    s["targets"] = {
        "issue7_memory_pct_of_plain": {"value": derived["gov_memory_pct_of_plain_memory"],
                                       "status": check(derived["gov_memory_pct_of_plain_memory"], lambda v: v >= 70)},
        "issue7_redis_pct_of_plain": {"value": derived["gov_redis_pct_of_plain_redis"],
                                      "status": check(derived["gov_redis_pct_of_plain_redis"], lambda v: v >= 70)},
        "issue7_memory_added_p50_ms": {"value": derived["governance_added_p50_ms_memory"],
                                       "status": check(derived["governance_added_p50_ms_memory"],
                                                       lambda v: v <= 1.5)},
        "issue7_redis_added_p50_ms": {"value": derived["governance_added_p50_ms_redis"],
                                      "status": check(derived["governance_added_p50_ms_redis"], lambda v: v <= 1.5)},
        "redis_added_p50_ms": {"value": derived["redis_added_p50_ms_governance"],
                               "status": check(derived["redis_added_p50_ms_governance"], lambda v: v <= 1.0)},
        "gov_redis_pct_of_plain_memory": {"value": derived["gov_redis_pct_of_plain_memory"],
                                          "status": check(derived["gov_redis_pct_of_plain_memory"],
                                                          lambda v: v >= 70)},
        "gov_memory_pct_of_plain_memory": {"value": derived["gov_memory_pct_of_plain_memory"],
                                           "status": check(derived["gov_memory_pct_of_plain_memory"],
                                                           lambda v: v >= 70)},
        "gov_redis_pct_of_gateway_figure": {"value": derived["gov_redis_pct_of_gateway_figure"],
                                            "status": check(derived["gov_redis_pct_of_gateway_figure"],
                                                            lambda v: v >= 70)},
        "gov_memory_pct_of_gateway_figure": {"value": derived["gov_memory_pct_of_gateway_figure"],
                                             "status": check(derived["gov_memory_pct_of_gateway_figure"],
                                                             lambda v: v >= 70)},
    }
    return s


def markdown(results: dict[str, Any]) -> str:
    s = results["summary"]
    d = s["derived"]
    m = results["machine"]
    c = results["config"]
    gw = results["gateway_figure"]
    fmt = gb.fmt
    out = [
        f"Run gov-{results['stamp']} — {m['date_utc']}, {m['nproc']} CPUs ({m['cpu_model']}), kernel {m['kernel']}, "
        f"Python {m['python']}, Hearth {results.get('hearth_version')} (src sha256 "
        f"{results['hearth_source']['sha256']}, newest file {results['hearth_source']['newest_mtime_utc']} UTC"
        f"{'; CHANGED during the run' if 'changed_during_run_to' in results['hearth_source'] else ''}); "
        f"{c['wrk']}; {c['duration_s']} s per run after {c['warmup_s']} s warm-up, median of {c['rounds']} "
        f"interleaved rounds; Hearth on CPU {c['sut_cpus']}, fake upstream, redis-server and generators on CPU "
        f"{c['upstream_cpus']}; Redis: {c['redis']}; load average {m['loadavg_at_start']} at start, "
        f"{m.get('loadavg_at_end')} at end.",
        "",
        "| scenario | plain, memory | governance, memory | governance, Redis | plain, Redis |",
        "|---|---:|---:|---:|---:|",
    ]

    def row(label: str, key: str, digits: int) -> str:
        return f"| {label} | " + " | ".join(fmt(s[n][key], digits) for n in CONFIGS) + " |"

    out += [
        row("non-stream c=64, req/s", "nonstream_c64_rps", 0),
        "| non-stream c=64, p50 / p99 ms (wrk) | " + " | ".join(
            f"{fmt(s[n]['nonstream_c64_p50_ms'], 2)} / {fmt(s[n]['nonstream_c64_p99_ms'], 2)}" for n in CONFIGS) + " |",
        row("non-stream c=1, p50 ms", "nonstream_c1_p50_ms", 3),
        "| non-stream c=1, p99 / max ms | " + " | ".join(
            f"{fmt(s[n]['nonstream_c1_p99_ms'], 2)} / {fmt(s[n]['nonstream_c1_max_ms'], 1)}" for n in CONFIGS) + " |",
        "| failed requests / non-2xx at c=64, all runs | " + " | ".join(
            f"{s[n]['errors']} / {s[n]['non_2xx_c64']}" for n in CONFIGS) + " |",
        row("Hearth CPU at c=64 (% of its core)", "hearth_cpu_pct_c64", 0),
        row("redis-server CPU at c=64 (% of a core)", "redis_cpu_pct_c64", 0),
        row("wrk CPU at c=64 (% of a core)", "gen_cpu_pct_c64", 0),
        row("the three idle Hearths at c=64 (% of a core)", "idle_hearths_cpu_pct_c64", 1),
        row("foreign load on the Hearth core at c=64 (%, median)", "foreign_cpu_pct_c64", 1),
        "| c=64 req/s by round | " + " | ".join(", ".join(f"{v:,}" for v in s[n]["rps_by_round"])
                                             for n in CONFIGS) + " |",
        "| c=1 p50 ms by round | " + " | ".join(", ".join(f"{v:.3f}" for v in s[n]["c1_p50_by_round"])
                                              for n in CONFIGS) + " |",
        "",
    ]
    gw_txt = (f"{fmt(gw['rps'], 0)} req/s ({gw['source']}"
              + (f", run {gw['stamp']}, src sha256 {gw.get('hearth_source_sha256')}" if gw.get("stamp") else "") + ")"
              if gw.get("rps") else gw["source"])
    t = s["targets"]
    out += [
        "| target (issue 7: a budgeted, signed, limited call vs plain, same backend) | goal | measured | status |",
        "|---|---|---:|---|",
        f"| memory: governed c=64 req/s ÷ plain-memory | ≥ 70 % | {fmt(d['gov_memory_pct_of_plain_memory'], 1)} % "
        f"| **{t['issue7_memory_pct_of_plain']['status']}** |",
        f"| Redis: governed c=64 req/s ÷ plain-Redis | ≥ 70 % | {fmt(d['gov_redis_pct_of_plain_redis'], 1)} % "
        f"| **{t['issue7_redis_pct_of_plain']['status']}** |",
        f"| memory: added p50 at c=1 (gov-memory − plain-memory) | ≤ 1.5 ms | "
        f"{fmt(d['governance_added_p50_ms_memory'], 3)} ms | **{t['issue7_memory_added_p50_ms']['status']}** |",
        f"| Redis: added p50 at c=1 (gov-redis − plain-redis) | ≤ 1.5 ms | "
        f"{fmt(d['governance_added_p50_ms_redis'], 3)} ms | **{t['issue7_redis_added_p50_ms']['status']}** |",
        "",
        "| target (issue 3) | goal | measured | status |",
        "|---|---|---:|---|",
        f"| Redis-backed admission adds, p50 at c=1 (gov-redis − gov-memory) | ≤ 1 ms | "
        f"{fmt(d['redis_added_p50_ms_governance'], 3)} ms (by round {d['redis_added_p50_ms_governance_by_round']}) "
        f"| **{t['redis_added_p50_ms']['status']}** |",
        f"| governance, Redis: c=64 req/s ÷ plain-memory req/s of this run | ≥ 70 % | "
        f"{fmt(d['gov_redis_pct_of_plain_memory'], 1)} % | **{t['gov_redis_pct_of_plain_memory']['status']}** |",
        f"| governance, memory: c=64 req/s ÷ plain-memory req/s of this run | ≥ 70 % | "
        f"{fmt(d['gov_memory_pct_of_plain_memory'], 1)} % | **{t['gov_memory_pct_of_plain_memory']['status']}** |",
        f"| governance, Redis: c=64 req/s ÷ gateway issue figure | ≥ 70 % | "
        f"{fmt(d['gov_redis_pct_of_gateway_figure'], 1)} % | **{t['gov_redis_pct_of_gateway_figure']['status']}** |",
        f"| governance, memory: c=64 req/s ÷ gateway issue figure | ≥ 70 % | "
        f"{fmt(d['gov_memory_pct_of_gateway_figure'], 1)} % | **{t['gov_memory_pct_of_gateway_figure']['status']}** |",
        "",
        f"Gateway issue figure used: {gw_txt}. This run's plain-memory is "
        f"{fmt(d['plain_memory_pct_of_gateway_figure'], 1)} % of it. For context: plain-Redis − plain-memory p50 "
        f"at c=1 {fmt(d['redis_added_p50_ms_plain'], 3)} ms (by round {d['redis_added_p50_ms_plain_by_round']}); "
        f"governance adds {fmt(d['governance_added_p50_ms_memory'], 3)} ms p50 over plain with memory state and "
        f"{fmt(d['governance_added_p50_ms_redis'], 3)} ms with Redis; plain-Redis reaches "
        f"{fmt(d['plain_redis_pct_of_plain_memory'], 1)} % of plain-memory's c=64 req/s.",
        "",
        "Redis commands per completed request at c=64 (median of rounds; Redis server time per call): " + "; ".join(
            f"{n}: " + ", ".join(f"{c} {v['per_request']} ({v['server_usec_per_call']} µs)"
                                 for c, v in s[n]["redis_commands_c64"].items())
            + f" — total {sum(v['per_request'] or 0 for v in s[n]['redis_commands_c64'].values()):.2f}"
            for n in CONFIGS if s[n]["redis_commands_c64"]) + ".",
        "",
        "Checks: " + "; ".join(f"{n}: {v}" for n, v in results.get("checks", {}).items()) + " (each governed "
        "configuration gets one replayed and one unsigned request on purpose here; any other 401/429 in the "
        "request logs below would be a fault).",
        "Database after graceful stop (request-log rows by status and error code; budget-ledger rows; requests "
        "the generators completed): " + "; ".join(
            f"{n}: logs {v.get('request_logs')}, ledger {v.get('budget_ledger')}, sent {v.get('requests_sent')}"
            for n, v in results.get("db", {}).items()) + ".",
        "Runs with foreign load on the Hearth core above 10 % (busy share of that core not used by the Hearth "
        "processes): " + (", ".join(f"{r['target']} {r['scenario']} r{r['round']} {r['foreign_sut_cpu_pct']}%"
                                     for r in results["runs"] if (r.get("foreign_sut_cpu_pct") or 0) > 10)
                           or "none") + ".",
        "Signed requests: " + "; ".join(
            f"{r['target']} {r['scenario']} r{r['round']}: {r['signed']}" for r in results["runs"] if "signed" in r)
        + ".",
    ]
    for name, p in (results.get("profile") or {}).items():
        if "self_top" not in p:
            out.append(f"\nprofile {name}: {p.get('skipped')}")
            continue
        out += ["", f"py-spy, {name} at c=64: {p['main_thread_samples']} event-loop samples at "
                    f"{p['rps_while_sampling']:,.0f} req/s ({p['non_2xx_while_sampling']} non-2xx); raw stacks in "
                    f"{p['file']}; shares are % of event-loop-thread samples.",
                "", "self time by package: " + ", ".join(f"{k} {v}%" for k, v in p["self_by_package"][:12]) + ".",
                "busy worker threads (same scale): "
                + (", ".join(f"{k} {v}%" for k, v in p["worker_self_top"][:5]) or "none") + ".",
                "", "| top self | % |", "|---|---:|"]
        out += [f"| `{k}` | {v:.1f} |" for k, v in p["self_top"][:15]]
        out += ["", "| top inclusive, Hearth code (< 95 %) | % |", "|---|---:|"]
        out += [f"| `{k}` | {v:.1f} |" for k, v in p["hearth_inclusive_top"] if v < 95][:20]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Hearth with governance on/off, memory/Redis state (loopback only).")
    ap.add_argument("--quick", action="store_true", help="3 s runs, 1 s warm-up, 1 round")
    ap.add_argument("--duration", type=int, default=None, help="seconds per measured run (default 10; quick 3)")
    ap.add_argument("--warmup", type=int, default=None, help="seconds of warm-up before each run (default 2; quick 1)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved repetitions (default 3; quick 1)")
    ap.add_argument("--sut-cpus", default="0", help="CPU list for the Hearth processes (default 0)")
    ap.add_argument("--upstream-cpus", default="1", help="CPU list for the fake upstream and redis (default 1)")
    ap.add_argument("--gen-cpus", default="1", help="CPU list for the load generators (default 1)")
    ap.add_argument("--max-rate", type=int, default=12_000,
                    help="signed requests generated per second of a c=64 run (must exceed the real rate)")
    ap.add_argument("--max-rate-c1", type=int, default=6_000,
                    help="signed requests generated per second of a c=1 run (the client stops when they run out)")
    ap.add_argument("--gateway-figure", type=float, default=None,
                    help="the gateway issue's c=64 req/s (default: newest full gateway_bench run in bench/results)")
    ap.add_argument("--no-profile", dest="profile", action="store_false", help="skip the py-spy profiles")
    ap.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--profile-configs", default="gov-redis,gov-memory", help="configurations to profile")
    ap.add_argument("--hearth-log-level", default="info", help="HEARTH_LOG_LEVEL for the Hearth processes")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs, databases)")
    ap.add_argument("--hearth-env", action="append", default=[], metavar="HEARTH_X=VALUE",
                    help="an extra setting for every Hearth process (repeatable), e.g. to try a setting's effect")
    args = ap.parse_args(argv)
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if not (1 <= args.duration <= 60 and 1 <= args.rounds <= 10 and 0 <= args.warmup <= 30):
        ap.error("--duration must be 1..60 s, --warmup 0..30 s and --rounds 1..10 (runs stay bounded)")
    if (args.duration + args.warmup) * max(args.max_rate, args.max_rate_c1) > 2_000_000:
        ap.error("too many signed requests per run; lower --max-rate or --duration")
    # what gateway_bench's helpers read from args
    args.state = "memory"
    args.gc_probe = False
    args.generator = "wrk"
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["latency-client"]:
        return latency_client(argv[1:])
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
