"""turnstream-worker: a client of turnstream's worker API (contract v1.3) for Python 3.9+, with
the standard library only. Claim turns (of some agents or all), stream their output through a
turn handle (batched, retried with the same seq, lease renewed), ask a person or the browser
and wait for the answer (request_approval, request_client_tool, ask), call another agent and
wait for its turn's end (call), and end them; sync (threads) and asyncio.

The threaded client is in `sync`, the asyncio one in `aio`, what both share in `_common`, the
asks' bookkeeping in `asks` and the calls' events in `calls`; every name is imported from here.
"""

from ._common import CallRefused, TurnSuspended, WorkerApiError
from .aio import AsyncTurn, AsyncWorkerClient, run_worker_async
from .asks import Asks, ContinuationMismatch, request_event
from .sync import Turn, WorkerClient, run_worker

__all__ = [
    "CallRefused",
    "ContinuationMismatch",
    "TurnSuspended",
    "WorkerApiError",
    "WorkerClient",
    "Turn",
    "run_worker",
    "AsyncWorkerClient",
    "AsyncTurn",
    "run_worker_async",
]
