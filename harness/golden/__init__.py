"""Golden fixtures, split the way syrupy and pytest-regressions split them.

* :mod:`serializer` turns Python/torch/numpy values into a canonical JSON tree (+ arrays);
* :mod:`storage` reads and writes one golden file per case (JSON, optional ``.npz`` sidecar),
  versioned, atomically, never silently;
* :mod:`compare` compares an obtained tree to a golden tree with per-field tolerances and
  produces a readable and a structured diff.
"""
