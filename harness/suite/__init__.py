"""The suite process: everything that runs beside the MB under test.

A golden-suite run is two processes. The driver (``harness.commands``, ``bisect``,
``executors``, ``nightly``, ``report``, ``repository``, and ``harness.suiterun``, which starts
suite processes and reads back what they wrote) never imports this package; this package never
imports the driver. They share only the ground floor: the records that cross the process
boundary (:mod:`harness.records`, :mod:`harness.golden` storage, :mod:`harness.caselog`), the
environment contract (:mod:`harness.contract`, :mod:`harness.target`, :mod:`harness.owners`,
:mod:`harness.versions`) and the shared vocabulary (:mod:`harness.errors`, :mod:`harness.paths`,
:mod:`harness.features`, :mod:`harness.procs`). ``tests/test_architecture.py`` keeps it so.

What lives here: the pytest plugin (:mod:`.plugin`) and what decides a case's verdict with it
(:mod:`.outcome`, :mod:`.ownership`, :mod:`.known`, :mod:`.goldenfixture`, :mod:`.compare`), the
adapters that call MB per era (:mod:`.adapters`), the oracle (:mod:`.oracle`), the CPU stand-ins
(:mod:`.standins`), the knob spy (:mod:`.knobs`), and the fork server's own loop
(:mod:`.forkloop`, :mod:`.preload`). Because it is closed, the verdict cache keys a verdict by this
package's bytes, the ground floor's and the suites' (:mod:`harness.bisect.closure`).
"""
