"""The Celery side of ``bench/task_bench.py``: a no-op task on a Redis broker (imported by the Celery worker
and by ``bench/celery_driver.py``, both run from the bench's own venv ``bench/.venv-celery``).

Settings are the ones the issue asks for: ``acks_late=True`` (a task is acknowledged after it ran, like a
Hearth task whose row is written after it ran), ``worker_prefetch_multiplier=1`` (no prefetch beyond the
pool's slots, like a Hearth claim), results stored in Redis (the record of completion the driver reads).
"""

from __future__ import annotations

import os

from celery import Celery

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/13")
QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench")

app = Celery("hearth_bench", broker=BROKER, backend=os.environ.get("BENCH_CELERY_BACKEND", BROKER))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=QUEUE,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    task_send_sent_event=False,
)


@app.task(name="bench.noop", acks_late=True)
def noop() -> None:
    return None
