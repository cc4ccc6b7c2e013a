#!/bin/bash
# test_install.sh — `cmake --install` gives a prefix other programs build
# against (issue 27): the layout (libzrt.so.MAJOR with its soname and link,
# libzrt.a, zrt.h, zrt.pc, the CMake package, the commands and examples,
# docs, share/zrt data); then the prefix is moved (nothing may name the path
# it was installed to) and a program outside the tree is built against it
# with pkg-config (shared, --static) and find_package(zrt) (zrt::zrt,
# zrt::zrt_static), run on 1 rank and, with the prefix's own `zrt launch`,
# on 2 (install_lib.sh); the installed train_gpt2 finds its corpus and the
# installed train_mlp prints what the build tree's prints.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/install_lib.sh"
need_mpiexec
B=${ZRT_BUILD_DIR:?ZRT_BUILD_DIR (ctest sets it)}
cd "$T"

cmake --install "$B" --prefix "$T/inst" >install.log 2>&1 || { cat install.log; fail "cmake --install $B"; }
mv "$T/inst" "$T/moved" || fail "mv prefix"
P=$T/moved
ver=$(header_version "$P")
major=${ver%%.*}
for f in "lib/libzrt.so.$major" lib/libzrt.so "lib/libzrt.so.$ver" lib/libzrt.a include/zrt.h \
  lib/pkgconfig/zrt.pc lib/cmake/zrt/zrtConfig.cmake lib/cmake/zrt/zrtConfigVersion.cmake \
  lib/cmake/zrt/ZrtFindDeps.cmake bin/zrt bin/zrt-perf bin/train_mlp bin/train_gpt2 \
  share/zrt/configs/zero3_offload.yaml share/zrt/data/corpus.txt share/doc/zrt/README.md \
  share/doc/zrt/config-reference.md; do
  [ -e "$P/$f" ] || fail "installed prefix lacks $f"
done
[ "$(readlink "$P/lib/libzrt.so")" = "libzrt.so.$major" ] ||
  fail "lib/libzrt.so -> $(readlink "$P/lib/libzrt.so"), expected libzrt.so.$major"
readelf -d "$P/lib/libzrt.so.$ver" | grep -q "SONAME.*\[libzrt\.so\.$major\]" ||
  fail "soname: $(readelf -d "$P/lib/libzrt.so.$ver" | grep SONAME)"
pass "prefix layout, soname libzrt.so.$major"
if grep -rl --binary-files=text "$T/inst" "$P" >paths.txt; then
  cat paths.txt
  fail "installed files name the install path $T/inst (the prefix must be relocatable)"
fi
pass "no installed file names the install path"

outside_hello "$P" prefix "$P/bin/zrt"

# the installed programs: their data beside them, the build tree's results
"$P/bin/train_gpt2" --help >gpt2help.txt 2>&1
expect_grep "default $P/bin/../share/zrt/data/corpus.txt" gpt2help.txt "installed train_gpt2's corpus"
env -u ZRT_CONFIG_FILE "$P/bin/train_mlp" --steps 3 >mlp_inst.txt 2>/dev/null || fail "installed train_mlp"
env -u ZRT_CONFIG_FILE "$B/bin/train_mlp" --steps 3 >mlp_build.txt 2>/dev/null || fail "build's train_mlp"
diff mlp_build.txt mlp_inst.txt || fail "installed train_mlp prints other numbers than the build's"
[ -s mlp_inst.txt ] || fail "train_mlp printed nothing"
pass "installed train_mlp = build tree's ($(wc -l <mlp_inst.txt) steps)"
echo "PASS"
