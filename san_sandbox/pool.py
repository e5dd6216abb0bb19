"""Several reference workers, each in a process of its own, driven phase by phase.

`WorkerPool.drain()` tells every worker to handle what it has heard until its channel is quiet
and waits for all of them: a test's "work" phase. Between phases the workers keep listening
(notifications queue up), but do nothing, so recovery runs against a still database.
"""

import multiprocessing
from dataclasses import dataclass

from batch_pipeline.san.database import create_san_engine
from san_sandbox.events import open_job_events
from san_sandbox.faults import Faults
from san_sandbox.worker import ReferenceWorker, WorkerStats


@dataclass(frozen=True)
class WorkerSettings:
    database_url: str
    dispatcher: str  # pg_notify | redis_stream | none
    faults: Faults
    redis_url: str = "redis://127.0.0.1:6379/0"
    timezone: str | None = None
    backlog: bool = False  # also take the PENDING jobs that exist when the worker starts
    backlog_newest_first: bool = False


def build_worker(settings: WorkerSettings, name: str):

    engine = create_san_engine(settings.database_url)
    events = open_job_events(
        settings.dispatcher, engine, redis_url=settings.redis_url, consumer=name
    )
    return ReferenceWorker(engine, events, settings.faults, settings.timezone)


def _worker_main(settings: WorkerSettings, name: str, commands) -> None:
    worker = build_worker(settings, name)
    commands.send("listening")
    take_backlog = settings.backlog
    while True:
        command, argument = commands.recv()
        if command == "stop":
            worker.events.close()
            worker.engine.dispose()
            commands.send("stopped")
            return
        try:
            worker.stats = WorkerStats()
            if take_backlog:
                worker.take_backlog(newest_first=settings.backlog_newest_first)
                take_backlog = False
            commands.send(("ok", worker.drain(idle_s=argument, reset=False).as_dict()))
        except Exception as error:  # report, so the pool fails loudly instead of hanging
            commands.send(("error", f"{name}: {type(error).__name__}: {error}"))


class WorkerPool:
    def __init__(self, settings: WorkerSettings, processes: int = 4):
        context = multiprocessing.get_context("spawn")  # no inherited connections or threads
        self._pipes, self._processes = [], []
        for index in range(processes):
            parent, child = context.Pipe()
            process = context.Process(
                target=_worker_main, args=(settings, f"worker-{index}", child), daemon=True
            )
            process.start()
            self._pipes.append(parent)
            self._processes.append(process)
        # every worker listens before anything is announced
        for index in range(len(self._pipes)):
            self._receive(index, timeout_s=120)

    def drain(self, idle_s: float = 0.3) -> WorkerStats:
        for pipe in self._pipes:
            pipe.send(("drain", idle_s))
        total = WorkerStats()
        errors = []
        for index in range(len(self._pipes)):
            status, payload = self._receive(index, timeout_s=None)
            if status == "error":
                errors.append(payload)
            else:
                total.add(WorkerStats(**payload))
        if errors:
            raise RuntimeError("sandbox worker failed: " + "; ".join(errors))
        return total

    def _receive(self, index: int, timeout_s: float | None):
        pipe, process = self._pipes[index], self._processes[index]
        while not pipe.poll(1.0):
            if not process.is_alive():
                raise RuntimeError(f"sandbox worker-{index} exited with code {process.exitcode}")
            if timeout_s is not None:
                timeout_s -= 1.0
                if timeout_s <= 0:
                    raise RuntimeError(f"sandbox worker-{index} did not answer in time")
        try:
            return pipe.recv()
        except EOFError:
            raise RuntimeError(
                f"sandbox worker-{index} exited with code {process.exitcode}"
            ) from None

    def close(self) -> None:
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            if process.is_alive():
                try:
                    pipe.send(("stop", None))
                    pipe.poll(10) and pipe.recv()
                except (BrokenPipeError, EOFError, OSError):
                    pass
            process.join(10)
            if process.is_alive():
                process.kill()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
