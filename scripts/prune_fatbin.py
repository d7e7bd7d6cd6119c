"""Zero every cubin in a shared library's ``.nv_fatbin`` section that is not for one SM arch.

Why: Transformer Engine's core wheel ships ``libtransformer_engine.so`` with cubins for eight
architectures (343 MB, 276 MB zipped), too big to carry to an offline GPU machine (64 MiB a call).
A GPU runs only the cubins of its own major arch, so the others are dead weight there. Zeroing
them in place keeps every offset, size and symbol of the file (nothing is relinked), and the file
then compresses to the kept code: 24 MB with ``xz`` for sm_90. Entry headers stay, so the runtime
still sees (and skips) the other arches; PTX entries are kept as they are.

    python scripts/prune_fatbin.py LIB.so 90

Layout read (CUDA fatbin, little endian): containers ``<magic 0xBA55ED50 u32, version u16,
header size u16, payload size u64>``, each holding entries ``<kind u16 (1 PTX, 2 ELF), version u16,
header size u32, payload size u64, ..., arch u32 at +28>``.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from collections import Counter

MAGIC = 0xBA55ED50
ELF = 2


def fatbin_section(path: str) -> tuple[int, int]:
    """File offset and size of ``.nv_fatbin`` (readelf, so no ELF library is needed)."""
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"\.nv_fatbin\s+PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", out)
    if m is None:
        sys.exit(f"prune_fatbin: {path} has no .nv_fatbin section")
    return int(m.group(1), 16), int(m.group(2), 16)


def prune(data: bytearray, start: int, size: int, keep: int) -> Counter[tuple[int, int]]:
    """Zero, in place, the payload of every ELF entry whose arch is not ``keep``; bytes per (kind, arch)."""
    seen: Counter[tuple[int, int]] = Counter()
    pos, end = start, start + size
    while pos < end:
        magic, _version, header, payload = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:  # alignment padding between containers
            pos += 8
            continue
        entry, stop = pos + header, pos + header + payload
        while entry < stop:
            kind, _v, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            seen[(kind, arch)] += entry_size
            if kind == ELF and arch != keep:
                body = entry + entry_header
                data[body : body + entry_size] = bytes(entry_size)
            entry += entry_header + entry_size
        pos = stop
    return seen


def main() -> None:
    path, keep = sys.argv[1], int(sys.argv[2])
    start, size = fatbin_section(path)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    seen = prune(data, start, size, keep)
    if not any(kind == ELF and arch == keep for kind, arch in seen):
        sys.exit(f"prune_fatbin: {path} has no cubin for sm_{keep}; nothing written")
    with open(path, "wb") as f:
        f.write(data)
    for (kind, arch), n in sorted(seen.items()):
        state = "kept" if kind != ELF or arch == keep else "zeroed"
        print(f"{'elf' if kind == ELF else 'ptx'} sm_{arch}: {n / 1e6:.1f} MB {state}")


if __name__ == "__main__":
    main()
