"""``hearth status``: endpoints, queues, workers and backends of a running Hearth, at a glance.

Everything comes from the HTTP API with the admin token — readiness (database and state backend
reachability), process stats, each endpoint's live state (enabled, cooldown, breaker, in-flight) and the
task listing (queue depth, oldest queued task, running tasks and the workers holding their leases).
The task listing is read a bounded number of pages per state, so ``status`` stays cheap on a large
backlog: beyond :data:`MAX_PAGES` pages a count is shown as a lower bound (``2000+``).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hearth.operator_cli.client import (
    DEFAULT_URL,
    AdminClient,
    ApiError,
    JsonOption,
    TimeoutOption,
    TokenOption,
    UrlOption,
    quote,
)
from hearth.operator_cli.output import age, api_errors, cell, console, duration, print_json, show, state_style, table

if TYPE_CHECKING:
    from rich.console import Console

PAGE = 500
MAX_PAGES = 4  # per task state: 2,000 tasks
MAX_LEASE_LOOKUPS = 50  # running tasks whose worker is looked up
_STATES = ("queued", "running", "waiting", "hold")


@dataclass
class QueueCount:
    counts: Counter[str] = field(default_factory=Counter)
    capped: set[str] = field(default_factory=set)
    oldest_queued_at: str | None = None


def _tasks_in(client: AdminClient, state: str) -> tuple[list[dict[str, Any]], bool]:
    """Tasks in ``state``, newest first, at most MAX_PAGES pages; True if there were more."""
    found: list[dict[str, Any]] = []
    cursor = None
    for _ in range(MAX_PAGES):
        data = client.get("/api/v1/ai/tasks", state=state, limit=PAGE, cursor=cursor)
        found.extend(data["tasks"])
        cursor = data.get("next_cursor")
        if not cursor:
            return found, False
    return found, True


def _queues(client: AdminClient) -> tuple[dict[str, QueueCount], list[dict[str, Any]], bool]:
    queues: dict[str, QueueCount] = defaultdict(QueueCount)
    running: list[dict[str, Any]] = []
    running_capped = False
    for state in _STATES:
        rows, capped = _tasks_in(client, state)
        for t in rows:
            queues[t["queue"]].counts[state] += 1
        if capped:
            for q in {t["queue"] for t in rows}:
                queues[q].capped.add(state)
        if state == "running":
            running, running_capped = rows, capped
    for name, q in queues.items():
        if q.counts["queued"]:
            # Oldest change first: the task that has been queued longest (since it was queued or requeued).
            oldest = client.get("/api/v1/ai/tasks", state="queued", queue=name, updated_since=0, limit=1)["tasks"]
            q.oldest_queued_at = oldest[0]["timings"]["updated_at"] if oldest else None
    return dict(sorted(queues.items())), running, running_capped


def _lease_holder(client: AdminClient, task: dict[str, Any]) -> tuple[str, str | None] | None:
    """(worker, claimed at) of a running task's current attempt: its claim event names the worker (the
    attempt's own row is written only when the attempt ends). None if the task is gone."""
    try:
        events = client.get(f"/api/v1/ai/tasks/{quote(task['task_id'])}/events", format="json")["events"]
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    claims = [e for e in events if e["kind"] == "state" and e["state"] == "running"
              and e["attempt"] == task["attempt"] and (e.get("detail") or {}).get("worker")]
    if not claims:
        return "?", None
    return str(claims[-1]["detail"]["worker"]), claims[-1]["at"]


def _workers(client: AdminClient, running: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Workers holding leases, from the running tasks (the newest MAX_LEASE_LOOKUPS of them)."""
    workers: dict[str, dict[str, Any]] = {}
    for t in running[:MAX_LEASE_LOOKUPS]:
        holder = _lease_holder(client, t)
        if holder is None:
            continue
        name, claimed_at = holder
        w = workers.setdefault(name, {"running": 0, "queues": set(), "oldest_claimed_at": None})
        w["running"] += 1
        w["queues"].add(t["queue"])
        if claimed_at and (w["oldest_claimed_at"] is None or claimed_at < w["oldest_claimed_at"]):
            w["oldest_claimed_at"] = claimed_at
    return {k: {**v, "queues": sorted(v["queues"])} for k, v in sorted(workers.items())}


def _endpoints(client: AdminClient) -> list[dict[str, Any]]:
    out = []
    for row in client.get("/api/v1/admin/endpoints"):
        live = client.get(f"/api/v1/admin/endpoints/{quote(row['name'])}/status")
        scopes = live.get("scopes") or {}
        cooldown = max([s.get("cooldown_s") or 0.0 for s in scopes.values()] +
                       [live["health"].get("cooldown_s") or 0.0])
        own: dict[str, Any] = scopes.get(f"ep:{row['name']}") or next(iter(scopes.values()), {})
        out.append({"name": row["name"], "provider": row.get("provider"), "enabled": live["enabled"],
                    "disabled_reason": live.get("disabled_reason"), "circuit": live["health"].get("circuit"),
                    "cooldown_s": cooldown, "in_flight": own.get("in_flight"),
                    "max_concurrency": own.get("max_concurrency"), "rpm_used": own.get("rpm_used"),
                    "rpm": own.get("rpm"), "consecutive_failures": live["health"].get("consecutive_failures"),
                    "latency_ms_ewma": live["health"].get("latency_ms_ewma"), "api_key": live.get("api_key")})
    return out


def _attention(client: AdminClient) -> dict[str, Any]:
    """What waits for a person: open dead letters (by severity) and pending review items (the oldest's age),
    one page each (a full page is shown as a lower bound)."""
    letters = client.get("/api/v1/ai/dead-letters", status="OPEN", limit=PAGE)
    reviews = client.get("/api/v1/reviews", state="pending", limit=PAGE)
    return {"dead_letters_open": len(letters["dead_letters"]),
            "dead_letters_by_severity": dict(sorted(Counter(d["severity"] for d in letters["dead_letters"]).items())),
            "dead_letters_lower_bound": bool(letters.get("next_cursor")),
            "reviews_pending": len(reviews["reviews"]), "reviews_lower_bound": bool(reviews.get("next_cursor")),
            "oldest_review_at": reviews["reviews"][0]["created_at"] if reviews["reviews"] else None}


def _readiness(client: AdminClient) -> dict[str, Any]:
    answer = client.request("GET", "/readyz")
    try:
        report = answer.json() if answer.body else {}
    except ValueError:
        report = {}
    return report if isinstance(report, dict) else {"status": f"HTTP {answer.status}"}


def snapshot(client: AdminClient) -> dict[str, Any]:
    """What ``status`` shows, as data (``--json``)."""
    ready = _readiness(client)
    stats = client.get("/api/v1/admin/stats")
    endpoints = _endpoints(client)
    queues, running, running_capped = _queues(client)
    return {
        "url": client.base_url, "at": time.time(), "readiness": ready, "stats": stats, "endpoints": endpoints,
        "queues": {name: {"queued": q.counts["queued"], "running": q.counts["running"],
                          "waiting": q.counts["waiting"], "hold": q.counts["hold"],
                          "lower_bound": sorted(q.capped), "oldest_queued_at": q.oldest_queued_at}
                   for name, q in queues.items()},
        "workers": _workers(client, running),
        "workers_partial": running_capped or len(running) > MAX_LEASE_LOOKUPS,
        "attention": _attention(client),
    }


def status(
    *, url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Endpoints (enabled, cooldown, breaker), queues (depth, oldest, running), workers and backends."""
    with api_errors():
        data = snapshot(AdminClient(url, token, timeout=timeout))
    if as_json:
        print_json(data)
        return
    _render(data)


def _render(data: dict[str, Any]) -> None:
    out = console()
    ready, stats = data["readiness"], data["stats"]
    checks = ready.get("checks") or {}
    overall = str(ready.get("status", "unknown"))
    out.print(f"[bold]Hearth[/bold] {cell(data['url'])}: {state_style(overall)}, up "
              f"{duration(float(stats.get('uptime_s', 0)))}, registry version {cell(stats.get('registry_version'))}")
    backends = table("backends", ["CHECK", "STATE"])
    backends.add_row("state backend", f"{cell(stats.get('state_backend'))}: "
                     f"{state_style(_word(checks.get('state_backend')))}")
    for name in ("database", "budget_ledger", "budget_counters", "request_log", "endpoints"):
        if name in checks:
            backends.add_row(name.replace("_", " "), state_style(_word(checks[name])) + _rest(checks[name]))
    for key, label in (("request_log_writer", "request-log writer"), ("budget_ledger", "budget-ledger writer")):
        writer = stats.get(key) or {}
        if writer:  # backlog and losses of the batch writers (docs/operations.md)
            backends.add_row(label, ", ".join(f"{k} {v}" for k, v in sorted(writer.items())
                                              if isinstance(v, int | float) and not isinstance(v, bool)))
    show(out, backends)

    eps = table("endpoints", ["ENDPOINT", "PROVIDER", "STATE", "BREAKER", "COOLDOWN", "IN FLIGHT", "RPM",
                              "FAILS", "LATENCY", "KEY"])
    for e in data["endpoints"]:
        word = "enabled" if e["enabled"] else "disabled"
        if e["enabled"] and e["cooldown_s"]:
            word = "cooling"
        state = state_style(word) + (f" ({cell(e['disabled_reason'])})" if e.get("disabled_reason") else "")
        eps.add_row(e["name"], cell(e["provider"]), state, state_style(str(e["circuit"])),
                    duration(e["cooldown_s"]) if e["cooldown_s"] else "-",
                    f"{cell(e['in_flight'])}/{e['max_concurrency'] or '-'}",
                    f"{cell(e['rpm_used'])}/{e['rpm'] or '-'}", cell(e["consecutive_failures"]),
                    f"{e['latency_ms_ewma']:.0f}ms" if e.get("latency_ms_ewma") else "-", cell(e["api_key"]))
    if data["endpoints"]:
        show(out, eps)
    else:
        out.print("no endpoints")

    if data["queues"]:
        queues = table("queues", ["QUEUE", "QUEUED", "OLDEST", "RUNNING", "WAITING", "HOLD"])
        for name, q in data["queues"].items():
            def n(state: str, q: dict[str, Any] = q) -> str:
                return f"{q[state]}+" if state in q["lower_bound"] else str(q[state])
            queues.add_row(name, n("queued"), age(q["oldest_queued_at"], now=data["at"]), n("running"),
                           n("waiting"), n("hold"))
        show(out, queues)
    else:
        out.print("queues: no pending or running tasks")

    _render_attention(out, data["attention"], now=data["at"])

    if data["workers"]:
        workers = table("workers (from the leases of running tasks)", ["WORKER", "RUNNING", "QUEUES", "LONGEST"])
        for name, w in data["workers"].items():
            workers.add_row(cell(name), str(w["running"]), ", ".join(w["queues"]),
                            age(w["oldest_claimed_at"], now=data["at"]))
        show(out, workers)
        if data["workers_partial"]:
            out.print(f"(workers of the newest {MAX_LEASE_LOOKUPS} running tasks only)")
    else:
        out.print("workers: none holding a task lease")


def _render_attention(out: Console, a: dict[str, Any], *, now: float) -> None:
    letters = f"{a['dead_letters_open']}{'+' if a['dead_letters_lower_bound'] else ''} dead letter(s) open"
    if a["dead_letters_by_severity"]:
        letters += " (" + ", ".join(f"{k} {v}" for k, v in a["dead_letters_by_severity"].items()) + ")"
    reviews = f"{a['reviews_pending']}{'+' if a['reviews_lower_bound'] else ''} review item(s) pending"
    if a["oldest_review_at"] is not None:
        reviews += f", oldest {age(a['oldest_review_at'], now=now)}"
    colour = "red" if a["dead_letters_open"] else "yellow" if a["reviews_pending"] else "green"
    out.print(f"attention: [{colour}]{letters}; {reviews}[/{colour}]")


def _word(check: str | None) -> str:
    return "unknown" if not check else check.split(":", 1)[0]


def _rest(check: str) -> str:
    rest = check.split(":", 1)[1].strip() if ":" in check else ""
    return f" ({cell(rest)})" if rest else ""
