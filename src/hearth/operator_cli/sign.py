"""``hearth sign``: sign one request for a caller and send it, or print it as a curl command.

The operator's version of seed 000's signed smoke script: the same wire protocol as callers use
(:mod:`hearth.auth.signing`, docs/signing.md), so a request that passes here proves a caller's setup
(key, clock, proxy in between) end to end. Secrets come only from environment variables and are never
printed: the curl command refers to the caller's key as ``$VARIABLE``, and the signing key never leaves
this process (only the signature derived from it, which is single-use and expires with its timestamp).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from hearth.auth.signing import signed_headers
from hearth.operator_cli.client import DEFAULT_URL, ApiError, send
from hearth.operator_cli.output import EXIT_REFUSED, EXIT_UNREACHABLE, console, print_json


def _secret(variable: str, what: str) -> str:
    value = os.environ.get(variable, "")
    if not value:
        raise typer.BadParameter(f"set {variable} to the {what} (it is read from the environment only, so it "
                                 "never appears in a command line or in this command's output)")
    return value


def _body(data: str | None, data_file: Path | None) -> bytes:
    if data is not None and data_file is not None:
        raise typer.BadParameter("give the body with --data or --data-file, not both", param_hint="--data")
    if data_file is not None:
        try:
            return data_file.read_bytes()
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {data_file}: {exc.strerror}", param_hint="--data-file") from None
    return (data or "").encode("utf-8")


def sign(
    method: Annotated[str, typer.Argument(help="HTTP method: GET, POST…")],
    path: Annotated[str, typer.Argument(help="the request target, percent-encoded as sent: /api/v1/ai/summarize")],
    *, url: Annotated[str, typer.Option("--url", envvar="HEARTH_URL", help="the Hearth server")] = DEFAULT_URL,
    data: Annotated[str | None, typer.Option("--data", "-d", help="the body (its UTF-8 bytes are signed and "
                                             "sent)")] = None,
    data_file: Annotated[Path | None, typer.Option("--data-file", help="the body, read from a file as "
                                                   "bytes")] = None,
    content_type: Annotated[str, typer.Option(help="Content-Type of a body")] = "application/json",
    key_env: Annotated[str, typer.Option(help="variable holding the signing key")] = "HEARTH_SIGNING_KEY",
    caller_key_env: Annotated[str, typer.Option(help="variable holding the caller's API key (sent as "
                                                "Authorization: Bearer)")] = "HEARTH_CALLER_KEY",
    internal_token_env: Annotated[str | None, typer.Option(
        help="authenticate with the shared internal token in this variable instead of a caller key")] = None,
    caller: Annotated[str | None, typer.Option(help="with the internal token: the caller to act as "
                                              "(X-Hearth-Caller)")] = None,
    do_send: Annotated[bool, typer.Option("--send", help="send it and print the answer (else print curl)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="with --send: print status and body as JSON")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait for the answer")] = 30.0,
) -> None:
    """Sign a request as a caller (X-Timestamp, X-Nonce, X-Signature) and send it or print it as curl.

    The signing key is read from $HEARTH_SIGNING_KEY (``--key-env``), the caller's API key from
    $HEARTH_CALLER_KEY (``--caller-key-env``) or the internal token from ``--internal-token-env``. A printed
    command is valid once, within the server's signature window (5 minutes by default)."""
    method = method.upper()
    if not path.startswith("/"):
        raise typer.BadParameter("the path starts with '/' (the server is --url)", param_hint="PATH")
    body = _body(data, data_file)
    target = url.rstrip("/") + path
    try:
        signature = signed_headers(_secret(key_env, "signing key"), method, target, body)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="PATH") from None
    if internal_token_env:
        auth_name = "X-Internal-Token"
        auth_value = _secret(internal_token_env, "internal token")
        auth_shell = f'"X-Internal-Token: ${internal_token_env}"'
    else:
        auth_name = "Authorization"
        auth_value = "Bearer " + _secret(caller_key_env, "caller's API key")
        auth_shell = f'"Authorization: Bearer ${caller_key_env}"'
    headers = {auth_name: auth_value, **signature}
    if caller:
        headers["X-Hearth-Caller"] = caller
    if body:
        headers["Content-Type"] = content_type
    if not do_send:
        _print_curl(method, target, headers, body=body, data_file=data_file, auth=(auth_name, auth_shell))
        return
    try:
        answer = send(method, target, headers=headers, body=body or None, timeout=timeout)
    except ApiError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    try:
        payload: object = answer.json()
    except ValueError:
        payload = answer.body.decode("utf-8", "replace")
    if as_json:
        print_json({"status": answer.status, "body": payload})
    else:
        console(stderr=True).print(f"HTTP {answer.status}")
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False) if not isinstance(payload, str) else payload)
    if answer.status >= 400:
        raise typer.Exit(EXIT_REFUSED)


def _print_curl(method: str, target: str, headers: dict[str, str], *, body: bytes, data_file: Path | None,
                auth: tuple[str, str]) -> None:
    parts = [f"curl --path-as-is -X {method} {shlex.quote(target)}"]
    for name, value in headers.items():
        parts.append(f"-H {auth[1]}" if name == auth[0] else f"-H {shlex.quote(f'{name}: {value}')}")
    if data_file is not None:
        parts.append(f"--data-binary @{shlex.quote(str(data_file))}")
    elif body:
        parts.append(f"--data-raw {shlex.quote(body.decode('utf-8'))}")
    typer.echo(" \\\n  ".join(parts))
