#!/usr/bin/env bash
# Hides the system's copies of what scripts/gpu/bundle.sh bundles (the Debian -dev packages, the
# libraries a bare CUDA image lacks: yaml-cpp, fmt, SentencePiece), Debian's LibTorch headers and
# pkg-config, then runs "$@": the rehearsal of a bare machine (scripts/gpu_check.sh --rehearse).
# It must run in a private mount namespace (unshare -m --propagation private), which
# gpu_check.sh --rehearse sets up with GPU_CHECK_HIDDEN=1: each hidden directory gets an empty
# directory mounted over it, each hidden file an empty file, so a header or library the bundle
# lacks fails the build instead of being found in /usr. zlib, SQLite and PCRE2's runtime libraries
# stay (python3, grep and cmake need them on any image); the build links the bundle's copies.
# Exports GPU_CHECK_HIDDEN_SUMMARY ("N directories and M files of K packages").
set -euo pipefail
[ "${GPU_CHECK_HIDDEN:-}" = 1 ] || { echo "hide_system.sh: only inside gpu_check.sh --rehearse's namespace" >&2; exit 2; }
pkgs=(libyaml-cpp-dev libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev googletest libsqlite3-dev
      libpcre2-dev libsentencepiece-dev libcli11-dev zlib1g-dev libyaml-cpp0.7 libfmt9 libsentencepiece0
      libtorch-dev pkg-config pkgconf pkgconf-bin)
installed=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && installed+=("$p")
done
empty_dir=$(mktemp -d /tmp/gpu_check_empty.XXXXXX)
empty_file=$empty_dir.file
: >"$empty_file"
listed=$(mktemp)
dpkg -L "${installed[@]}" 2>/dev/null | grep -vE '^/(\.|usr|usr/share|usr/share/doc|usr/share/man)?$' | sort -u >"$listed"
ndirs=0
nfiles=0
mounted=()
under_mounted() {
  local m
  for m in "${mounted[@]}"; do [[ $1 == "$m"/* ]] && return 0; done
  return 1
}
# Directories, topmost first, whose whole content belongs to the hidden packages.
while read -r d; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  case $d in /usr/include/*|/usr/lib/x86_64-linux-gnu/cmake/*|/usr/share/cmake/*|/usr/src/*|/usr/lib/x86_64-linux-gnu/pkgconfig|/usr/share/pkgconfig) ;; *) continue ;; esac
  under_mounted "$d" && continue
  case $d in
    */pkgconfig) ;;  # every .pc file goes: the bundle's pkg-config reads only its own
    *) [ -z "$(find "$d" \( -type f -o -type l \) | sort | comm -23 - "$listed" | head -1)" ] || continue ;;
  esac
  mount --bind "$empty_dir" "$d"
  mounted+=("$d")
  ndirs=$((ndirs + 1))
done < <(awk -F/ '{print NF, $0}' "$listed" | sort -n | cut -d' ' -f2-)
while read -r f; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  under_mounted "$f" && continue
  mount --bind "$empty_file" "$f"
  nfiles=$((nfiles + 1))
done <"$listed"
rm -f "$listed"
export GPU_CHECK_HIDDEN_SUMMARY="$ndirs directories and $nfiles files of ${#installed[@]} packages"
exec "$@"
