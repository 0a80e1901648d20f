"""Admin API for operating Hearth (``HEARTH_ADMIN_TOKEN``): the task queues at a glance, and a test call to one
endpoint.

``GET /api/v1/admin/queues`` is :func:`hearth.observability.queue_report.queue_report`;
``POST /api/v1/admin/endpoints/{name}/test`` is :func:`hearth.gateway.endpoint_test_call.run_endpoint_test` —
the same functions the console's queues and endpoints pages call. A test that reached a failing upstream is still a
200 (the test ran; ``data.ok`` is false and ``data.status`` the upstream's answer); a second test of the same
endpoint within a minute is a 429 ``endpoint_test_too_soon`` with ``Retry-After``.
"""

from __future__ import annotations

import time

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES, OK, ErrorEnvelope
from hearth.api.deps import request_id, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.path_names import register_any_name
from hearth.api.route_defaults import api_router
from hearth.gateway.endpoint_test_call import run_endpoint_test
from hearth.observability.queue_report import queue_report
from hearth.registry.names import check_name

register_any_name()
router = api_router(prefix="/api/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


@router.get("/queues", summary="Task queues: queued, waiting and running tasks, the oldest queued task's wait, "
            "and the concurrency configured per worker process", responses=OK)
async def queues(request: Request) -> Response:
    rt = runtime(request)
    return ok(request, {"queues": await queue_report(rt.engine, rt.settings.task_queues, now=time.time())})


@router.post("/endpoints/{name:anyname}/test", summary="Send one tiny chat request to an endpoint (low priority: no "
             "caller budget, no wait for a slot); at most once a minute per endpoint",
             responses={**OK, 429: {"model": ErrorEnvelope, "description": "tested less than a minute ago"}})
async def test_endpoint(name: str, request: Request) -> Response:
    check_name(name)
    result = await run_endpoint_test(runtime(request).gateway, name, operator="admin", request_id=request_id(request))
    return ok(request, result.as_dict())
