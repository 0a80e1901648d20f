"""How tasks, events, dead letters and deliveries look to callers: one rendering for the API and callbacks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hearth.tasks.states import TERMINAL


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def task_view(row: Mapping[Any, Any], *, attempts: Sequence[Mapping[Any, Any]] | None = None,
              with_result: bool = False) -> dict[str, Any]:
    """The task as ``GET /api/v1/ai/tasks/{id}`` shows it (``result`` only when asked: it can be large)."""
    started, finished = row.get("started_at"), row.get("finished_at")
    view: dict[str, Any] = {
        "task_id": row["id"], "task_type": row["task_type"], "queue": row["queue"], "state": row["state"],
        "terminal": row["state"] in TERMINAL, "priority": row["priority"], "progress": row["progress"],
        "current_step": row["current_step"], "attempt": row["attempt"], "max_attempts": row["max_attempts"],
        "caller": row["caller"], "tenant": row["tenant"], "user": row["end_user"],
        "idempotency_key": row["idempotency_key"], "replay_of": row["replay_of"], "request_id": row["request_id"],
        "callback_url": row["callback_url"], "versions": row["versions"],
        "error": row["error"] if row["state"] not in ("succeeded", "mark_succeeded") else None,
        "error_code": row["error_code"], "failure_stage": row["failure_stage"], "hold_reason": row["hold_reason"],
        "cancel_requested": bool(row["cancel_requested"]),
        "timings": {"created_at": iso(row["created_at"]), "run_after": iso(row["run_after"]),
                    "started_at": iso(started), "finished_at": iso(finished), "updated_at": iso(row["updated_at"]),
                    "queued_ms": None if started is None else round((started - row["created_at"]) * 1000, 3),
                    "run_ms": None if started is None or finished is None else round((finished - started) * 1000, 3)},
    }
    if attempts is not None:
        view["attempts"] = [attempt_view(a) for a in attempts]
    if with_result:
        view["result"] = row["result"]
    return view


def attempt_view(a: Mapping[Any, Any]) -> dict[str, Any]:
    return {"attempt": a["attempt"], "worker": a["worker"], "outcome": a["outcome"], "error_code": a["error_code"],
            "error_message": a["error_message"], "started_at": iso(a["started_at"]),
            "finished_at": iso(a["finished_at"])}


def event_view(e: Mapping[Any, Any]) -> dict[str, Any]:
    return {"id": e["id"], "task_id": e["task_id"], "at": iso(e["at"]), "kind": e["kind"], "state": e["state"],
            "attempt": e["attempt"], "progress": e["progress"], "step": e["step"], "detail": e["detail"]}


def dead_letter_view(d: Mapping[Any, Any]) -> dict[str, Any]:
    return {"task_id": d["task_id"], "status": d["status"], "severity": d["severity"], "task_type": d["task_type"],
            "queue": d["queue"], "caller": d["caller"], "error_code": d["error_code"],
            "failure_stage": d["failure_stage"], "message": d["message"], "attempts": d["attempts"],
            "opened_at": iso(d["opened_at"]), "updated_at": iso(d["updated_at"]),
            "history": [{**h, "at": iso(h.get("at"))} for h in d["history"]]}


def delivery_view(d: Mapping[Any, Any]) -> dict[str, Any]:
    return {"id": d["id"], "task_id": d["task_id"], "url": d["url"], "state": d["state"],
            "task_state": d["task_state"], "attempts": d["attempts"], "next_at": iso(d["next_at"]),
            "last_status": d["last_status"], "last_error": d["last_error"], "created_at": iso(d["created_at"]),
            "delivered_at": iso(d["delivered_at"])}
