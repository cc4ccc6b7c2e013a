#!/usr/bin/env bash
# gpu-setup.sh — builds and runs zrt on the GPU machine of ../shared/GPU.md,
# a different image (nvcc 13, driver 580, CMake, no Debian, nothing
# installable) without Open MPI, jemalloc, libnuma, libyaml, libcjson,
# liburing, OpenBLAS or pkg-config. Their Debian 12 packages are carried in
# .debs/ (fetched here, on the development machine) and unpacked there beside
# the system under /opt/deps, never over /.
#
#   scripts/gpu-setup.sh download        # here: apt-get download into .debs/ (+ nccl.h)
#   scripts/gpu-setup.sh step NAME [DIR] # there: one step of the playbook, at most
#                                        # 10 minutes each, its log in $OUT/NAME.log:
#       build    unpack, preflight, configure (-DZRT_CUDA=ON, sm_90, NCCL found or
#                the step fails, -DZRT_WERROR=OFF) and build DIR (default build-gpu)
#       gpu      ZRT_REQUIRE_GPU=1 ctest -L gpu        (each test at most 540 s)
#       mpi      ctest -L mpi                          (ranks sharing the one GPU)
#       cli      ctest -L cli
#       sanitize compute-sanitizer memcheck + racecheck, train_gpt2 for 3 steps
#       attn     the fused attention's kernels, and against PyTorch SDPA (docs/perf.md)
#       perf     GPT-2 124M bf16: zrt vs PyTorch eager / torch.compile, pinned copies,
#                share hidden: $OUT/perf_gpu.json, logs in $OUT/perf_logs.tar.gz
#   scripts/gpu-setup.sh steps A,B,... [DIR] # there: those steps in order in one
#                                        # device command, under one deadline
#                                        # (ZRT_STEPS_S, default 580 s): each step gets
#                                        # what is left, one with under ZRT_STEP_MIN_S
#                                        # (default 45) left is skipped, a failed build
#                                        # ends the run; $OUT/steps.txt says what ran,
#                                        # how long and how it ended. Without mpi, cli
#                                        # or unit in the list the build makes only what
#                                        # the gpu, attn, sanitize and perf steps run
#   scripts/gpu-setup.sh run CMD...      # there: CMD with the environment set
#   scripts/gpu-setup.sh env             # print the environment (to eval)
#   scripts/gpu-setup.sh check [DIR]     # here: `step build` then the test steps'
#                                        # CPU part in a mount namespace that hides
#                                        # the system's copies of every carried package
#
# Relocation: dpkg -x keeps Debian's paths under /opt/deps (/opt/deps/usr/
# lib/x86_64-linux-gnu, ...). Open MPI finds its components, help files and
# wrapper data through OPAL_PREFIX (its install prefix /usr moved to
# /opt/deps/usr), PMIx through PMIX_INSTALL_PREFIX (Debian's PMIx lives in
# lib/<arch>/pmix2); pkg-config answers with /opt/deps prepended
# (PKG_CONFIG_SYSROOT_DIR), which is how CMake's pkg_check_modules finds the
# carried libraries. Debian's "alternatives" links (mpiexec, mpicc,
# pkgconfig/openblas.pc) are not made by dpkg -x: /opt/deps/bin holds the
# commands and PKG_CONFIG_PATH names openblas-pthread/pkgconfig.
#
# NCCL is not part of the CUDA toolkit on that image: it is looked for in
# $ZRT_NCCL_HOME, the toolkit, /usr, then the Python environment's
# nvidia-nccl-cu* wheel (libnccl.so.2 only). The header comes from .debs/nccl
# (copied from this machine's toolkit by `download`). Both are linked under
# /opt/deps/nccl and passed to CMake explicitly.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=${ZRT_DEPS_PREFIX:-/opt/deps}
P=$DEPS/usr
ARCH=x86_64-linux-gnu
OUT=${OUT:-$PWD/gpu-out}

PKGS=(openmpi-bin openmpi-common libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libhwloc-plugins libevent-2.1-7
      libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2
      libpsm-infinipath1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libjemalloc2
      libjemalloc-dev libnuma1 libnuma-dev libcjson1 libcjson-dev libyaml-0-2 libyaml-dev liburing2
      liburing-dev libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5
      pkgconf pkgconf-bin libpkgconf3)

env_lines() {
  cat <<EOF
export PATH="$DEPS/bin:$P/bin:\$PATH"
export LD_LIBRARY_PATH="$P/lib/$ARCH:$P/lib/$ARCH/openmpi/lib:$P/lib/$ARCH/openblas-pthread:$DEPS/nccl/lib:/usr/local/cuda/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$P"
export PMIX_INSTALL_PREFIX="$P/lib/$ARCH/pmix2"
export PKG_CONFIG_PATH="$P/lib/$ARCH/pkgconfig:$P/share/pkgconfig:$P/lib/$ARCH/openmpi/lib/pkgconfig:$P/lib/$ARCH/openblas-pthread/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$DEPS"
export CMAKE_PREFIX_PATH="$P\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export CPATH="$P/include:$P/include/$ARCH\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$P/lib/$ARCH\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
}

# The NCCL library: prints its path, or nothing.
find_nccl_lib() {
  local d f
  for d in "${ZRT_NCCL_HOME:-}" /usr/local/cuda /usr; do
    [ -n "$d" ] || continue
    for f in "$d"/lib64/libnccl.so.2 "$d"/lib/libnccl.so.2 "$d/lib/$ARCH"/libnccl.so.2; do
      [ -s "$f" ] && { echo "$f"; return; }
    done
  done
  command -v python3 >/dev/null || return 0
  python3 - <<'EOF' 2>/dev/null || true
import glob, site, sys
dirs = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
for d in dirs:
    for f in sorted(glob.glob(d + "/nvidia/nccl/lib/libnccl.so*")):
        print(f)
        sys.exit(0)
EOF
}

# Links the NCCL found and the carried header under $DEPS/nccl; prints the
# CMake arguments (none when either is missing).
setup_nccl() {
  local lib hdr
  lib=$(find_nccl_lib | head -1)
  hdr=""
  for h in .debs/nccl/nccl.h /usr/local/cuda/include/nccl.h; do
    [ -s "$h" ] && { hdr=$h; break; }
  done
  if [ -z "$lib" ] || [ -z "$hdr" ]; then
    echo "gpu-setup: NCCL library: ${lib:-not found}; nccl.h: ${hdr:-not found}" >&2
    echo "-UZRT_NCCL_LIB -UZRT_NCCL_INC" # CMake looks on its own; no stale cached paths
    return 0
  fi
  mkdir -p "$DEPS/nccl/lib" "$DEPS/nccl/include"
  ln -sf "$(readlink -f "$lib")" "$DEPS/nccl/lib/libnccl.so.2"
  ln -sf libnccl.so.2 "$DEPS/nccl/lib/libnccl.so"
  cp -f "$hdr" "$DEPS/nccl/include/nccl.h"
  echo "gpu-setup: NCCL library $lib, header $hdr ($(grep -m1 -o 'NCCL_VERSION_CODE [0-9]*' "$hdr"))" >&2
  echo "-DZRT_NCCL_LIB=$DEPS/nccl/lib/libnccl.so -DZRT_NCCL_INC=$DEPS/nccl/include"
}

unpack() {
  ls .debs/*.deb >/dev/null 2>&1 || { echo "gpu-setup: no .debs/*.deb (run 'download' on the dev machine and carry .debs)" >&2; exit 1; }
  mkdir -p "$DEPS/bin"
  for f in .debs/*.deb; do dpkg-deb -x "$f" "$DEPS" 2>/dev/null || dpkg -x "$f" "$DEPS"; done
  # the alternatives dpkg -x does not make
  ln -sf "$P/bin/orterun" "$DEPS/bin/mpiexec"
  ln -sf "$P/bin/orterun" "$DEPS/bin/mpirun"
  ln -sf "$P/bin/opal_wrapper" "$DEPS/bin/mpicc"
  ln -sf "$P/bin/pkgconf" "$DEPS/bin/pkg-config"
  # libopenblas-*-dev ship libblas.so / liblapack.so as alternatives too
  for l in libblas.so.3 liblapack.so.3 libopenblas.so.0 libopenblas.so; do
    [ -e "$P/lib/$ARCH/$l" ] || { [ -e "$P/lib/$ARCH/openblas-pthread/$l" ] && ln -sf "openblas-pthread/$l" "$P/lib/$ARCH/$l"; } || true
  done
}

step_build() {
  local dir=$1 nccl_args
  unpack
  eval "$(env_lines)"
  echo "== preflight"
  nvidia-smi || echo "gpu-setup: nvidia-smi failed (no GPU here)"
  nvcc --version | tail -2 || true
  mpiexec --version | head -1
  ompi_info | head -3
  pkg-config --modversion yaml-0.1 libcjson jemalloc numa liburing openblas 2>&1 | tr '\n' ' '
  echo
  nccl_args=$(setup_nccl)
  echo "== configure + build ($dir)"
  # shellcheck disable=SC2086
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZRT_CUDA=ON \
    -DZRT_CUDA_ARCH="${ZRT_CUDA_ARCH:-90}" -DZRT_WERROR=OFF -DMPI_C_COMPILER="$DEPS/bin/mpicc" \
    -DCMAKE_PREFIX_PATH="$P" $nccl_args ${ZRT_CMAKE_ARGS:-}
  # ZRT_BUILD_TARGETS: only these (the check's subset; CI time), else all
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$(nproc)" ${ZRT_BUILD_TARGETS:+--target $ZRT_BUILD_TARGETS}
  "$dir/bin/zrt" env | tee "$dir/zrt-env.txt"
  if ! grep -q '^NCCL comm: built' "$dir/zrt-env.txt"; then
    echo "gpu-setup: this build has no NCCL comm (see the NCCL line above); the gpu tests would fail" >&2
    [ "${ZRT_ALLOW_NO_NCCL:-0}" = 1 ] || return 1
  fi
}

need_build() {
  [ -x "$1/bin/zrt" ] || {
    echo "gpu-setup: $1 is not built on this machine (run 'step build' first, in the same warm lease)" >&2
    exit 1
  }
  [ -d "$P" ] || unpack
  eval "$(env_lines)"
}

# What the gpu, attn, sanitize and perf steps run: the library, the commands
# and examples, every gpu-label test (check adds a CPU subset to it).
gpu_targets() {
  local f
  printf '%s ' zrt_cli zrt_perf rank_probe train_gpt2 train_mlp gpu_probe test_gpt2_flash_emu \
    test_gpt2_flash_tc_emu test_gpt2_rows_emu test_gpt2_gemm16
  for f in tests/gpu/test_*.c; do printf '%s ' "$(basename "$f" .c)"; done
}

# Steps in order under one deadline (see the usage above).
steps() {
  local list=$1 dir=$2 n left t0 rc=0 src
  local end=$(($(date +%s) + ${ZRT_STEPS_S:-580}))
  mkdir -p "$OUT"
  : >"$OUT/steps.txt"
  case ",$list," in
  *,mpi,* | *,cli,* | *,unit,*) ;;
  *) [ -n "${ZRT_BUILD_TARGETS:-}" ] || export ZRT_BUILD_TARGETS="$(gpu_targets)" ;;
  esac
  IFS=, read -ra names <<<"$list"
  for n in "${names[@]}"; do
    left=$((end - $(date +%s)))
    if [ "$left" -lt "${ZRT_STEP_MIN_S:-45}" ]; then
      echo "gpu-setup: step $n skipped: ${left} s left of the run's ${ZRT_STEPS_S:-580} s" |
        tee "$OUT/$n.log" | tee -a "$OUT/steps.txt"
      rc=1
      continue
    fi
    t0=$(date +%s)
    # not `step || src=$?`: inside a || list bash ignores set -e, the step's
    # subshell included, and a failed command would not end the step; and in
    # a subshell of its own, since step turns set -e back on before returning
    set +e
    (ZRT_STEP_S=$left step "$n" "$dir")
    src=$?
    set -e
    echo "$n exit $src in $(($(date +%s) - t0)) s" >>"$OUT/steps.txt"
    [ "$src" = 0 ] || rc=1
    [ "$src" = 0 ] || [ "$n" != build ] || break
  done
  echo "== gpu-setup steps $list"
  cat "$OUT/steps.txt"
  return $rc
}

# One step with its log in $OUT/<name>.log; at most ZRT_STEP_S seconds
# (570 by default: the GPU machine's commands end at 600).
step() {
  local name=$1 dir=${2:-build-gpu} lim=${ZRT_STEP_S:-570}
  mkdir -p "$OUT"
  local log="$OUT/$name.log"
  echo "gpu-setup: step $name (dir $dir), log $log"
  set +e
  (
    set -e
    case "$name" in
    build) step_build "$dir" ;;
    gpu)
      need_build "$dir"
      cd "$dir" && ZRT_REQUIRE_GPU=${ZRT_REQUIRE_GPU:-1} timeout "$lim" ctest -L gpu --output-on-failure
      ;;
    mpi | cli | unit)
      need_build "$dir"
      cd "$dir" && timeout "$lim" ctest -L "$name" --output-on-failure -j"$(nproc)" --timeout 540
      ;;
    sanitize)
      need_build "$dir"
      for tool in memcheck racecheck; do
        timeout $((lim / 2)) compute-sanitizer --tool $tool --error-exitcode 9 \
          "$dir/bin/train_gpt2" --model tiny --steps 3 --batch_size 2 --seq_len 64
      done
      ;;
    attn) # docs/perf.md "On a lent GPU": the fused attention vs PyTorch's SDPA
      need_build "$dir"
      mkdir -p "$OUT/attn"
      ZRT_REQUIRE_GPU=1 ZRT_ATTN_DUMP="$OUT/attn" timeout $((lim / 2)) "$dir/tests/test_gpt2_cuda"
      # the fp32 cores' kernels (DIR) and the tensor cores' (DIR/bf16), one JSON line each
      for d in "$OUT/attn" "$OUT/attn/bf16"; do
        timeout $((lim / 4)) python3 scripts/check_attention_torch.py "$d" | tee -a "$OUT/attn.json"
      done
      rm -f "$OUT"/attn/*.f32 "$OUT"/attn/bf16/*.f32
      # the kernels' C emulation against the same PyTorch (cli.test_attention_torch_emu)
      ZRT_BIN="$dir/bin" ZRT_TESTS="$dir/tests" timeout 60 bash tests/cli/test_attention_torch_emu.sh
      ;;
    perf) # docs/perf.md "On a lent GPU": zrt vs PyTorch on this card, pinned copies
      need_build "$dir"
      # the work (token shards, logs) outside $OUT, which brings back few files:
      # the report, and the logs in one archive
      work=$(mktemp -d /tmp/zrt-perf-gpu.XXXXXX)
      prc=0
      timeout "$lim" scripts/perf_gpu_gpt2.sh "$dir/bin" "$work" || prc=$?
      cp -f "$work/perf_gpu.json" "$OUT/perf_gpu.json" 2>/dev/null || true
      tar -czf "$OUT/perf_logs.tar.gz" -C "$work" --exclude ./tok .
      rm -rf "$work"
      exit $prc
      ;;
    *)
      echo "gpu-setup: unknown step '$name' (build, gpu, mpi, cli, unit, sanitize, attn, perf)" >&2
      exit 2
      ;;
    esac
  ) >"$log" 2>&1
  local rc=$?
  set -e
  tail -n 40 "$log"
  echo "gpu-setup: step $name exit $rc"
  return $rc
}

# Hides, in the current mount namespace, every file the system's own copies
# of the carried packages installed (an empty file bound over each, tmpfs
# over their private directories), so that only /opt/deps can answer.
hide_system_copies() {
  local p f n=0
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || continue
    while IFS= read -r f; do
      if [ -f "$f" ] && [ ! -L "$f" ]; then
        mount --bind /dev/null "$f" && n=$((n + 1))
      fi
    done < <(dpkg -L "$p")
  done
  for d in /usr/lib/$ARCH/openmpi /usr/lib/$ARCH/pmix2 /usr/share/openmpi /etc/openmpi \
    /usr/include/$ARCH/openmpi /usr/lib/$ARCH/openblas-pthread; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
  done
  echo "gpu-setup check: hid $n files of the system's copies"
}

check() {
  local dir=${1:-build-reloc}
  [ "$(id -u)" = 0 ] || { echo "gpu-setup check: needs root (a mount namespace)" >&2; exit 77; }
  unshare -m true 2>/dev/null || { echo "gpu-setup check: no mount namespace here (unshare -m refused)" >&2; exit 77; }
  { ls .debs/*.deb && [ -s .debs/nccl/nccl.h ]; } >/dev/null 2>&1 || "$0" download >/dev/null
  export ZRT_DEPS_PREFIX=${ZRT_CHECK_DEPS:-/tmp/zrt-gpu-setup-deps}
  rm -rf "$ZRT_DEPS_PREFIX"
  # shellcheck disable=SC2016
  unshare -m --propagation private bash -c '
    set -euo pipefail
    source <(sed -n "/^hide_system_copies()/,/^}/p" "$0")
    PKGS=('"${PKGS[*]}"') ARCH='"$ARCH"'
    hide_system_copies
    # the GPU image has NCCL only as a Python wheel: hide the library and
    # header of the toolkit, and offer the library laid out as the wheel lays it
    wheel=$(mktemp -d /tmp/zrt-nccl-wheel.XXXXXX)
    trap "rm -rf \"$wheel\"" EXIT
    mkdir -p "$wheel/nvidia/nccl/lib"
    for f in /usr/local/cuda/lib64/libnccl.so*; do
      [ -f "$f" ] && [ ! -L "$f" ] && cp "$f" "$wheel/nvidia/nccl/lib/libnccl.so.2"
    done
    for f in /usr/local/cuda/lib64/libnccl*; do
      [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
    done
    # the header must be absent, not empty (an empty nccl.h in the toolkit
    # include path would shadow the carried one): the toolkit headers
    # without nccl*.h, bound over the toolkit include directory
    inc=$(readlink -f /usr/local/cuda/include)
    mkdir -p "$wheel/include"
    cp -a "$inc/." "$wheel/include/"
    rm -f "$wheel"/include/nccl*.h
    mount --bind "$wheel/include" "$inc"
    export PYTHONPATH="$wheel"
    # the system copies are gone: mpiexec and pkg-config answer only from the carried ones
    if /usr/bin/orterun --version >/dev/null 2>&1; then echo "gpu-setup check: system Open MPI still visible" >&2; exit 1; fi
    export OUT='"$OUT"' ZRT_ALLOW_NO_NCCL='"${ZRT_ALLOW_NO_NCCL:-0}"'
    # what the steps below run: the library, the commands and examples, every
    # gpu-label test, and the unit/mpi/cli subset (not the whole suite: CI time)
    source <(sed -n "/^gpu_targets()/,/^}/p" "$0")
    export ZRT_BUILD_TARGETS="$(gpu_targets) test_dtype test_config test_comm_collectives test_engine_equiv"
    "$0" step build "$1"
    # steps without its list is refused with the usage
    if "$0" steps 2>"$OUT/steps-usage.txt"; then echo "gpu-setup check: steps without a list passed" >&2; exit 1; fi
    grep -q "steps needs a comma-separated list" "$OUT/steps-usage.txt"
    ZRT_REQUIRE_GPU=0 "$0" steps gpu "$1" # through `steps` (deadline, steps.txt)
    grep -q "^gpu exit 0 in" "$OUT/steps.txt"
    # the attn step ends with cli.test_attention_torch_emu: its emulations must be built
    for t in $(sed -n "s/^for emu in \(.*\); do$/\1/p" "$(dirname "$0")/../tests/cli/test_attention_torch_emu.sh"); do
      [ -x "$1/tests/$t" ] || { echo "gpu-setup check: the attn step runs $t, which the build (gpu_targets) did not make" >&2; exit 1; }
    done
    ZRT_STEP_S=900 "$0" run bash -c "cd \"$1\" && ctest --output-on-failure -R \"^(unit.test_dtype|unit.test_config|mpi.test_comm_collectives.np2|mpi.test_engine_equiv.np2|cli.test_launch)$\""
  ' "$0" "$dir"
}

case "${1:-}" in
download)
  # keep the packages out of `git status` (a clone made without templates has no info/)
  if EXCL=$(git rev-parse --git-path info/exclude 2>/dev/null); then
    mkdir -p "$(dirname "$EXCL")"
    grep -qx '/.debs/' "$EXCL" 2>/dev/null || echo '/.debs/' >>"$EXCL"
  fi
  mkdir -p .debs/nccl
  # (the package lists may be stale or absent on a fresh machine: update once and retry)
  (cd .debs && apt-get download "${PKGS[@]}") ||
    { apt-get update -qq && (cd .debs && apt-get download "${PKGS[@]}"); }
  # the header for the GPU image's header-less NCCL wheel
  [ -e /usr/local/cuda/include/nccl.h ] && cp -f /usr/local/cuda/include/nccl.h .debs/nccl/
  du -sh .debs
  ;;
env)
  env_lines
  ;;
build) # the old name of `step build`, without a log file
  step_build "${2:-build-gpu}"
  ;;
steps)
  [ -n "${2:-}" ] || { echo "gpu-setup: steps needs a comma-separated list (build,gpu,attn,perf)" >&2; exit 2; }
  steps "$2" "${3:-build-gpu}"
  ;;
step)
  [ -n "${2:-}" ] || { echo "gpu-setup: step needs a name (build, gpu, mpi, cli, unit, sanitize, attn, perf)" >&2; exit 2; }
  step "$2" "${3:-build-gpu}"
  ;;
check)
  check "${2:-build-reloc}"
  ;;
run)
  shift
  [ -d "$P" ] || unpack
  eval "$(env_lines)"
  exec "$@"
  ;;
*)
  sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"
  exit 2
  ;;
esac
