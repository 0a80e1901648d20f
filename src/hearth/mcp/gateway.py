"""The MCP gateway: one virtual MCP server in front of the registered upstream servers (seed 004 §5).

The route (:mod:`hearth.api.mcp`) authenticates the caller and validates the message (steps 1 and 2); this
service authorizes and re-forwards (steps 3 and 4):

* ``tools/list`` asks every enabled server the caller may use anything of (through its pooled session),
  keeps the tools the policy shows this caller, and names them ``<server>__<tool>``. No tool at all is an
  error (``mcp_no_tools``), never a silent empty list: an agent handed no tools would go on without them.
* ``tools/call`` resolves the name, decides the policy on the caller, the tool and the arguments — on
  every call, whatever was listed —, takes the caller's per-server limits in the state backend (the same
  atomic admission as model calls, :func:`hearth.gateway.caller_admission.admit_caller`, with a signed
  request's nonce claimed in the same step), and sends a *new* request on the pooled session, which
  carries Hearth's credential for that server and nothing of the caller's. Every call, allowed or not,
  is audited (:mod:`hearth.mcp.audit`).

The server snapshot is reloaded when the registry version changes (``hearth apply`` bumps it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.gateway.budget_ledger import BudgetLedger
from hearth.gateway.caller_admission import (
    AdmissionLimits,
    CallerAdmission,
    CallerGrant,
    admit_caller,
    finish_caller,
)
from hearth.gateway.state_recovery import StateRecovery
from hearth.mcp.audit import McpAuditWriter, McpCallRecord, argument_digest
from hearth.mcp.metrics import observe_call
from hearth.mcp.protocol import RpcError
from hearth.mcp.server_store import UpstreamServer, load_mcp_servers
from hearth.mcp.session_pool import SessionPool, UpstreamFailure, UpstreamRpcError
from hearth.observability.logging import get_logger
from hearth.registry.key_vault import KeyVault
from hearth.registry.mcp_config import TOOL_SEPARATOR
from hearth.registry.snapshot import Caller
from hearth.state.base import Scope, StateBackend

log = get_logger("hearth.mcp.gateway")

_OUTCOMES = {"mcp_tool_denied": "denied", "mcp_tool_not_found": "not_found", "mcp_upstream_error": "upstream_error"}


def _outcome(code: str) -> str:
    if code.endswith("_exceeded"):
        return "rate_limited"
    return _OUTCOMES.get(code, "refused")


@dataclass(slots=True, frozen=True)
class McpAdmission:
    """What the gateway needs of the process: the state backend and ledger for limits, their settings."""

    state: StateBackend
    ledger: BudgetLedger
    recovery: StateRecovery
    limits: AdmissionLimits


class McpGateway:
    def __init__(self, engine: AsyncEngine, vault: KeyVault, admission: McpAdmission, *, audit: McpAuditWriter,
                 http: aiohttp.ClientSession, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._vault = vault
        self._admission = admission
        self.audit = audit
        self.pool = SessionPool(http)
        self.servers: dict[str, UpstreamServer] = {}
        self._clock = clock
        self._version: int | None = None
        self._reload_lock = asyncio.Lock()

    async def start(self, registry_version: int) -> None:
        await self.refresh(registry_version)
        self.audit.start()

    async def refresh(self, registry_version: int) -> None:
        """Reload the servers if the registry changed since they were loaded (one int compare otherwise)."""
        if registry_version == self._version:
            return
        async with self._reload_lock:
            if registry_version == self._version:
                return
            self.servers = await load_mcp_servers(self._engine, self._vault)
            for server in self.servers.values():
                if server.enabled:
                    self.pool.get(server)  # keeps a session whose connection did not change, else replaces it
            self._version = registry_version

    async def list_tools(self, caller: Caller) -> list[dict[str, Any]]:
        servers = [s for s in self.servers.values() if s.enabled and s.policy.may_allow(caller.name)]
        answers = await asyncio.gather(*(self.pool.get(s).list_tools() for s in servers), return_exceptions=True)
        tools: list[dict[str, Any]] = []
        failed: list[str] = []
        for server, answer in zip(servers, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, UpstreamRpcError | UpstreamFailure):
                    raise answer
                log.warning("mcp_upstream_list_failed", server=server.name, error=type(answer).__name__)
                failed.append(server.name)
                continue
            for tool in answer:
                name = tool.get("name")
                if isinstance(name, str) and server.policy.lists(caller.name, name):
                    tools.append({**tool, "name": f"{server.name}{TOOL_SEPARATOR}{name}"})
        if not tools:
            raise HearthError("mcp_no_tools", "No MCP tool is available to this caller"
                              + (f" (unreachable: {', '.join(failed)})." if failed else
                                 ": the policy allows none of the registered servers' tools."),
                              details={"unreachable": failed})
        return tools

    async def call_tool(self, caller: Caller, name: str, arguments: dict[str, Any], *, request_id: str,
                        nonce: tuple[str, float] | None = None) -> dict[str, Any]:
        """The upstream's result; :class:`HearthError` for Hearth's refusals, :class:`RpcError` relaying the
        upstream's own JSON-RPC error. Audited either way."""
        started = time.perf_counter()
        prefix, separator, tool = name.partition(TOOL_SEPARATOR)
        server = self.servers.get(prefix) if separator and tool else None
        outcome, code = "ok", None
        try:
            if server is None or not server.enabled:
                raise HearthError("mcp_tool_not_found", f"No MCP tool {name[:200]!r} is offered (tools are named "
                                  f"<server>{TOOL_SEPARATOR}<tool>).")
            decision = server.policy.decide(caller.name, tool, arguments)
            if not decision.allowed:
                raise HearthError("mcp_tool_denied", f"The MCP tool policy does not allow this call: "
                                  f"{decision.reason}.", details={"tool": name[:200]})
            result = await self._forward(caller, server, tool, arguments, nonce=nonce)
            if result.get("isError") is True:
                outcome = "tool_error"
            return result
        except HearthError as exc:
            outcome, code = _outcome(exc.code), exc.code
            raise
        except RpcError as exc:
            outcome, code = "upstream_error", exc.hearth_code
            raise
        except asyncio.CancelledError:  # the caller left: the upstream may or may not have run it
            outcome, code = "cancelled", None
            raise
        except Exception as exc:
            outcome, code = "error", type(exc).__name__[:64]
            raise
        finally:
            elapsed = time.perf_counter() - started
            server_name = server.name if server is not None else None
            self.audit.submit(McpCallRecord(
                created_at=self._clock(), request_id=request_id, caller=caller.name, server=server_name, tool=name,
                args_sha256=argument_digest(arguments), outcome=outcome, error_code=code, latency_ms=elapsed * 1000))
            observe_call(server_name, outcome, elapsed)

    async def _forward(self, caller: Caller, server: UpstreamServer, tool: str, arguments: dict[str, Any], *,
                       nonce: tuple[str, float] | None) -> dict[str, Any]:
        grant = await self._admit(caller, server, nonce)
        try:
            return await self.pool.get(server).call_tool(tool, arguments)
        except UpstreamRpcError as exc:  # the upstream's JSON-RPC error: relayed, marked as the upstream's
            raise RpcError(exc.code, exc.message, hearth_code="mcp_upstream_error", status=200,
                           data={"server": server.name}) from exc
        except UpstreamFailure as exc:
            log.warning("mcp_upstream_call_failed", server=server.name, error=str(exc))
            raise HearthError("mcp_upstream_error", f"The upstream MCP server {server.name!r} could not be reached "
                              "or failed.", details={"server": server.name}) from exc
        finally:
            if grant is not None:
                a = self._admission
                await finish_caller(a.state, a.ledger, grant, None, actual_amounts=())

    async def _admit(self, caller: Caller, server: UpstreamServer,
                     nonce: tuple[str, float] | None) -> CallerGrant | None:
        scopes: tuple[Scope, ...] = ()
        if server.caller_rpm or server.caller_concurrency:
            scopes = (Scope(f"mcp:{server.name}:{caller.name}", server.caller_concurrency, server.caller_rpm),)
        if not scopes and nonce is None:
            return None
        a = self._admission
        return await admit_caller(a.state, a.ledger, a.recovery,
                                  CallerAdmission(scopes=scopes, budgets=(), charges=(), tokens=0, nonce=nonce),
                                  limits=a.limits)

    def sessions_opened(self) -> dict[str, int]:
        """Upstream sessions initialized per server since start (a pooling check)."""
        return self.pool.opened()

    async def close(self) -> None:
        await self.pool.close()
        await self.audit.stop()
