"""Task types for tests and benchmarks (``HEARTH_TASK_MODULES=hearth.testing.task_types:register``).

* ``test.noop`` — returns at once (engine overhead only);
* ``test.echo`` — returns ``{"echo": payload}`` (a workflow test sees what a step was given);
* ``test.sleep`` — waits ``payload.ms`` milliseconds, checking for cancel every 50 ms, and reports progress;
* ``test.record`` — appends ``payload.tag`` and the attempt to the file ``payload.path`` (one line per run,
  so a crash test can count executions) and then waits ``payload.ms``;
* ``test.unsafe_sleep`` — ``test.sleep`` marked not safe to repeat (an attempt lost with its worker is held).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hearth.tasks.types import TaskContext, TaskType, TaskTypes


async def noop(ctx: TaskContext) -> dict[str, Any]:
    return {}


async def echo(ctx: TaskContext) -> dict[str, Any]:
    return {"echo": ctx.payload}


async def sleep(ctx: TaskContext) -> dict[str, Any]:
    ms = float(ctx.payload.get("ms", 0))
    loop = asyncio.get_running_loop()
    until = loop.time() + ms / 1000
    ctx.progress(1, "sleeping")
    while (left := until - loop.time()) > 0:
        await asyncio.sleep(min(0.05, left))
        ctx.check_cancel()
    return {"slept_ms": ms}


async def record(ctx: TaskContext) -> dict[str, Any]:
    line = f"{ctx.payload['tag']} {ctx.task.attempt} {os.getpid()}\n"
    with open(ctx.payload["path"], "a", encoding="utf-8") as fh:  # noqa: ASYNC230 - one short append
        fh.write(line)
    await sleep(ctx)
    return {"tag": ctx.payload["tag"]}


def register(types: TaskTypes) -> None:
    queue = os.environ.get("HEARTH_TEST_TASK_QUEUE", "ai.default")
    types.register(TaskType("test.noop", noop, queue=queue))
    types.register(TaskType("test.echo", echo, queue=queue))
    types.register(TaskType("test.sleep", sleep, queue=queue))
    types.register(TaskType("test.record", record, queue=queue))
    types.register(TaskType("test.unsafe_sleep", sleep, queue=queue, repeat_safe=False))
