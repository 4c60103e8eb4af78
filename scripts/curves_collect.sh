#!/usr/bin/env bash
# Files a curves run that came back from the GPU machine (curves-poll.sh's partial-sSEED.tar.gz, or
# curves.sh's curves-sSEED.tar.gz) into docs/experiments: unpacks it into DEST, strips the progress
# bars from the training and evaluation logs (a line per carriage return; the last bar of each log
# kept), and draws the plots and the table with scripts/experiment_curves.py plot (FD against GPU
# seconds left out: side-by-side runs share the card, so their seconds are not speeds; CURVES_ALONE=1
# keeps it for a run that had the card to itself, the equal-time runs at 4,096 tokens).
#   bash scripts/curves_collect.sh /work/.device/2/partial-s1.tar.gz docs/experiments/2026-12-04/curves-s1-ddpm
#   CURVES_ALONE=1 bash scripts/curves_collect.sh /work/.device/3/partial-s0.tar.gz docs/experiments/2026-12-04/curves-4k-s0-dit
set -euo pipefail
tarball=$1
dest=$2
[ -f "$tarball" ] || { echo "curves_collect: no file $tarball" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$tarball" -C "$tmp"
runs=$(cd "$tmp" && ls -d *-s[0-9]* 2> /dev/null | grep -v '\.' || true)
[ -n "$runs" ] || { echo "curves_collect: $tarball holds no run folder (NAME-sSEED)" >&2; exit 1; }
mkdir -p "$dest"
for r in $runs; do cp -r "$tmp/$r" "$dest/"; done
for f in "$tmp"/*.log; do
  [ -f "$f" ] || continue
  # progress bars are rewritten in place with \r: keep every other line and the last bar
  tr '\r' '\n' < "$f" | awk '/^ *(train|sample) \[/ {last=$0; next} {print} END {if (last != "") print last}' > "$dest/$(basename "$f")"
done
"$root/.venv/bin/python" "$root/scripts/experiment_curves.py" plot $(for r in $runs; do echo "$dest/$r"; done) --out "$dest"
[ "${CURVES_ALONE:-0}" = 1 ] || rm -f "$dest/fd_vs_seconds.png"
echo "filed $(echo $runs | wc -w) runs in $dest ($(du -sh "$dest" | cut -f1))"
