#!/bin/bash
# test_env_table.sh — one table of environment parameters (base/env.c,
# issue 28): the docs, `zrt env` and the sources agree with it.
#  1. docs/environment.md is what `zrt env --reference` prints (regenerate:
#     cmake --build build --target env-reference), and docs/config-reference.md
#     what `zrt config reference` prints.
#  2. `zrt env`'s "== parameters ==" section names every variable of the
#     reference, no other, and shows a value set here.
#  3. The sources: no getenv outside base/env.c in the library folders and
#     tools/; every variable read by name (zrt_env("X") and the helpers
#     that take a literal name) is in the table, and every row of the table
#     is read somewhere.
#  4. The test hooks act only behind ZRT_TEST_HOOKS=1: a hook set without it
#     stops the engine with a message naming both; with it the run goes on.
. "$(dirname "$0")/lib.sh"
S=${ZRT_SOURCE_DIR:?ZRT_SOURCE_DIR (ctest sets it)}
cd "$T"

# 1. generated docs are current
"$ZRT" env --reference >env.md || fail "zrt env --reference"
if ! diff -u "$S/docs/environment.md" env.md >env.diff; then
  head -40 env.diff
  fail "docs/environment.md differs from zrt env --reference (cmake --build build --target env-reference)"
fi
"$ZRT" config reference >cfg.md || fail "zrt config reference"
if ! diff -u "$S/docs/config-reference.md" cfg.md >cfg.diff; then
  head -40 cfg.diff
  fail "docs/config-reference.md differs from zrt config reference (cmake --build build --target config-reference)"
fi
pass "docs/environment.md and docs/config-reference.md are generated from the tables"

# the reference's variables: the first column of the tables before "Config overrides"
awk '/^## Config overrides/ {exit} /^\| `/ {print}' env.md | cut -d'`' -f2 | sort >doc_names.txt
n=$(wc -l <doc_names.txt)
[ "$n" -ge 30 ] || fail "found only $n variables in the reference (the pattern broke?)"
[ -z "$(uniq -d doc_names.txt)" ] || fail "variables listed twice: $(uniq -d doc_names.txt)"

# 2. zrt env shows the same variables, with this process's values
ZRT_LAUNCH_GRACE_S=7 "$ZRT" env >env.txt 2>err.txt || { cat err.txt; fail "zrt env"; }
expect_grep "^== parameters ==$" env.txt
awk '/^== parameters ==$/ {on=1; next} /^== / {on=0} on' env.txt |
  grep -E '^[A-Z][A-Za-z_0-9]*(=| unset: )' | sed -E 's/^([A-Za-z_0-9]+)(=| unset: ).*/\1/' |
  sort >env_names.txt
if ! cmp -s doc_names.txt env_names.txt; then
  diff doc_names.txt env_names.txt
  fail "zrt env's parameters differ from docs/environment.md"
fi
expect_grep "^ZRT_LAUNCH_GRACE_S=7 \(setting\)$" env.txt "a value set here"
expect_grep "^ZRT_LAUNCH_STOP_GRACE_S unset: 30 \(setting\)$" env.txt "an unset setting"
pass "zrt env prints the table's $n variables with their values"

# 3. the sources read only through the table
libdirs="base amp config optim backend comm offload sharding engine checkpoint tools"
(cd "$S" && grep -nE '\b(secure_)?getenv[[:space:]]*\(' -r $libdirs --include='*.c' --include='*.h' \
  --include='*.cu' --include='*.cuh' | grep -v '^base/env\.c:') >raw.txt
[ ! -s raw.txt ] || { cat raw.txt; fail "getenv outside base/env.c (read through zrt_env, base/env.h)"; }
(cd "$S" && grep -ohE '\b(zrt_env|env_int|cli_env_int|cli_env_double)\("[A-Za-z_0-9]+"' -r $libdirs \
  --include='*.c' --include='*.h' --include='*.cu') | cut -d'"' -f2 | sort -u >read_names.txt
[ "$(wc -l <read_names.txt)" -ge 20 ] || fail "found only $(wc -l <read_names.txt) reads (the pattern broke?)"
missing=$(comm -23 read_names.txt doc_names.txt)
[ -z "$missing" ] || fail "read but not in base/env.c's table: $missing"
# every row is read: named as a string literal in a source other than the table
# (the switch of the hooks is read by the table's own reader)
for v in $(grep -vx ZRT_TEST_HOOKS doc_names.txt); do
  (cd "$S" && grep -rqF "\"$v\"" $libdirs --include='*.c' --include='*.h' --include='*.cu' \
    --exclude=env.c) || fail "$v is in base/env.c's table but nothing reads it"
done
pass "no getenv outside base/env.c; the $(wc -l <read_names.txt) names read are the table's, every row is read"

# 4. hooks behind one switch (train_mlp, one process)
MLP=$ZRT_BIN/train_mlp
[ -x "$MLP" ] || fail "$MLP not built"
ZRT_CKPT_SLOW_US=1 "$MLP" --steps 1 >h1.out 2>&1
expect_status nonzero $? "train_mlp with a hook and no switch"
expect_grep "ZRT_CKPT_SLOW_US is a test hook: set ZRT_TEST_HOOKS=1 with it, or unset it" h1.out
ZRT_TEST_HOOKS=yes "$MLP" --steps 1 >h2.out 2>&1
expect_status nonzero $? "train_mlp with ZRT_TEST_HOOKS=yes"
expect_grep "ZRT_TEST_HOOKS='yes': expected 1 \(or unset\)" h2.out
ZRT_TEST_HOOKS=1 ZRT_CKPT_SLOW_US=1 ZRT_LOG_LEVEL=warn "$MLP" --steps 1 >h3.out 2>&1 ||
  { cat h3.out; fail "train_mlp with the switch and a hook"; }
expect_grep "test hooks on \(ZRT_TEST_HOOKS=1\)" h3.out
ZRT_INJECT_NONFINITE_GRADS=1 "$ZRT" env >h4.txt 2>&1 || fail "zrt env with a hook set"
expect_grep "^test hooks: ZRT_INJECT_NONFINITE_GRADS is a test hook" h4.txt
pass "test hooks act only with ZRT_TEST_HOOKS=1; a hook without it is an error"
echo "PASS"
