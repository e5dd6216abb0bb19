"""The SAN sandbox: the SAN application and its workers, played against a real database, with
faults on purpose, so batch_pipeline's recoveries have something real to heal.

    app.save_scraps            the load generator: scrap, then its jobs, then the event
    worker.ReferenceWorker     a SAN worker that keeps the contract (README: worker authors)
    pool.WorkerPool            several workers, each in its own process
    faults.Faults              the fault knobs, each a probability
    time_travel.age_database   shift every timestamp back, instead of waiting 30 minutes
    live.run_live              a living SAN for `make run`
    ui.run_ui                  `make run`: the UI and the metrics beside the living sandbox

A package of its own beside the product (never in its wheel, never imported by it); the
experiments that use it are the benchmark's (bench/convergence.py, bench/time_to_heal.py).

CLI: `python -m san_sandbox --help`. It only ever writes to a database that
`init_sandbox` made (the table san_sandbox marks it): never to a real SAN database.
"""

from san_sandbox.app_schema import NotASandbox, init_sandbox, require_sandbox
from san_sandbox.faults import Faults

__all__ = ["Faults", "NotASandbox", "init_sandbox", "require_sandbox"]
