"""Golden files, split the way syrupy and pytest-regressions split them; the ground floor's part.

* :mod:`serializer` turns Python/torch/numpy values into a canonical JSON tree (+ arrays);
* :mod:`storage` reads and writes one golden file per case (JSON, optional ``.npz`` sidecar),
  versioned, atomically, never silently, and the review of a staged value beside it;
* :mod:`training` names what a change between two values does to what trains.

The comparator (:mod:`harness.suite.compare`) is the suite process's: it compares while the case
runs, and writes its review for ``harness fixtures record`` to read.
"""
