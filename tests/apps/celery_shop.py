"""A Celery app whose refund task is guarded by writesafe, for a test that kills its worker.

    celery -A tests.apps.celery_shop worker --pool solo -Q QUEUE

Configured from the environment: WRITESAFE_SHOP_WORK (the work folder; the ledger is a SQLite
file in it, the downstream's refunds are lines of `WORK/refunds`), WRITESAFE_CELERY_BROKER and
WRITESAFE_CELERY_PREFIX (the test's own Redis key prefix) and WRITESAFE_CELERY_QUEUE. While the
file `WORK/hang` exists, the task hangs after its effect, as a worker does that dies mid-task.
The bound `charge` task writes its effects to `WORK/charges`; every delivery a worker finishes
is a line of `WORK/delivered`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from celery import Celery, Task
from celery.signals import task_postrun

from writesafe import Found, LookupOperation, NotFound, WriteSafe
from writesafe.contrib.celery import idempotent_task

WORK = Path(os.environ["WRITESAFE_SHOP_WORK"])
VISIBILITY_TIMEOUT = 3  # seconds before Redis hands an unacknowledged task to another worker


def broker_options(prefix: str) -> dict[str, Any]:
    return {
        "global_keyprefix": prefix,
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }


app = Celery("celery_shop", broker=os.environ["WRITESAFE_CELERY_BROKER"])
app.conf.update(
    task_acks_late=True,  # acknowledge after the task: a worker that dies leaves it to another
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    task_default_queue=os.environ["WRITESAFE_CELERY_QUEUE"],
    worker_prefetch_multiplier=1,
    broker_transport_options=broker_options(os.environ["WRITESAFE_CELERY_PREFIX"]),
    broker_connection_retry_on_startup=True,
)
ws = WriteSafe(f"sqlite+aiosqlite:///{WORK / 'ledger.db'}", lease_seconds=1.0)


def find_refund(operation: LookupOperation) -> Found | NotFound:
    """Ask the downstream (the refunds file) whether the refund under this key exists."""
    path = WORK / "refunds"
    refunds = path.read_text().split() if path.exists() else []
    if operation.key in refunds:
        return Found({"refund_id": f"r-{operation.key}"})
    return NotFound()


@app.task(name="refund")
@idempotent_task(ws, lookup=find_refund, settle_after=0)
def refund(order_id: str) -> dict[str, Any]:
    operation = WriteSafe.current_operation()
    assert operation is not None
    with (WORK / "refunds").open("a") as refunds:
        refunds.write(f"{operation.key}\n")
    (WORK / f"refunded-{os.getpid()}").touch()
    while (WORK / "hang").exists():  # the answer never comes: this worker is killed here
        time.sleep(0.05)
    return {"refund_id": f"r-{operation.key}"}


@app.task(name="charge", bind=True)
@idempotent_task(ws)
def charge(self: Task[Any, Any], order_id: str) -> dict[str, Any]:
    """A bound task: the body gets the task (its request), the fingerprint only `order_id`."""
    with (WORK / "charges").open("a") as charges:
        charges.write(f"{self.request.id} {order_id}\n")
    return {"charge_id": f"c-{order_id}", "task_id": self.request.id}


@task_postrun.connect
def delivered(task_id: str, **_: Any) -> None:
    with (WORK / "delivered").open("a") as lines:
        lines.write(f"{task_id}\n")
