"""Loaded by every Python process the harness starts (its directory is put on PYTHONPATH).

It installs the scoped transformer_engine stand-in so ``import megatron.bridge`` works on CPU,
the scoped refusal of CUDA extension builds while megatron-core modules import
(:mod:`harness.suite.standins.cuda_ext`), and, with ``HARNESS_IMPORT_MODE=light``, the light-import
finder (package ``__init__`` files of ``megatron.bridge`` are not executed; see
:mod:`harness.suite.standins.light`).
"""

try:
    from harness.suite.standins import te as _te

    _te.install()
    from harness.suite.standins import cuda_ext as _cuda_ext

    _cuda_ext.install()
except Exception as _exc:  # never break the interpreter start
    import sys as _sys

    print(f"harness sitecustomize: stand-ins not installed: {_exc}", file=_sys.stderr)

try:
    import os as _os

    from harness.contract import Env as _Env

    if _os.environ.get(_Env.IMPORT_MODE) == "light":
        from harness.suite.standins import light as _light

        _light.install()
except Exception as _exc:
    import sys as _sys

    print(f"harness sitecustomize: light import not installed: {_exc}", file=_sys.stderr)
