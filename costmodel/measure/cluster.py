"""Calibration on a Dask cluster: an executor whose tasks run on the cluster's workers.

``autotune calibrate --dask local`` starts a cluster of worker processes on this machine's
loopback; ``--dask tcp://host:8786`` connects to a running scheduler. Either way the
simulations go through :func:`~costmodel.measure.sample.run_on_simulator` as with ``--jobs``:
the executor is the only difference. Dask moves tasks and results by pickle, so a scheduler
is trusted with code execution on this machine and its workers (docs/calibration.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import ExitStack, contextmanager

from costmodel.exceptions import MeasurementError

__all__ = ["CONNECT_TIMEOUT", "RETRIES", "dask_executor"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds to reach a scheduler before giving up
# reruns of a task that raised; a task whose worker died is rerun by the scheduler itself (up
# to its `distributed.scheduler.allowed-failures` deaths), which the tasks' purity makes safe
RETRIES = 2
EXTRA = "pip install 'ascend-autofusion[dask]'"


@contextmanager
def dask_executor(
    address: str, *, workers: int = 0, timeout: float = CONNECT_TIMEOUT
) -> Iterator[Executor]:
    """A ``concurrent.futures`` executor on a Dask cluster, closed on exit.

    Args:
        address: ``local`` for a cluster on this machine's loopback, closed on exit; else a
            scheduler's address (``tcp://host:8786``), which must be one you trust.
        workers: with ``local``, worker processes of one thread each (0: Dask's default,
            one per core).
        timeout: seconds to wait for the scheduler at ``address``.

    Raises:
        MeasurementError: Dask's ``distributed`` is not installed, no scheduler answers at
            ``address`` within ``timeout``, or (in the block) workers kept dying on a task.
    """
    try:
        from distributed import Client, KilledWorker, LocalCluster
    except ImportError:
        raise MeasurementError(f"--dask needs Dask's distributed package: {EXTRA}") from None
    with ExitStack() as stack:
        if address == "local":
            cluster = LocalCluster(
                n_workers=workers or None,
                threads_per_worker=1,  # the simulator is pure Python: threads would share a GIL
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            stack.enter_context(cluster)
            client = stack.enter_context(Client(cluster))
            log.info("started a local Dask cluster at %s", cluster.scheduler_address)
        else:
            _handshake(address, timeout)
            try:
                client = stack.enter_context(Client(address, timeout=timeout))
            except (OSError, TimeoutError, ValueError, TypeError) as exc:
                raise MeasurementError(
                    f"cannot connect to a Dask scheduler at '{address}': {exc}"
                ) from None
        try:  # pure=False: each task gets its own key, never merged with an equal one
            yield client.get_executor(retries=RETRIES, pure=False)
        except KilledWorker as exc:
            raise MeasurementError(
                f"the Dask cluster lost every worker that ran a task, more times than its "
                f"distributed.scheduler.allowed-failures allows: {exc}"
            ) from None


def _handshake(address: str, timeout: float) -> None:
    """Connect to ``address`` (Dask retries for ``timeout`` seconds) and exchange Dask's
    handshake, all within twice ``timeout``. Dask's client bounds the connect but waits for
    the handshake's answer for as long as the other end keeps the connection open, and reads
    what another server sends as frame lengths (one that answers junk had numpy allocate
    exabytes).

    Raises:
        MeasurementError: nothing at ``address`` answers as a Dask scheduler in time.
    """
    import asyncio

    from distributed.comm import connect

    async def shake() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout), 2 * timeout)
        await comm.close()

    try:
        asyncio.run(shake())
    except TimeoutError:  # asyncio's too, since Python 3.11
        raise MeasurementError(
            f"no Dask scheduler answered at '{address}' in {2 * timeout:g} s (twice "
            "--dask-timeout: something took the connection and said nothing); check the address"
        ) from None
    except OSError as exc:  # refused, unreachable, closed (retried until the timeout)
        raise MeasurementError(
            f"cannot connect to a Dask scheduler at '{address}': {_first_line(exc)}"
        ) from None
    except Exception:  # junk for an answer: whatever Dask's reader makes of it
        raise MeasurementError(
            f"what answers at '{address}' is not a Dask scheduler (its answer is not Dask's "
            "protocol); check the address and port"
        ) from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
