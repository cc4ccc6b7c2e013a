#!/bin/bash
# test_install_deb.sh — `cpack -G DEB` makes a Debian package of zrt (issue
# 27). Checks: its Depends name the package of every library that libzrt.so
# and the installed programs load (dpkg -S of what ldd resolves; the CUDA
# Toolkit's libraries are the one exception, not Debian packages); unpacked
# under a scratch root (dpkg -x), a program outside the tree builds against
# it with pkg-config and find_package(zrt) and runs (install_lib.sh), and
# the examples (examples/mlp, examples/gpt2) build on their own against it
# and print what the build tree's programs print.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/install_lib.sh"
need_mpiexec
B=${ZRT_BUILD_DIR:?ZRT_BUILD_DIR (ctest sets it)}
S=${ZRT_SOURCE_DIR:?ZRT_SOURCE_DIR (ctest sets it)}
for c in cpack dpkg dpkg-deb; do
  command -v $c >/dev/null || { echo "SKIP: no $c"; exit 77; }
done
cd "$T"

cpack -G DEB --config "$B/CPackConfig.cmake" -B "$T/pkg" >cpack.log 2>&1 || { cat cpack.log; fail "cpack -G DEB"; }
deb=$(ls "$T"/pkg/zrt_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { cat cpack.log; fail "cpack made no zrt_*.deb in $T/pkg"; }
depends=$(dpkg-deb -f "$deb" Depends)
echo "$(basename "$deb"): Depends: $depends"
R=$T/root
dpkg -x "$deb" "$R" || fail "dpkg -x $deb"
P=$R/usr
ver=$(header_version "$P")
for f in "lib/libzrt.so.${ver%%.*}" lib/libzrt.so lib/libzrt.a include/zrt.h lib/pkgconfig/zrt.pc \
  lib/cmake/zrt/zrtConfig.cmake bin/zrt bin/zrt-perf bin/train_mlp bin/train_gpt2 \
  share/zrt/data/corpus.txt share/doc/zrt/README.md; do
  [ -e "$P/$f" ] || fail "the package lacks /usr/$f"
done
pass "package layout (/usr/lib/libzrt.so.${ver%%.*}, zrt.pc, CMake package, commands, examples)"

# Every library the package's files load comes from a package in Depends:
# each library once, all owners in one dpkg -S (it reads the whole database).
declare -A seen=()
paths=()
for f in "$P/lib/libzrt.so.$ver" "$P/bin/zrt" "$P/bin/zrt-perf" "$P/bin/train_mlp" "$P/bin/train_gpt2"; do
  for lib in $(readelf -d "$f" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
    case $lib in libzrt.so.*) continue ;; esac
    [ -n "${seen[$lib]:-}" ] && continue
    # "lib => path (addr)", or "path (addr)" for the dynamic loader
    path=$(ldd "$f" | awk -v l="$lib" '$1 == l {print $3} $1 ~ ("/" l "$") {print $1}' | head -1)
    [ -n "$path" ] && [ -e "$path" ] || fail "$(basename "$f"): $lib not found by ldd"
    seen[$lib]=$path
    case $(readlink -f "$path") in
      /usr/local/cuda*) continue ;; # the CUDA Toolkit: not a Debian package
    esac
    paths+=("$path")
  done
done
# dpkg knows a file by the name its package ships (/lib or /usr/lib, the
# link or its target): ask for every spelling
q=()
for p in "${paths[@]}"; do q+=("$p" "$(readlink -f "$p")" "${p#/usr}" "/usr$p"); done
dpkg -S "${q[@]}" 2>/dev/null | sed 's/^\([^:]*\):[^ ]*: /\1 /' >owners.txt
checked=0
for p in "${paths[@]}"; do
  owner=$(awk -v a="$p" -v b="$(readlink -f "$p")" -v c="${p#/usr}" -v d="/usr$p" \
    '$2 == a || $2 == b || $2 == c || $2 == d {print $1; exit}' owners.txt)
  [ -n "$owner" ] || fail "$p (loaded by the package's files) belongs to no Debian package"
  echo "$depends" | tr ',|' '\n\n' | sed 's/ //g; s/(.*//' | grep -qx "$owner" ||
    fail "the package's files load $p from package $owner, which Depends lacks: $depends"
  checked=$((checked + 1))
done
pass "Depends covers the $checked Debian libraries the package's files load"

outside_hello "$P" deb "$P/bin/zrt"

# the examples on their own against the package
cmake -S "$S/examples/mlp" -B ex_mlp -DCMAKE_PREFIX_PATH="$P" >ex_mlp.log 2>&1 &&
  cmake --build ex_mlp >>ex_mlp.log 2>&1 || { cat ex_mlp.log; fail "examples/mlp against the package"; }
env -u ZRT_CONFIG_FILE ./ex_mlp/train_mlp --steps 3 >mlp_deb.txt 2>/dev/null || fail "train_mlp (package)"
env -u ZRT_CONFIG_FILE "$B/bin/train_mlp" --steps 3 >mlp_build.txt 2>/dev/null || fail "build's train_mlp"
[ -s mlp_deb.txt ] && diff mlp_build.txt mlp_deb.txt || fail "train_mlp built against the package differs from the build's"
pass "examples/mlp against the package = build tree's train_mlp"
cmake -S "$S/examples/gpt2" -B ex_gpt2 -DCMAKE_PREFIX_PATH="$P" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >ex_gpt2.log 2>&1 && cmake --build ex_gpt2 -j2 >>ex_gpt2.log 2>&1 ||
  { cat ex_gpt2.log; fail "examples/gpt2 against the package"; }
# default corpus (beside the program), 2 steps; the step lines without timings
args="--steps 2 --val_every 0"
env -u ZRT_CONFIG_FILE ./ex_gpt2/bin/train_gpt2 $args >gpt2_deb.txt 2>gpt2_deb.err ||
  { cat gpt2_deb.err; fail "train_gpt2 (package) $args"; }
env -u ZRT_CONFIG_FILE "$B/bin/train_gpt2" $args >gpt2_build.txt 2>gpt2_build.err ||
  { cat gpt2_build.err; fail "build's train_gpt2 $args"; }
strip_t() { grep '^step ' "$1" | sed 's/ tok\/s .*//'; }
[ "$(strip_t gpt2_deb.txt | wc -l)" = 2 ] || { cat gpt2_deb.txt; fail "train_gpt2 (package): expected 2 step lines"; }
diff <(strip_t gpt2_build.txt) <(strip_t gpt2_deb.txt) || fail "train_gpt2 built against the package differs from the build's"
pass "examples/gpt2 against the package = build tree's train_gpt2 (2 steps)"
echo "PASS"
