# install_lib.sh — helpers of the tests that build programs outside the tree
# against an installed zrt (test_install.sh: `cmake --install` prefix;
# test_install_deb.sh: the Debian package unpacked under a scratch root).
# Sourced after lib.sh. The program is tests/cli/outside/hello_zrt.c with
# its five-line CMake project (the README's "Install" section shows it).
#
# outside_hello PREFIX TAG ZRT: builds hello_zrt four ways in $T/TAG from a
# copy of tests/cli/outside (outside the source tree): pkg-config (shared),
# pkg-config --static (libzrt.a: libzrt.so must not be NEEDED),
# find_package(zrt) with zrt::zrt (the five-line project) and with
# zrt::zrt_static; runs each at one rank and checks the four print the same
# lines (same library code: identical, tolerance 0) and the version the
# header in PREFIX says; then starts the shared one on 2 ranks with ZRT
# launch and checks the losses are the 1-rank ones (every rank computes the
# same gradient: the mean is that gradient exactly).
OUTSIDE_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/outside" && pwd)

# the version zrt.h in $1 declares: "M.m.p"
header_version() {
  local h=$1/include/zrt.h
  echo "$(awk '/^#define ZRT_VERSION_MAJOR/{print $3}' "$h").$(awk '/^#define ZRT_VERSION_MINOR/{print $3}' "$h").$(awk '/^#define ZRT_VERSION_PATCH/{print $3}' "$h")"
}

outside_hello() {
  local P=$1 tag=$2 zrt=$3
  local d=$T/$tag
  mkdir -p "$d/src" && cp "$OUTSIDE_SRC"/hello_zrt.c "$OUTSIDE_SRC"/CMakeLists.txt "$d/src/" || fail "copy $OUTSIDE_SRC"
  local lib
  lib=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --variable=libdir zrt) ||
    fail "$tag: pkg-config finds no zrt.pc under $P/lib/pkgconfig"
  (
    cd "$d" || exit 1
    export PKG_CONFIG_PATH=$P/lib/pkgconfig
    cc -O2 -o hello_pc src/hello_zrt.c $(pkg-config --cflags --libs zrt) -Wl,-rpath,"$lib" ||
      { echo "FAIL: $tag: cc with pkg-config --cflags --libs zrt"; exit 1; }
    cc -O2 -o hello_pcs src/hello_zrt.c $(pkg-config --cflags zrt) -Wl,-Bstatic -lzrt -Wl,-Bdynamic \
      -Wl,--as-needed $(pkg-config --static --libs zrt) ||
      { echo "FAIL: $tag: cc with pkg-config --static --libs zrt"; exit 1; }
  ) || fail "$tag: pkg-config builds"
  readelf -d "$d/hello_pc" | grep -q 'NEEDED.*\[libzrt\.so\.' || fail "$tag: hello_pc does not load libzrt.so"
  if readelf -d "$d/hello_pcs" | grep -q 'NEEDED.*libzrt'; then
    fail "$tag: the --static build still loads libzrt.so: $(readelf -d "$d/hello_pcs" | grep libzrt)"
  fi
  pass "$tag: pkg-config: shared (NEEDED libzrt.so) and --static (libzrt.a, no libzrt.so)"

  cmake -S "$d/src" -B "$d/cm" -DCMAKE_PREFIX_PATH="$P" >"$d/cm.log" 2>&1 &&
    cmake --build "$d/cm" >>"$d/cm.log" 2>&1 || { cat "$d/cm.log"; fail "$tag: find_package(zrt) project"; }
  # the same project on zrt::zrt_static
  mkdir -p "$d/src_static" && cp "$d/src/hello_zrt.c" "$d/src_static/" &&
    sed 's/zrt::zrt)/zrt::zrt_static)/' "$d/src/CMakeLists.txt" >"$d/src_static/CMakeLists.txt"
  grep -q 'zrt::zrt_static' "$d/src_static/CMakeLists.txt" || fail "$tag: no zrt::zrt line in the CMake project"
  cmake -S "$d/src_static" -B "$d/cms" -DCMAKE_PREFIX_PATH="$P" >"$d/cms.log" 2>&1 &&
    cmake --build "$d/cms" >>"$d/cms.log" 2>&1 || { cat "$d/cms.log"; fail "$tag: zrt::zrt_static project"; }
  readelf -d "$d/cm/hello_zrt" | grep -q 'NEEDED.*\[libzrt\.so\.' || fail "$tag: zrt::zrt build does not load libzrt.so"
  if readelf -d "$d/cms/hello_zrt" | grep -q 'NEEDED.*libzrt'; then fail "$tag: zrt::zrt_static build loads libzrt.so"; fi
  pass "$tag: find_package(zrt): zrt::zrt and zrt::zrt_static"

  local want
  want=$(header_version "$P")
  local exe
  for exe in hello_pc hello_pcs cm/hello_zrt cms/hello_zrt; do
    (cd "$d" && env -u ZRT_CONFIG_FILE "./$exe" --steps 3) >"$d/${exe//\//_}.out" 2>"$d/err.txt" ||
      { cat "$d/err.txt"; fail "$tag: $exe exited non-zero"; }
  done
  local ref=$d/hello_pc.out
  cat "$ref"
  grep -q "^zrt $want (header $want), 1 rank(s)" "$ref" ||
    fail "$tag: expected 'zrt $want (header $want), 1 rank(s)', got '$(head -1 "$ref")'"
  [ "$(grep -c '^step ' "$ref")" = 3 ] || fail "$tag: expected 3 step lines"
  for o in hello_pcs cm_hello_zrt cms_hello_zrt; do
    cmp -s "$ref" "$d/$o.out" || { diff "$ref" "$d/$o.out"; fail "$tag: $o differs from the pkg-config shared build"; }
  done
  pass "$tag: the four builds print the same lines (version $want, 3 steps)"

  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$zrt" launch --num_processes 2 "$d/cm/hello_zrt" --steps 3 >"$d/np2.out" 2>"$d/np2.err" ||
    { cat "$d/np2.out" "$d/np2.err"; fail "$tag: $zrt launch --num_processes 2 hello_zrt"; }
  grep -q "2 rank(s)" "$d/np2.out" || fail "$tag: the launch did not run 2 ranks: $(head -1 "$d/np2.out")"
  diff <(grep '^step ' "$ref") <(grep '^step ' "$d/np2.out") ||
    fail "$tag: 2 ranks' losses differ from 1 rank's (expected identical)"
  pass "$tag: $zrt launch: 2 ranks print the 1-rank losses exactly"
}
