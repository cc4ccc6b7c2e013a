# gpt2_lib.sh — the set-up the GPT-2 example's multi-rank CLI tests share
# (test_gpt2_ckpt.sh, test_gpt2_ckpt_errors.sh, test_gpt2_consolidate.sh,
# test_memest_exact.sh).
#
# Usage: . "$(dirname "$0")/gpt2_lib.sh" TAG
# Sets BIN, SRC, EXE (train_gpt2), Z (zrt); skips (exit 77) when train_gpt2
# or mpiexec is missing; makes a private directory $D (zrt_TAG.XXXXXX,
# removed on exit) holding the Debian text corpus in $D/corpus.txt; defines
# fail() and the mpiexec command line MPI.
BIN=${ZRT_BIN:-build/bin}
SRC=${ZRT_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
EXE=$BIN/train_gpt2
Z=$BIN/zrt
[ -x "$EXE" ] || { echo "SKIP: $EXE not built"; exit 77; }
command -v mpiexec >/dev/null || { echo "SKIP: no mpiexec"; exit 77; }
D=$(mktemp -d "${TMPDIR:-/tmp}/zrt_$1.XXXXXX")
trap 'rm -rf "$D"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
MPI=(mpiexec --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)

bash "$SRC/examples/gpt2/make_corpus.sh" "$D/corpus.txt" >/dev/null
