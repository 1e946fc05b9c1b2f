#!/usr/bin/env bash
# Puts everything the GPU check needs on a bare CUDA machine (CUDA 13, PyTorch in python3, CMake,
# ninja, a host compiler; no Debian -dev packages, no registry, no ../shared) into .gpu-bundle/,
# an ignored folder of the checkout (listed in .git/info/exclude here when nothing ignores it yet):
#   prefix/usr/     the Debian packages the build links against (-dev + runtime), apt-get download +
#                   dpkg -x, made relocatable (lib/ merged into usr/lib, symlinks relative, .pc files
#                   relative to ${pcfiledir}), docs and sources dropped
#   bin/pkg-config  pkgconf from the bundle, reading only the bundle's .pc files
#   data/           tokenizers/llama3 and mmlu/{dev,val,test}: what scripts/gpu_check.sh reads
#   build/          route (b): gpueval, gpueval_tests and the SentencePiece module built here against
#                   the same PyTorch as the device (scripts/gpu/build_bundled.sh), stripped; they find
#                   the bundle's libraries through RUNPATH $ORIGIN/../prefix/usr/lib/x86_64-linux-gnu
#   MANIFEST        versions: packages (+ sha256 of each .deb), PyTorch/CUDA the build is for, the
#                   glibc/libstdc++ symbol versions everything needs, sizes
# Run here, before the GPU machine is used:
#   scripts/gpu/bundle.sh --python /path/to/python-with-torch-2.11   # (b): prefix, data, binaries
#   scripts/gpu/bundle.sh --no-build                                 # (a): prefix and data only
# Then `scripts/gpu_check.sh --rehearse` (docs/gpu.md); on the device carry .gpu-bundle.
# Env: GPUEVAL_SHARED_DATA (default ../shared/data), JOBS (build parallelism, default nproc),
#   BUNDLE_MAX_MIB (50).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
python=${GPU_BUNDLE_PYTHON:-python3}
build=1
while [ $# -gt 0 ]; do
  case $1 in
    --python) python=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: scripts/gpu/bundle.sh [--python PY] [--no-build]" >&2; exit 2 ;;
  esac
done
bundle=$repo/.gpu-bundle
max_mib=${BUNDLE_MAX_MIB:-50}
start=$(date +%s)

if ! git check-ignore -q .gpu-bundle/MANIFEST; then
  echo '/.gpu-bundle/' >>"$(git rev-parse --git-path info/exclude)"
  echo "bundle: added /.gpu-bundle/ to $(git rev-parse --git-path info/exclude)"
fi

# What the build links against, and what those need at run time. googletest (sources only) and the
# 16/32-bit and POSIX PCRE2 libraries (we link -lpcre2-8 alone) are left out on purpose.
dev_pkgs=(libyaml-cpp-dev libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev libsqlite3-dev
          libpcre2-dev libsentencepiece-dev libcli11-dev zlib1g-dev)
run_pkgs=(libyaml-cpp0.7 libfmt9 libsqlite3-0 libpcre2-8-0 libsentencepiece0 zlib1g)
tool_pkgs=(pkgconf-bin libpkgconf3)
# Depends that the bare image is assumed to have (a C/C++ toolchain) or that we do not use.
assumed='^(libc6|libc6-dev|libc-dev|libgcc-s1|libstdc\+\+6|googletest|libpcre2-16-0|libpcre2-32-0|libpcre2-posix3)$'

rm -rf "$bundle/prefix" "$bundle/bin" "$bundle/data" "$bundle/build"
mkdir -p "$bundle/prefix" "$bundle/bin"
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
chmod 777 "$debs"  # apt-get download runs as _apt where it can
(cd "$debs" && apt-get download -q "${dev_pkgs[@]}" "${run_pkgs[@]}" "${tool_pkgs[@]}" 2>&1 \
   | grep -v -e '^Get:' -e 'as root' || true)
manifest=$bundle/MANIFEST
{
  echo "gpueval GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME") from commit $(git describe --always --dirty)"
  echo "[packages] name version sha256"
} >"$manifest"
missing_deps=()
for pkg in "${dev_pkgs[@]}" "${run_pkgs[@]}" "${tool_pkgs[@]}"; do
  deb=$(ls "$debs"/"${pkg}"_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || { echo "bundle: apt-get download $pkg failed" >&2; exit 1; }
  dpkg -x "$deb" "$bundle/prefix"
  echo "$pkg $(dpkg-deb -f "$deb" Version) $(sha256sum "$deb" | cut -c1-16)" >>"$manifest"
  deps=$( { dpkg-deb -f "$deb" Depends; dpkg-deb -f "$deb" Pre-Depends; } | tr ',|' '\n\n' | sed -E 's/\(.*\)//; s/:any//; s/ //g' | grep -v '^$' || true)
  for d in $deps; do
    [[ " ${dev_pkgs[*]} ${run_pkgs[*]} ${tool_pkgs[*]} " == *" $d "* ]] && continue
    [[ $d =~ $assumed ]] && continue
    missing_deps+=("$pkg->$d")
  done
done
if [ ${#missing_deps[@]} -gt 0 ]; then
  echo "bundle: dependencies neither bundled nor assumed: ${missing_deps[*]}" >&2
  exit 1
fi

# Relocatable: one usr/ tree, relative symlinks, nothing the build does not read.
p=$bundle/prefix
if [ -d "$p/lib" ]; then
  cp -a "$p/lib/." "$p/usr/lib/"
  rm -rf "$p/lib"
fi
rm -rf "$p/usr/share/doc" "$p/usr/share/man" "$p/usr/share/lintian" "$p/usr/share/bug" "$p/usr/src" "$p/usr/share/aclocal"
find "$p" -type l | while read -r l; do
  t=$(readlink "$l")
  case $t in
    /*) rel=$(realpath -m --relative-to="$(dirname "$l")" "$p/usr${t#/usr}"); ln -sfn "$rel" "$l" ;;
  esac
done
find "$p" -xtype l -delete  # e.g. libpcre2-16.so, whose library we leave out
# Shared libraries are what the build links; GoogleTest ships only static ones.
find "$p/usr/lib" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
find "$p" -name '*.pc' -exec sed -i -E 's#^prefix=/usr$#prefix=${pcfiledir}/../../..#' {} +
cat >"$bundle/bin/pkg-config" <<'EOF'
#!/bin/sh
# pkgconf from the bundle, searching the bundle's .pc files only (never the system's).
here=$(cd "$(dirname "$0")/.." && pwd)
lib=$here/prefix/usr/lib/x86_64-linux-gnu
PKG_CONFIG_LIBDIR=$lib/pkgconfig:$here/prefix/usr/share/pkgconfig PKG_CONFIG_PATH= \
  LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$here/prefix/usr/bin/pkgconf" "$@"
EOF
chmod +x "$bundle/bin/pkg-config"
"$bundle/bin/pkg-config" --cflags --libs libpcre2-8 sentencepiece >/dev/null

# The data the check reads.
data=
for d in ${GPUEVAL_SHARED_DATA:-} ../shared/data shared/data; do
  [ -f "$d/tokenizers/llama3/tokenizer.json.gz" ] && [ -d "$d/mmlu/test" ] && { data=$(cd "$d" && pwd); break; }
done
[ -n "$data" ] || { echo "bundle: no shared data (tokenizers/llama3, mmlu); set GPUEVAL_SHARED_DATA" >&2; exit 1; }
mkdir -p "$bundle/data/tokenizers" "$bundle/data/mmlu"
cp -a "$data/tokenizers/llama3" "$bundle/data/tokenizers/"
cp -a "$data/mmlu/dev" "$data/mmlu/val" "$data/mmlu/test" "$bundle/data/mmlu/"
{
  echo "[data] from $data"
  echo "tokenizers/llama3 $(cat "$bundle"/data/tokenizers/llama3/* | sha256sum | cut -c1-16)"
  echo "mmlu $(ls "$bundle"/data/mmlu/test | wc -l) subjects (dev, val, test) $(find "$bundle/data/mmlu" -type f | sort | xargs cat | sha256sum | cut -c1-16)"
} >>"$manifest"

# Route (b): the device's binaries, built here against the same PyTorch, stripped.
if [ "$build" = 1 ]; then
  tv=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda or "none")') \
    || { echo "bundle: $python cannot import torch" >&2; exit 1; }
  read -r torch_version torch_cuda <<<"$tv"
  [ "$torch_cuda" != none ] || { echo "bundle: $python's torch $torch_version has no CUDA" >&2; exit 1; }
  t0=$(date +%s)
  scripts/gpu/build_bundled.sh "$bundle" "$python" build-bundle
  build_s=$(($(date +%s) - t0))
  mkdir -p "$bundle/build"
  # patchelf (unpacked here, not installed): the copies keep only the $ORIGIN entry of their RUNPATH,
  # so they cannot reach this machine's torch or bundle by absolute path, here or on the device.
  (cd "$debs" && apt-get download -q patchelf 2>&1 | grep -v -e '^Get:' -e 'as root' || true)
  dpkg -x "$debs"/patchelf_*.deb "$debs/patchelf"
  for f in gpueval gpueval_tests libgpueval_sentencepiece.so; do
    strip --strip-unneeded -o "$bundle/build/$f" "build-bundle/$f"
    "$debs/patchelf/usr/bin/patchelf" --set-rpath '$ORIGIN/../prefix/usr/lib/x86_64-linux-gnu' "$bundle/build/$f"
  done
  {
    echo "[build] route b: torch $torch_version cuda $torch_cuda arch ${TORCH_CUDA_ARCH_LIST:-9.0}, built in ${build_s}s with -j${JOBS:-$(nproc)} on $(nproc) cores"
    echo "torch_version=$torch_version"
    echo "torch_cuda=$torch_cuda"
    echo "sources=$(scripts/gpu/source_hash.sh)"
    grep '^-- gpueval:' build-bundle/configure.log | sed 's/^-- //'
    # What a from-source build (route a) costs: every compile and link step of the last full build.
    awk 'NR > 1 {d = ($2 - $1) / 1000; s += d; n++; if (d > m) m = d; if ($4 ~ /gch$/) pch = d}
         END {printf "build steps: %d, %.0f s summed (about %.0f s on 16 cores: PCH %.0f s, then %.0f s / 16), longest %.0f s\n", n, s, pch + (s - pch) / 16, pch, s - pch, m}' build-bundle/.ninja_log
    for f in gpueval gpueval_tests libgpueval_sentencepiece.so; do
      echo "$f $(stat -c %s "build-bundle/$f") bytes built, $(stat -c %s "$bundle/build/$f") stripped"
    done
  } >>"$manifest"
fi

# What every ELF file in the bundle needs from the system: the highest glibc / libstdc++ symbol
# versions, and the libraries it loads that the bundle does not hold.
elf_files=$(find "$bundle" -type f \( -name '*.so*' -o -path '*/bin/*' -o -path '*/build/*' \) -exec sh -c 'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
need() { for f in $elf_files; do objdump -T "$f" 2>/dev/null; done | grep -oE "$1_[0-9.]+" | sort -uV | tail -1; }
bundled_sonames=$(for f in $elf_files; do objdump -p "$f" | awk '/SONAME/ {print $2}'; done | sort -u)
external=$(for f in $elf_files; do objdump -p "$f" | awk '/NEEDED/ {print $2}'; done | sort -u | grep -vxF "$bundled_sonames" | tr '\n' ' ')
{
  echo "[needs] glibc $(need GLIBC), libstdc++ $(need GLIBCXX), $(need CXXABI)"
  echo "external libraries: $external"
} >>"$manifest"

size=$(du -sb "$bundle" | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
{
  echo "[size] bundle $size bytes ($((size / 1048576)) MiB); tracked files $tree bytes; carried together $(((size + tree) / 1048576)) MiB"
} >>"$manifest"
cat "$manifest"
echo "bundle: $bundle in $(($(date +%s) - start))s"
if [ "$size" -gt $((max_mib * 1048576)) ]; then
  echo "bundle: over ${max_mib} MiB" >&2
  exit 1
fi
