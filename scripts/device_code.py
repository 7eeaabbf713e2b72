#!/usr/bin/env python3
"""The device code a shared library embeds: its CUDA fat binaries' entries by kind (native code,
"sass", or PTX) and compute capability, counted per arch (one entry per CUDA translation unit
and arch), read from the ELF file's .nv_fatbin section without the CUDA toolkit (where it is
installed, `cuobjdump --list-elf LIB` lists the same native code).

    python3 scripts/device_code.py build/lib/libgna.so
    python3 scripts/device_code.py LIB --expect "80;86;89;90;100;120" --ptx 120 --arch-specific 90

--expect: every listed arch must have native code in every translation unit that has native
code (for any arch); --ptx: PTX for this arch must be present; --arch-specific: native
code built for the arch-specific variant (sm_90a) must be present. Exits 1 when one is not.
"""
import argparse
import collections
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "sass"}
# Entry flags: bit 20 marks code built for an arch-specific target (sm_90a).
ARCH_SPECIFIC = 1 << 20


def sections(data, wanted):
    """(offset, size) of the ELF64 sections named `wanted`."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, _, _, _, offset, size in headers:
        end = data.index(b"\0", names + name)
        if data[names + name:end].decode() == wanted:
            yield offset, size


def entries(data):
    """(kind, arch, arch_specific) of every fat binary entry in the .nv_fatbin sections."""
    for offset, size in sections(data, ".nv_fatbin"):
        pos, end = offset, offset + size
        while pos + 16 <= end:
            magic, _, header, payload = struct.unpack_from("<IHHQ", data, pos)
            if magic != FATBIN_MAGIC:  # padding between the containers
                pos += 8
                continue
            entry, stop = pos + header, pos + header + payload
            while entry < stop:
                kind, _, entry_header, padded = struct.unpack_from("<HHII", data, entry)
                arch = struct.unpack_from("<I", data, entry + 28)[0]
                flags = struct.unpack_from("<Q", data, entry + 40)[0]
                yield KINDS.get(kind, str(kind)), arch, bool(flags & ARCH_SPECIFIC)
                entry += entry_header + padded
            pos = stop


def arch_list(text):
    return [int(a) for a in text.replace(",", ";").split(";") if a.strip()]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("library")
    p.add_argument("--expect", type=arch_list, default=[])
    p.add_argument("--ptx", type=int, default=None)
    p.add_argument("--arch-specific", type=int, default=None)
    a = p.parse_args(argv)
    with open(a.library, "rb") as f:
        data = f.read()
    counts = collections.Counter(entries(data))
    for (kind, arch, specific), n in sorted(counts.items()):
        print(f"{kind:5s} sm_{arch}{'a' if specific else ''}: {n} translation units")
    missing = []
    if a.expect:
        units = max([n for (kind, _, specific), n in counts.items()
                     if kind == "sass" and not specific] or [0])
        missing += [f"sm_{x} native code ({counts[('sass', x, False)]} of {units} units)"
                    for x in a.expect if units == 0 or counts[("sass", x, False)] != units]
    if a.ptx is not None and not counts[("ptx", a.ptx, False)]:
        missing.append(f"compute_{a.ptx} PTX")
    if a.arch_specific is not None and not counts[("sass", a.arch_specific, True)]:
        missing.append(f"sm_{a.arch_specific}a native code")
    if missing:
        print("missing: " + ", ".join(missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
