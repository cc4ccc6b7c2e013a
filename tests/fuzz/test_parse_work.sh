#!/usr/bin/env bash
# test_parse_work.sh — hostile config files cost work in proportion to their
# size and print a bounded report (issue 21, item 4).
#
#   * YAML nested 100k deep (flow lists, flow mappings, block "- - -"):
#     refused at level 65, naming that line and column; libyaml's scanner
#     rescans every open level per token, so loading the whole document was
#     quadratic (64k levels: 33 s) before the depth check moved onto the
#     event stream ahead of the load;
#   * JSON with 100k unknown top-level keys: accepted (DeepSpeed ignores
#     them) with exactly 10 warnings and one "and 99990 more" line, where
#     every key used to print two lines, each deduplicated against all the
#     earlier ones (quadratic);
#   * 100k unknown keys inside a section: errors, counted all, listed up to
#     the error list's cap; every key gets its did-you-mean search (one pass
#     over the schema's names, most ruled out by a character-count bound);
#   * 100k keys each given twice: every duplicate found (a hash of the keys,
#     not a scan of the earlier ones per key).
#
# What bounds the work: the outputs are counted exactly (the warning and
# error lines were what grew without bound), and every run is under
# `timeout` as a hang guard only, set far above the linear cost (each run
# takes about a second on a 2-core VM; the quadratic versions took 60 s to
# several minutes for these sizes, so a regression to quadratic work hits
# it). A wall-time budget as the pass criterion would fail on a loaded
# machine; counts do not.
set -uo pipefail
ZRT=${ZRT_BIN:-build/bin}/zrt
[ -x "$ZRT" ] || { echo "SKIP: $ZRT not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3 to write the inputs"; exit 77; }
D=$(mktemp -d "${TMPDIR:-/tmp}/zrt_parsework.XXXXXX")
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
GUARD=${ZRT_PARSE_GUARD_S:-60}
N=100000
export ZRT_CONFIG_HOME=$D/home
ZRT=$(cd "$(dirname "$ZRT")" && pwd)/zrt
cd "$D" # messages name the files as given: unknown.json

python3 - "$D" "$N" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
open(f"{d}/flow.yaml", "w").write("zero_optimization: " + "[" * n + "]" * n + "\n")
open(f"{d}/fmap.yaml", "w").write("zero_optimization: " + "{a: " * n + "1" + "}" * n + "\n")
open(f"{d}/dash.yaml", "w").write("zero_optimization:\n" + "- " * n + "x\n")
open(f"{d}/unknown.json", "w").write(json.dumps({**{"train_batch_size": 8},
                                                 **{f"unknown_key_{i}": 1 for i in range(n)}}))
open(f"{d}/section.json", "w").write(json.dumps({"zero_optimization":
                                                 {f"unknown_key_{i}": 1 for i in range(n)}}))
keys = "".join(f'"unknown_key_{i}": 1, "unknown_key_{i}": 2, ' for i in range(n))
open(f"{d}/dups.json", "w").write("{" + keys + '"train_batch_size": 8}')
PY

run() { # run NAME FILE: zrt config check FILE under the hang guard
  timeout "$GUARD" "$ZRT" config check "$2" >"$D/$1.out" 2>&1
  local rc=$?
  [ $rc = 124 ] && fail "$1: still running after the ${GUARD} s hang guard"
  echo $rc
}

for y in flow fmap dash; do
  rc=$(run "$y" "$y.yaml") || exit 1
  [ "$rc" != 0 ] || fail "$y: a YAML nested $N deep was accepted"
  grep -q "$y.yaml:[0-9]*:[0-9]*: YAML nests too deep (more than 64 levels" "$D/$y.out" ||
    { head -c 2000 "$D/$y.out"; fail "$y: no depth error"; }
  lines=$(wc -l <"$D/$y.out")
  [ "$lines" -le 3 ] || { head -20 "$D/$y.out"; fail "$y: $lines lines of output, expected <= 3"; }
  echo "ok: $y.yaml $N deep: $(head -1 "$D/$y.out")"
done

rc=$(run unknown unknown.json) || exit 1
[ "$rc" = 0 ] || { tail "$D/unknown.out"; fail "unknown top-level keys: exit $rc, expected 0"; }
w=$(grep -c "^unknown.json: warning: .*: unknown top-level key 'unknown_key_[0-9]*' ignored" "$D/unknown.out")
more=$(grep -c "^unknown.json: warning: .*: and $((N - 10)) more unknown top-level keys ignored" "$D/unknown.out")
lines=$(wc -l <"$D/unknown.out")
[ "$w" = 10 ] && [ "$more" = 1 ] && [ "$lines" -le 30 ] ||
  { head -40 "$D/unknown.out"; fail "unknown top-level keys: $w single warnings (want 10), $more summary (want 1), $lines lines (want <= 30)"; }
echo "ok: $N unknown top-level keys: 10 warnings + '$(grep -o 'and [0-9]* more unknown top-level keys' "$D/unknown.out" | head -1)', $lines lines in all"

rc=$(run section section.json) || exit 1
[ "$rc" != 0 ] || fail "unknown keys in a section were accepted"
grep -q "^$N config errors:" "$D/section.out" || { head -5 "$D/section.out"; fail "section: no '$N config errors' count"; }
bytes=$(wc -c <"$D/section.out")
[ "$bytes" -le 20000 ] || fail "section: $bytes bytes of errors for $N unknown keys, expected <= 20000"
echo "ok: $N unknown keys in a section: $(grep -c "unknown key 'zero_optimization.unknown_key_" "$D/section.out") listed, $N counted, $bytes bytes"

rc=$(run dups dups.json) || exit 1
[ "$rc" != 0 ] || fail "duplicate keys were accepted"
grep -q "^$N config errors:" "$D/dups.out" || { head -5 "$D/dups.out"; fail "dups: no '$N config errors' count"; }
grep -q "dups.json:1:[0-9]*: unknown_key_0: duplicate key (first given at line 1); keep one" "$D/dups.out" ||
  { head -5 "$D/dups.out"; fail "dups: the first duplicate is not named"; }
echo "ok: $N keys given twice: $N duplicates found"
echo PASS
