"""AiService.closed(), which the gRPC server's stop awaits: it must return even when a stream's closing task
has just ended and its done callback (which drops it from the set) is still queued in the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

from hearth.grpc_api.ai_service import AiService


def test_closed_returns_when_a_closing_task_ended_but_its_callback_is_still_queued() -> None:
    returned = threading.Event()

    async def scenario() -> None:
        service = AiService(cast(Any, None))
        closing = asyncio.get_running_loop().create_task(asyncio.sleep(0))
        service._closing.add(closing)
        await asyncio.sleep(0.01)  # the task has ended ...
        closing.add_done_callback(service._closing.discard)  # ... and this callback is only queued
        await service.closed()
        returned.set()

    # in a thread: a closed() that spins without yielding would starve its own event loop for good
    thread = threading.Thread(target=asyncio.run, args=(scenario(),), daemon=True)
    thread.start()
    assert returned.wait(5), "AiService.closed() spun on a finished task instead of letting its callback run"
