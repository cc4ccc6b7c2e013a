#!/usr/bin/env bash
# make_corpus.sh OUT — builds the default byte-level training text of the
# GPT-2 example from English text that Debian installs, no downloads:
#   1. /usr/share/common-licenses/* (base-files: always present, ~0.2 MB of
#      licence prose; symlinked duplicates such as GPL -> GPL-3 skipped),
#   2. the English fortune cookies of the `fortunes` + `fortunes-min`
#      packages (/usr/share/games/fortunes, ~2.5 MB of quotes, jokes and
#      prose; scripts/setup.sh installs them) when installed.
# Files are taken in sorted order so the corpus is the same on every
# machine with the same packages; train_gpt2 uses the last 10% as the
# validation split. Rewrites OUT only when its content would change.
set -euo pipefail
out=${1:?usage: make_corpus.sh OUT}
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
n=0
for f in $(ls /usr/share/common-licenses/ 2>/dev/null | LC_ALL=C sort); do
  p=/usr/share/common-licenses/$f
  [ -f "$p" ] && [ ! -L "$p" ] || continue
  cat "$p" >>"$tmp"; n=$((n + 1))
done
if [ -d /usr/share/games/fortunes ]; then
  for p in $(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | LC_ALL=C sort); do
    cat "$p" >>"$tmp"; n=$((n + 1))
  done
fi
if [ "$n" = 0 ] || [ ! -s "$tmp" ]; then
  echo "make_corpus.sh: no text found in /usr/share/common-licenses or /usr/share/games/fortunes;" \
       "install base-files / fortunes, or pass --data FILE to train_gpt2" >&2
  exit 1
fi
if [ -f "$out" ] && cmp -s "$tmp" "$out"; then exit 0; fi
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "make_corpus.sh: wrote $out ($(wc -c <"$out") bytes from $n files)"
