# lib.sh — shared helpers of the `zrt` command tests (tests/cli/test_*.sh).
#
# Sourcing it: finds the binaries ($ZRT_BIN, set by ctest), skips (exit 77)
# when they or mpiexec are missing, gives the test a private TMPDIR and
# ZRT_CONFIG_HOME (so a user's ~/.config/zrt never leaks in) and removes
# them on exit. Every check prints what it expected and what it got.
set -u

ZRT_BIN=${ZRT_BIN:-${ZRT_BUILD_DIR:-build}/bin}
ZRT=$ZRT_BIN/zrt
PROBE=$ZRT_BIN/rank_probe
if [ ! -x "$ZRT" ]; then
  echo "SKIP: $ZRT not built"
  exit 77
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/zrt-clitest.XXXXXX")
export TMPDIR=$T
export ZRT_CONFIG_HOME=$T/config-home
# a unique word the test's rank programs carry, so pgrep finds only ours
TAG="zrtclitag$$x$RANDOM"
cli_cleanup() {
  local pids
  pids=$(pgrep -f "$TAG" || true)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  rm -rf "$T"
}
trap cli_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

pass() { echo "ok: $*"; }

need_mpiexec() {
  if ! command -v "${ZRT_MPIEXEC:-mpiexec}" >/dev/null; then
    echo "SKIP: no mpiexec"
    exit 77
  fi
  [ -x "$PROBE" ] || fail "$PROBE not built (target rank_probe)"
}

# loopback_machines: Open MPI starts ranks on a second "machine", 127.0.0.2
# (not an address of this host's interfaces, so Open MPI treats it as
# remote), through a stand-in for ssh (plm_rsh_agent) that runs the command
# here; the out-of-band channel and the TCP transport run over loopback.
# Writes $T/fakessh and exports the MCA settings; the caller writes its
# hostfiles (localhost and 127.0.0.2 lines).
loopback_machines() {
  cat >"$T/fakessh" <<'SH'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
shift
exec /bin/sh -c "$*"
SH
  chmod +x "$T/fakessh"
  export OMPI_MCA_plm_rsh_agent=$T/fakessh OMPI_MCA_oob_tcp_if_include=lo \
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo
}

# expect_grep PATTERN FILE [what]: the file has a line matching (grep -E)
expect_grep() {
  if ! grep -Eq -- "$1" "$2"; then
    echo "---- $2:" >&2
    cat "$2" >&2
    echo "----" >&2
    fail "${3:-$2} should match /$1/"
  fi
}

# expect_no_grep PATTERN FILE [what]
expect_no_grep() {
  if grep -Eq -- "$1" "$2"; then
    echo "---- $2:" >&2
    cat "$2" >&2
    fail "${3:-$2} should not match /$1/"
  fi
}

# expect_status WANT GOT what  (WANT may be "nonzero")
expect_status() {
  if [ "$1" = nonzero ]; then
    [ "$2" -ne 0 ] || fail "$3: exit status should be non-zero, got 0"
  else
    [ "$2" -eq "$1" ] || fail "$3: exit status should be $1, got $2"
  fi
}

# no_leftovers: no process carrying this test's TAG is alive (after a short
# settle, since the kernel reaps asynchronously)
no_leftovers() {
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    pgrep -f "$TAG" >/dev/null || return 0
    sleep 0.2
  done
  echo "leftover processes:" >&2
  pgrep -af "$TAG" >&2
  fail "processes left after $1"
}

# wait_lines PATTERN FILE N TIMEOUT_S: waits until N lines match
wait_lines() {
  local i
  for i in $(seq 1 $(($4 * 10))); do
    local c
    c=$(grep -Ec -- "$1" "$2" 2>/dev/null)
    [ "${c:-0}" -ge "$3" ] && return 0
    sleep 0.1
  done
  cat "$2" >&2
  fail "timed out waiting for $3 lines /$1/ in $2"
}

# the resolved value of KEY in `zrt config explain` output FILE
explain_line() { grep -E "^$1 = " "$2" | head -1; }
