"""``hearth reviews ls|decide``: the human review queue, through the review API with the admin token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

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
from hearth.operator_cli.output import age, api_errors, cell, console, print_json, show, state_style, table, until

app = typer.Typer(help="List and decide human review items (over the HTTP API).", no_args_is_help=True)


@app.command("ls")
def list_reviews(
    *, queue: Annotated[str | None, typer.Option(help="only this review queue")] = None,
    state: Annotated[str | None, typer.Option(help="pending, claimed, approved, modified, rejected or expired "
                                              "(default: every state)")] = None,
    assignee: Annotated[str | None, typer.Option(help="only items claimed by this reviewer")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="rows per page")] = 50,
    cursor: Annotated[str | None, typer.Option(help="continue from a previous page's next cursor")] = None,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Review items, oldest first: what waits for a reviewer, how long it has waited, when it expires."""
    with api_errors():
        data = AdminClient(url, token, timeout=timeout).get("/api/v1/reviews", queue=queue, state=state,
                                                            assignee=assignee, limit=limit, cursor=cursor)
    if as_json:
        print_json(data)
        return
    out = console()
    if not data["reviews"]:
        out.print("no review items")
        return
    rows = table(None, ["REVIEW", "QUEUE", "STATE", "TITLE", "SUBJECT", "ASSIGNEE", "WAITING", "EXPIRES"])
    for r in data["reviews"]:
        subject = f"{r['subject_kind']}:{r['subject_id']}" if r.get("subject_id") else r["subject_kind"]
        rows.add_row(r["id"], cell(r["queue"]), state_style(r["state"]), cell(r["title"]), cell(subject),
                     cell(r["assignee"]), age(r["created_at"]),
                     until(r["expires_at"]) if r["state"] in ("pending", "claimed") else "-")
    show(out, rows)
    if data.get("next_cursor"):
        out.print(f"more: --cursor {data['next_cursor']}")


def _payload(value: str | None) -> dict[str, Any] | None:
    """``--payload``: inline JSON, or ``@FILE`` with the JSON in a file."""
    if value is None:
        return None
    try:
        text = Path(value[1:]).read_text() if value.startswith("@") else value
        payload = json.loads(text)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"not a JSON object: {exc}", param_hint="--payload") from None
    if not isinstance(payload, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--payload")
    return payload


@app.command("decide")
def decide_review(
    review_id: Annotated[str, typer.Argument(help="the review item's id")],
    decision: Annotated[Literal["approve", "modify", "reject"], typer.Argument(help="approve, modify or reject")],
    *, operator: Annotated[str, typer.Option("--operator", help="the reviewer deciding (recorded)")],
    reason: Annotated[str, typer.Option("--reason", help="why (recorded)")],
    payload: Annotated[str | None, typer.Option(help="modify: the new payload, JSON or @FILE (checked against the "
                                                "item's form)")] = None,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Decide a review item as ``--operator``: claim it (refused if another reviewer holds it), decide, and
    give the claim back if the decision is refused (e.g. a payload that does not fit the form)."""
    body: dict[str, Any] = {"reviewer": operator, "decision": decision, "reason": reason}
    if decision == "modify":
        body["payload"] = _payload(payload)
        if body["payload"] is None:
            raise typer.BadParameter("a modify decision needs the modified payload", param_hint="--payload")
    elif payload is not None:
        raise typer.BadParameter("only a modify decision takes a payload", param_hint="--payload")
    client = AdminClient(url, token, timeout=timeout)
    path = f"/api/v1/reviews/{quote(review_id)}"
    with api_errors():
        client.post(f"{path}/claim", {"reviewer": operator, "lease_s": 120})
        try:
            item = client.post(f"{path}/decide", body)
        except ApiError:
            try:
                client.post(f"{path}/release", {"reviewer": operator})
            except ApiError:
                pass  # the claim then lapses after its lease
            raise
    if as_json:
        print_json(item)
        return
    console().print(f"review {item['id']} {state_style(item['state'])} by {cell(item['decided_by'])}")
