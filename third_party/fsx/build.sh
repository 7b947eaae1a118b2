#!/bin/sh
# Build fsx from the vendored source (see README.md):
#
#   third_party/fsx/build.sh OUT_DIR     # makes OUT_DIR/fsx
#
# Applies patches/ to a copy of fsx.c and compiles it with xfstests' own
# flags, less what build-essential lacks. Needs cc ($CC if set) and patch.
set -eu
src=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out"
tmp=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$src/fsx.c" "$tmp/fsx.c"
for p in "$src"/patches/*.patch; do
  patch -s -p1 -d "$tmp" < "$p"
done
${CC:-cc} -O2 -g -std=gnu11 -funsigned-char -fno-strict-aliasing -Wall \
  -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -include getopt.h \
  -I "$src" -o "$tmp/fsx" "$tmp/fsx.c"
mv -f "$tmp/fsx" "$out/fsx"
