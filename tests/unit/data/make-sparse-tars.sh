#!/usr/bin/env bash
# Makes the sparse tar fixtures of tests/unit/test_tarstream.c and
# test_untar.c with GNU tar (these were made by GNU tar 1.34): a 6 GiB file
# with 4 bytes of data at 1 MiB in every sparse dialect, and one with seven
# data regions (more than an old GNU 'S' header holds, so extension blocks
# follow it). The archives are cut after their two end blocks.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
truncate -s 6G big.img
printf data | dd of=big.img bs=1 seek=1048576 conv=notrunc status=none
truncate -s 6G ext.img
for i in 1 2 3 4 5 6 7; do printf x | dd of=ext.img bs=1 seek=$((i * 1048576)) conv=notrunc status=none; done
tar --sparse --format=posix --sparse-version=0.0 -cf sparse-pax00.tar big.img
tar --sparse --format=posix --sparse-version=0.1 -cf sparse-pax01.tar big.img
tar --sparse --format=posix --sparse-version=1.0 -cf sparse-pax10.tar big.img
tar --sparse --format=gnu -cf sparse-gnu.tar big.img
tar --sparse --format=gnu -cf sparse-gnu-ext.tar ext.img
for f in sparse-*.tar; do
  python3 - "$f" "$out/$f" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
off = 0
while b[off:off + 512] != bytes(512):
    h = b[off:off + 512]
    size = int(h[124:136].strip(b"\0 ") or b"0", 8)
    ext = h[156:157] == b"S" and h[482] != 0
    off += 512
    while ext:
        ext = b[off + 504] != 0
        off += 512
    off += (size + 511) // 512 * 512
open(sys.argv[2], "wb").write(b[:off + 1024])
PY
done
