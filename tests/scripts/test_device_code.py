"""scripts/device_code.py on synthetic ELF files: the entries it reads from .nv_fatbin sections
and the exit status of its checks (a missing arch, PTX or sm_90a code fails)."""
import os
import struct
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]
ENTRY_HEADER = 64


def fatbin(entries):
    """A fat binary container of (kind, arch, flags) entries with 16-byte payloads."""
    body = b""
    for kind, arch, flags in entries:
        header = bytearray(ENTRY_HEADER)
        struct.pack_into("<HHII", header, 0, kind, 0x101, ENTRY_HEADER, 16)
        struct.pack_into("<I", header, 28, arch)
        struct.pack_into("<Q", header, 40, flags)
        body += bytes(header) + bytes(16)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf(section):
    """An ELF64 file with sections: null, .nv_fatbin (`section`), .shstrtab."""
    names = b"\0.nv_fatbin\0.shstrtab\0"
    data_at = 64
    names_at = data_at + len(section)
    shoff = names_at + len(names)
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)
    shdr = lambda name, offset, size: struct.pack(  # noqa: E731 (an ELF64 section header)
        "<IIQQQQIIQQ", name, 1, 0, 0, offset, size, 0, 0, 1, 0)
    tables = bytes(64) + shdr(1, data_at, len(section)) + shdr(12, names_at, len(names))
    return bytes(header) + section + names + tables


def run(entries, *args):
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
        f.write(elf(bytes(8) + fatbin(entries)))  # padding before the container is skipped
    try:
        r = subprocess.run([sys.executable, SCRIPT, f.name, *args], capture_output=True,
                           text=True)
    finally:
        os.unlink(f.name)
    return r.returncode, r.stdout


def main():
    units = [(2, 80, 0x11), (2, 90, 0x11), (1, 90, 0x8011)]
    full = units * 3 + [(2, 90, 0x100011)]  # three translation units, one sm_90a kernel
    code, out = run(full, "--expect", "80;90", "--ptx", "90", "--arch-specific", "90")
    assert code == 0, out
    assert "sass  sm_80: 3 translation units" in out and "sass  sm_90a: 1" in out, out
    assert "ptx   sm_90: 3" in out, out
    code, out = run(full, "--expect", "80;86;90")
    assert code == 1 and "sm_86 native code (0 of 3 units)" in out, out
    code, out = run(units * 2 + [(2, 80, 0x11)], "--expect", "80;90")  # a unit without sm_90
    assert code == 1 and "sm_90 native code (2 of 3 units)" in out, out
    code, out = run(units, "--ptx", "100")
    assert code == 1 and "compute_100 PTX" in out, out
    code, out = run(units, "--arch-specific", "90")
    assert code == 1 and "sm_90a native code" in out, out
    print("device_code.py: 5 checks passed")


if __name__ == "__main__":
    main()
