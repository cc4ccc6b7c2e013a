#!/usr/bin/env bash
# twin-mutants.sh — does the twin suite notice a missing stream/event call?
# (issue 22; not in CI: a run takes hours on a loaded 2-core machine.)
#
# For every call of zrt_backend_stream_wait_event, zrt_backend_event_record,
# zrt_backend_stream_join, zrt_backend_event_synchronize,
# zrt_backend_synchronize and the engine's wrapper zrt_engine_synchronize in
# engine/, sharding/, offload/, comm/ and examples/ (*.c; calls in comments
# and the wrapper's definition are not sites), one at a time: the call
# expression is replaced by ZRT_OK (the statement stays and compiles: a
# ZRT_CHECK of it passes, an assignment gets ZRT_OK), only the targets the
# twin suite runs are rebuilt (build-mut/, ZRT_WERROR=OFF: a mutant may leave
# a variable unused), the suite runs (ctest -L twin, its tests' own jitter
# seeds, --stop-on-failure, a timeout per test; the tests nearest the file
# first, then the rest), the source is restored.
# A mutant is killed when a test fails or times out, survived when the
# whole suite passes; a site whose file the build does not compile
# (comm_nccl.c without NCCL) is "not built" and left out of the rate.
#
# State: perf/results/twin-mutants.tsv, one row per site finished (file,
# line, call, result, test, seconds). The script is resumable: a site
# already in the file is skipped (delete its row to run it again; line
# numbers are of the commit named in the file's header, a changed tree
# starts a new file). After every site it rewrites docs/twin-mutants.md
# (table and kill rate; the survivors' explanations are kept in
# docs/engine.md, "Mutation run"). Each mutant's ctest output is kept in
# build-mut/mutant-logs/.
#
# Usage: nice -n 19 scripts/twin-mutants.sh [--list] [--limit N] [--only REGEX] [--no-baseline]
#   --list      print the sites and exit
#   --no-baseline  skip the unmutated suite run (a resumed run whose tree
#               passed it already)
#   --limit N   stop after N new sites (a time-boxed run)
#   --only RE   only sites whose "file:line call" matches the regex
# Environment: ZRT_MUTANT_TIMEOUT (seconds a twin test may run, default 300:
# build-mut/ is configured with -DZRT_TWIN_TEST_TIMEOUT=that, which caps
# every twin-labelled test's TIMEOUT property, as ctest's --timeout cannot;
# a mutant that hangs costs that long, not the tests' own 900 s; the
# baseline's slowest test is printed: keep the cap well above it),
# ZRT_MUTANT_JOBS (ctest -j, default 2).
# The baseline also fails when a twin test is skipped (a program the suite
# runs that $targets does not build): a skipped test would pass every mutant.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
list_only=0 limit=0 only="" baseline=1
while [ $# -gt 0 ]; do
  case $1 in
  --list) list_only=1 ;;
  --limit) limit=${2:?--limit takes a count}; shift ;;
  --only) only=${2:?--only takes a regex}; shift ;;
  --no-baseline) baseline=0 ;;
  *) echo "twin-mutants.sh: unknown argument '$1' (takes --list, --limit N, --only REGEX, --no-baseline)" >&2; exit 2 ;;
  esac
  shift
done
timeout_s=${ZRT_MUTANT_TIMEOUT:-300}
jobs=${ZRT_MUTANT_JOBS:-2}
bdir=build-mut
tsv=perf/results/twin-mutants.tsv
md=docs/twin-mutants.md
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Sites: "file<TAB>line<TAB>column<TAB>call", column of the call's name (0-based).
sites() {
  python3 - <<'PY'
import os, re
calls = r"zrt_backend_(?:stream_wait_event|event_record|stream_join|event_synchronize|synchronize)|zrt_engine_synchronize"
pat = re.compile(r"\b(" + calls + r")\s*\(")
for top in ("engine", "sharding", "offload", "comm", "examples"):
    for d, _, files in sorted(os.walk(top)):
        for f in sorted(files):
            if not f.endswith(".c"):
                continue
            p = os.path.join(d, f)
            for i, line in enumerate(open(p), 1):
                s = line.lstrip()
                if s.startswith(("*", "/*", "//")):
                    continue
                for m in pat.finditer(line):
                    if re.match(r"\s*zrt_status\s+$", line[: m.start()]):
                        continue  # a definition, not a call
                    print(f"{p}\t{i}\t{m.start()}\t{m.group(1)}")
PY
}

# mutate FILE LINE COL: the call starting there (to its matching ')') -> ZRT_OK
mutate() {
  python3 - "$@" <<'PY'
import sys
path, line, col = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = open(path).read()
lines = text.split("\n")
start = sum(len(l) + 1 for l in lines[: line - 1]) + col
i = text.index("(", start)
depth = 0
while True:
    c = text[i]
    if c == "(":
        depth += 1
    elif c == ")":
        depth -= 1
        if depth == 0:
            break
    i += 1
open(path, "w").write(text[:start] + "ZRT_OK" + text[i + 1 :])
PY
}

if [ $list_only = 1 ]; then
  sites | awk -F'\t' '{print $1 ":" $2 "\t" $4}'
  exit 0
fi

if [ -n "$(git status --porcelain -- engine sharding offload comm examples)" ]; then
  echo "twin-mutants.sh: engine/ sharding/ offload/ comm/ examples/ have uncommitted changes;" \
    "commit or stash them first (each mutant is restored from git's copy)" >&2
  exit 2
fi
head=$(git rev-parse --short HEAD)
mkdir -p "$(dirname "$tsv")"
if [ -f "$tsv" ] && ! head -1 "$tsv" | grep -q "commit $(git log -1 --format=%h -- engine sharding offload comm examples)"; then
  echo "twin-mutants.sh: $tsv was made on other sources (its header: $(head -1 "$tsv"));" \
    "move it away to start over" >&2
  exit 2
fi
[ -f "$tsv" ] || printf '# sites of commit %s (last change to the mutated folders)\n' \
  "$(git log -1 --format=%h -- engine sharding offload comm examples)" >"$tsv"

targets="test_backend_cuda test_engine_equiv test_checkpoint_resume test_engine_memory
  test_engine_twin_flow test_engine_offload_grads test_engine_nvme test_engine_nvme_param
  test_engine_comm_bytes test_engine_timing test_actckpt_api test_offload test_offload_segments
  test_comm_staged test_comm_self_device test_engine_hostmem train_gpt2 train_mlp"
cmake -S . -B $bdir -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZRT_CUDA=OFF -DZRT_WERROR=OFF \
  -DZRT_TWIN_TEST_TIMEOUT="$timeout_s" >/dev/null
build() { cmake --build $bdir -j"$jobs" --target $targets >"$bdir/mutant-build.log" 2>&1; }

restore=""
trap '[ -n "$restore" ] && git checkout -q -- "$restore"' EXIT

# The tests nearest a file's calls, run first (a kill comes sooner; the
# verdict is the same: a survivor has passed the whole suite).
first_tests() {
  case $1 in
  engine/engine_actckpt.c) echo 'test_actckpt_api|test_gpt2_twin_actckpt' ;;
  offload/param_swap.c) echo 'nvme_param' ;;
  comm/comm_self.c) echo 'checkpoint_resume.np1' ;;
  offload/*) echo 'offload_grads|nvme|twin_flow' ;;
  examples/*) echo 'test_gpt2_twin$' ;;
  *) echo 'test_engine_equiv|checkpoint_resume.np2' ;;
  esac
}

# the suite; prints "passed" or the first failing test and how ("name (Failed)")
suite() {
  local log=$bdir/mutant-ctest.log rc=0 first=${1:-}
  : >"$root/$log" # this run's output only (the baseline's slowest tests are read from it)
  if [ -n "$first" ]; then
    (cd $bdir && ctest -L twin -R "$first" --output-on-failure --stop-on-failure --timeout "$timeout_s" \
      -j"$jobs" </dev/null >"$root/$log" 2>&1) || rc=$?
  fi
  if [ $rc = 0 ]; then
    (cd $bdir && ctest -L twin -E "twin_equal_selftest${first:+|$first}" --output-on-failure --stop-on-failure \
      --timeout "$timeout_s" -j"$jobs" </dev/null >>"$root/$log" 2>&1) || rc=$?
  fi
  if [ $rc = 0 ]; then
    echo passed
  else
    grep -E '\*\*\*(Failed|Timeout|Exception)|Failed  |Not Run' "$log" | head -1 |
      sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*\*\*\*([A-Za-z]+).*/\1 (\2)/; s/.*Test +#[0-9]+: ([^ ]+) .*/\1 (Failed)/' ||
      echo "ctest exited $rc (see $log)"
  fi
}

render() {
  python3 - "$tsv" "$md" "$head" <<'PY'
import sys
tsv, md, head = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(tsv) if l.strip() and not l.startswith("#")]
hdr = open(tsv).readline().strip("# \n")
killed = [r for r in rows if r[3] == "killed"]
surv = [r for r in rows if r[3] == "survived"]
nb = [r for r in rows if r[3] == "not built"]
n = len(killed) + len(surv)
rate = f"{100.0 * len(killed) / n:.1f}%" if n else "n/a"
out = ["# Twin mutation run (scripts/twin-mutants.sh)", "",
       "Each stream/event/synchronize call in engine/, sharding/, offload/, comm/ and examples/ "
       "deleted one at a time (the call replaced by `ZRT_OK`), the twin suite (`ctest -L twin`, "
       "jitter on) run against it. Generated by the script from perf/results/twin-mutants.tsv "
       f"({hdr}); why each survivor is not caught, or is not needed, is in docs/engine.md "
       "(\"Mutation run\").", "",
       f"**Kill rate: {len(killed)} of {n} built mutants killed ({rate})**; "
       f"{len(surv)} survived, {len(nb)} not built here.", "",
       "| site | call | result | test | seconds |", "|---|---|---|---|---|"]
for r in rows:
    out.append(f"| {r[0]}:{r[1]} | `{r[2]}` | {r[3]} | {r[4]} | {r[5]} |")
open(md, "w").write("\n".join(out) + "\n")
PY
}

echo "== build; baseline: the suite on the unmutated tree"
build || { tail -30 $bdir/mutant-build.log; echo "twin-mutants.sh: the unmutated build failed" >&2; exit 1; }
if [ $baseline = 1 ]; then
  t0=$(date +%s)
  b=$(suite)
  [ "$b" = passed ] || { echo "twin-mutants.sh: the unmutated suite fails ($b): fix that first" >&2; exit 1; }
  if grep -E '\*\*\*Skipped|Not Run' $bdir/mutant-ctest.log; then
    echo "twin-mutants.sh: twin tests skipped in the baseline (above): add the programs they run to" \
      "\$targets in this script (a skipped test passes every mutant)" >&2
    exit 1
  fi
  echo "baseline passed in $(($(date +%s) - t0)) s; slowest tests (the cap is ${timeout_s} s):"
  grep -E 'Test +#' $bdir/mutant-ctest.log | awk '{print $(NF-1), $0}' | sort -rn | head -3 | cut -d' ' -f2-
fi

done_n=0
while IFS=$'\t' read -r file line col call <&3; do
  key="$file:$line $call"
  if [ -n "$only" ] && ! [[ $key =~ $only ]]; then continue; fi
  if awk -F'\t' -v f="$file" -v l="$line" -v c="$call" '$1==f && $2==l && $3==c {found=1} END {exit !found}' "$tsv"; then
    continue
  fi
  if [ "$limit" -gt 0 ] && [ $done_n -ge "$limit" ]; then break; fi
  t0=$(date +%s)
  obj=$(find $bdir -name "$(basename "$file").o" -path "*${file%/*}*" | head -1)
  if [ -z "$obj" ]; then
    res="not built" by="-"
  else
    restore=$file
    mutate "$file" "$line" "$col"
    if ! build; then
      res="build failed" by="$(grep -m1 -E 'error' $bdir/mutant-build.log | tr '\t' ' ')"
    else
      by=$(suite "$(first_tests "$file")")
      mkdir -p $bdir/mutant-logs
      cp $bdir/mutant-ctest.log "$bdir/mutant-logs/${file//\//_}_$line.log"
      if [ "$by" = passed ]; then res=survived by="-"; else res=killed; fi
    fi
    git checkout -q -- "$file"
    restore=""
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$file" "$line" "$call" "$res" "$by" "$(($(date +%s) - t0))" >>"$tsv"
  echo "$key: $res $by ($(($(date +%s) - t0)) s)"
  render
  done_n=$((done_n + 1))
done 3< <(sites)
render
echo "report: $md"
