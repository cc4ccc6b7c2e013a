#!/bin/bash
# test_install_exports.sh — the shared library exports exactly the API of
# include/zrt.h (issue 27): every defined dynamic symbol of libzrt.so is a
# zrt_ name declared ZRT_API in zrt.h, and every such declaration is
# exported; the internal zrt_* names (pools, shards, comms...) stay hidden.
# Also the static library keeps them (the tools and tests link those).
. "$(dirname "$0")/lib.sh"
B=${ZRT_BUILD_DIR:?ZRT_BUILD_DIR (ctest sets it)}
H=${ZRT_SOURCE_DIR:?ZRT_SOURCE_DIR (ctest sets it)}/include/zrt.h
so=$(ls "$B"/lib/libzrt.so.*.*.* 2>/dev/null | head -1)
[ -n "$so" ] || fail "no $B/lib/libzrt.so.M.m.p built"
cd "$T"

nm -D --defined-only "$so" | awk '{print $NF}' | sort -u >exported.txt
grep -oE '^ZRT_API [^(]*[^a-z0-9_]zrt_[a-z0-9_]+\(' "$H" | grep -oE 'zrt_[a-z0-9_]+\($' | tr -d '(' |
  sort -u >declared.txt
n_exp=$(wc -l <exported.txt)
n_dec=$(wc -l <declared.txt)
echo "$so: $n_exp exported symbols; zrt.h: $n_dec ZRT_API functions"
[ "$n_dec" -ge 40 ] || fail "found only $n_dec ZRT_API declarations in $H (the pattern broke?)"
if grep -v '^zrt_' exported.txt >other.txt; then
  cat other.txt
  fail "libzrt.so exports $(wc -l <other.txt) names without the zrt_ prefix"
fi
if ! cmp -s declared.txt exported.txt; then
  echo "exported, not declared ZRT_API in zrt.h (internal names leaking):"
  comm -13 declared.txt exported.txt | head -20
  echo "declared ZRT_API, not exported (hidden by mistake):"
  comm -23 declared.txt exported.txt
  fail "libzrt.so's exports differ from zrt.h's API"
fi
pass "libzrt.so exports exactly zrt.h's $n_dec functions"

a=$B/lib/libzrt.a
nm --defined-only "$a" 2>/dev/null | awk '$2 == "T" {print $3}' | grep -c '^zrt_' >n_static.txt
[ "$(cat n_static.txt)" -gt "$n_dec" ] ||
  fail "libzrt.a defines only $(cat n_static.txt) global zrt_ functions (expected the internal ones too)"
pass "libzrt.a keeps the internal functions ($(cat n_static.txt) global zrt_ functions)"
echo "PASS"
