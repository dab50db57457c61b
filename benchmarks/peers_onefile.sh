#!/usr/bin/env bash
# FA4 and quack for the GPU machine in ONE device call (../shared/peers/cute_wheels.sh needs
# two in a row, and the machine is released after 30 s idle). Run it in the project root
# after cute_wheels.sh made .peersA and .peersB: it unpacks every wheel into one tree (what
# `pip install --target` does for these wheels: no scripts, no .data), drops what a run
# does not load (aarch64/QNX stubs; tvm_ffi imports its libtvm_ffi_testing.so: keep it)
# and packs it as .peers1/peers.tar.xz with xz's x86 filter: ~57 MB (the runtime wheel alone
# is 92 MB zipped), under the 64 MiB a call carries. Takes ~10 min of one core.
#
# on the GPU machine, with the archive carried (e.g. copied into the staged tree):
#   mkdir -p /tmp/peers && tar xJf peers.tar.xz -C /tmp/peers
# then, in Python: import site; site.addsitedir("/tmp/peers")   (benchmarks/peers.py does)
set -euo pipefail
out=.peers1 tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out" "$tmp/site"
ex=$(git rev-parse --git-path info/exclude)
grep -qxF "/$out/" "$ex" 2>/dev/null || echo "/$out/" >> "$ex"
cat .peersA/big.part.aa .peersB/big.part.ab > "$tmp/$(cat .peersB/name)"
for w in .peersA/*.whl "$tmp"/*.whl; do unzip -q -o "$w" -d "$tmp/site"; done
rm -f "$tmp/site/tvm_ffi/3rdparty/libbacktrace/Isaac.Newton-Opticks.txt"
rm -rf "$tmp/site/nvidia_cutlass_dsl/cu12/lib/stubs"
tar cf - -C "$tmp/site" . | xz --x86 --lzma2=preset=9e,dict=256MiB -T1 > "$out/peers.tar.xz"
ls -la "$out/peers.tar.xz"
