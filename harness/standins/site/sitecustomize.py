"""Loaded by every Python process the harness starts (its directory is put on PYTHONPATH).

It installs the scoped transformer_engine stand-in so ``import megatron.bridge`` works on CPU.
"""

try:
    from harness.standins import te as _te

    _te.install()
except Exception as _exc:  # never break the interpreter start
    import sys as _sys

    print(f"harness sitecustomize: stand-ins not installed: {_exc}", file=_sys.stderr)
