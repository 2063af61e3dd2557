#!/usr/bin/env bash
# Build the operator and probe images without a Docker daemon and check them from inside.
#
#   hack/build-images.sh        # as root, from a virtual environment with '.[test,probe]'
#
# What it does, each step timed:
#   1. a wheelhouse: the package's dependencies (probe extra included), setuptools for the
#      build, and torch==2.13.0 (the CPU build this machine's pip finds), made by the active
#      Python's pip (it must be 3.11, the bases' Python);
#   2. the bases, from Debian's packages: Debian bookworm minbase with python3, python3-venv and
#      python3-pip (mmdebstrap) for the operator, the same plus torch 2.13.0 CPU in the system
#      Python for the probe (the public PyTorch images carry torch in theirs too);
#   3. docker/operator.Dockerfile and docker/probe.Dockerfile, unchanged, with buildah on those
#      bases (build arguments PYTHON_IMAGE, PYTORCH_IMAGE) and pip told by its own settings to
#      install from the wheelhouse (PIP_NO_INDEX, PIP_FIND_LINKS; the wheelhouse is mounted into
#      the build); each image is tagged with the reference the chart deploys by default;
#   4. their sizes;
#   5. tests/images against them (pytest): entry points, numeric non-root user, read-only root
#      filesystem, no torch or emulator in the operator image, the probe's result as the
#      measurement protocol says, OCI labels, and the operator from its image against a real
#      control plane (KUBEBUILDER_ASSETS) applying examples until they settle.
#
# Why this way: container registries cannot be reached from these machines (no public base can
# be pulled) and pip inside a build cannot verify the package index's TLS chain (the host's CA
# bundle is not in the image), so the bases come from Debian's packages and the wheels are
# fetched outside, the usual way of building images offline. Users build the same Dockerfiles
# with Docker from the public bases (README, "Images").
#
# Needs root, buildah, mmdebstrap and unshare (Debian: apt-get install buildah mmdebstrap).
# Exit status: 0 built and checked; 1 a step or a check failed; 2 this machine cannot build here
# (the message says what is missing).
#
# Environment: GPU_SIZER_IMAGES_DIR (work folder; default a new one under /var/tmp, removed at
# the end unless GPU_SIZER_KEEP_IMAGES=1); GPU_SIZER_REUSE_BASES=1 keeps the bases already in
# that folder's store (a developer's rebuild; CI builds them every time); GPU_SIZER_BASE_CACHE
# (where the Debian root filesystem is kept for a week, default ~/.cache/gpu-sizer/images) and
# GPU_SIZER_FRESH_BASE=1 (make it again); STORAGE_DRIVER
# (buildah's: default overlay where this kernel mounts it in the work folder, else vfs);
# DEBIAN_MIRROR (default: mmdebstrap's choice, Debian's own).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }
die() { printf 'build-images: %s\n' "$*" >&2; exit "${2:-1}"; }
started=$SECONDS
step_start=$SECONDS
step() { say "$1 (previous step $((SECONDS - step_start)) s)"; step_start=$SECONDS; }

[ "$(id -u)" -eq 0 ] || die "needs root (buildah storage, chroot isolation, bind mounts)" 2
for tool in buildah mmdebstrap unshare; do
  command -v "$tool" >/dev/null || die "needs $tool (Debian: apt-get install buildah mmdebstrap)" 2
done
python=${PYTHON:-python}
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
  || die "$python must be Python 3.11 (Debian bookworm's) to make the wheelhouse" 2

work=${GPU_SIZER_IMAGES_DIR:-$(mktemp -d /var/tmp/gpu-sizer-images.XXXXXX)}
mkdir -p "$work"
store=(--root "$work/storage" --runroot "$work/run")
if [ -z "${STORAGE_DRIVER:-}" ]; then
  # overlay shares the bases' layers between containers instead of copying them (vfs copies
  # the whole root at every container and commit: minutes for the probe's 1.5 GB).
  STORAGE_DRIVER=vfs
  if probe=$(buildah --storage-driver overlay "${store[@]}" from scratch 2>/dev/null) \
    && buildah --storage-driver overlay "${store[@]}" mount "$probe" >/dev/null 2>&1; then
    STORAGE_DRIVER=overlay
  fi
  [ -n "${probe:-}" ] && buildah --storage-driver overlay "${store[@]}" rm "$probe" >/dev/null 2>&1
  [ "$STORAGE_DRIVER" = overlay ] || rm -rf --one-file-system "$work/storage" "$work/run"
fi
buildah=(buildah --storage-driver "$STORAGE_DRIVER" "${store[@]}")
cleanup() {
  status=$?
  if [ "${GPU_SIZER_KEEP_IMAGES:-0}" = 1 ]; then
    say "kept $work: ${buildah[*]} images"
  else
    "${buildah[@]}" rm --all >/dev/null 2>&1 || true
    "${buildah[@]}" rmi --all --force >/dev/null 2>&1 || true
    rm -rf --one-file-system "$work"
  fi
  exit "$status"
}
trap cleanup EXIT

# The references the chart deploys by default (values.yaml repository, Chart.yaml appVersion).
read -r operator_image probe_image < <("$python" - <<'EOF'
import yaml
values = yaml.safe_load(open("charts/gpu-sizer/values.yaml"))
version = yaml.safe_load(open("charts/gpu-sizer/Chart.yaml"))["appVersion"]
refs = [values["image"], values["measurement"]["probeImage"]]
print(*(f"{r['repository']}:{r['tag'] or version}" for r in refs))
EOF
)
python_base=localhost/gpu-sizer-base/python:bookworm
torch_base=localhost/gpu-sizer-base/torch-cpu:bookworm
offline=(--build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheelhouse
         --volume "$work/wheels:/wheelhouse:ro")

# The Debian root filesystem is kept between runs for a week, as Docker keeps a pulled base:
# mmdebstrap takes 1.5 to 5 minutes on a loaded 2-core machine. The images themselves are built
# from their Dockerfiles every time. GPU_SIZER_FRESH_BASE=1 makes a new one.
base_cache=${GPU_SIZER_BASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-sizer/images}
mmdebstrap_args=(--variant=minbase --include=python3,python3-venv,python3-pip
  --aptopt='Acquire::Check-Valid-Until "false"'
  # the merged-/usr hook instead of the usrmerge package (which brings perl); documentation,
  # man pages and translations left out and dpkg's fsyncs off, as Debian's container images do
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --dpkgopt=force-unsafe-io
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright')

debian_rootfs() {  # prints the path of a bookworm tarball no older than 7 days
  local key tarball
  key=$(printf '%s\n' "${mmdebstrap_args[@]}" "${DEBIAN_MIRROR:-}" | sha256sum | cut -c1-16)
  tarball=$base_cache/bookworm-$key.tar
  if [ "${GPU_SIZER_FRESH_BASE:-0}" != 1 ] && [ -n "$(find "$tarball" -mtime -7 2>/dev/null)" ]
  then
    say "Debian bookworm root filesystem from $tarball ($(date -r "$tarball" +%F))" >&2
  else
    mkdir -p "$base_cache"
    mmdebstrap "${mmdebstrap_args[@]}" bookworm "$work/bookworm.tar" \
      ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >"$work/mmdebstrap.log" 2>&1 \
      || { tail -30 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed (the end of its log above)"; }
    mv "$work/bookworm.tar" "$tarball.part" && mv "$tarball.part" "$tarball"
  fi
  printf '%s\n' "$tarball"
}

make_python_base() {
  local ctr tarball
  tarball=$(debian_rootfs)
  ctr=$("${buildah[@]}" from scratch)
  "${buildah[@]}" add --quiet "$ctr" "$tarball" /
  "${buildah[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
  "${buildah[@]}" commit --quiet --rm "$ctr" "$python_base" >/dev/null
}

make_torch_base() {
  local ctr
  ctr=$("${buildah[@]}" from --pull=never --quiet "$python_base")
  # Debian marks its Python externally managed (PEP 668); a base image's system Python is the
  # image maker's to fill, as the PyTorch images install torch into theirs. --no-compile skips
  # byte-compiling torch's thousands of modules here (with it, this base and the operator image
  # beside it took 11 minutes at load 20); the probe compiles the ones it imports when it
  # starts, in memory (its root is read-only).
  "${buildah[@]}" run --isolation chroot --volume "$work/wheels:/wheelhouse:ro" "$ctr" -- \
    python3 -m pip install --quiet --no-cache-dir --no-compile --root-user-action=ignore \
    --break-system-packages --no-index --find-links /wheelhouse torch==2.13.0
  "${buildah[@]}" commit --quiet --rm "$ctr" "$torch_base" >/dev/null
}

build() {  # build DOCKERFILE BASE_ARG BASE TAG
  "${buildah[@]}" bud --isolation chroot --pull=never --quiet "${offline[@]}" \
    --build-arg "$2=$3" -f "$1" -t "$4" . >"$work/$(basename "$1").log" 2>&1 \
    || { tail -40 "$work/$(basename "$1").log" >&2
         echo "build-images: building $1 failed (the end of its log above)" >&2; return 1; }
}

say "buildah storage: $STORAGE_DRIVER in $work"
step "1/5 wheelhouse"
# pip's own configuration on this machine (PIP_FIND_LINKS) is what finds torch's CPU build; the
# package itself is built inside the images from its sources.
"$python" -m pip wheel --quiet --wheel-dir "$work/wheels" \
  '.[probe]' 'setuptools>=69' torch==2.13.0 2> >(grep -v "is ignored: it is neither" >&2)
rm -f "$work"/wheels/gpu_sizer-*.whl
ls "$work"/wheels/torch-2.13.0*.whl >/dev/null
say "$(find "$work/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$work/wheels" | cut -f1)"

step "2/5 the Debian bookworm python3 base (mmdebstrap)"
if [ "${GPU_SIZER_REUSE_BASES:-0}" = 1 ] \
  && "${buildah[@]}" inspect --type image "$torch_base" >/dev/null 2>&1; then
  say "reusing $python_base and $torch_base (GPU_SIZER_REUSE_BASES=1)"
  reuse=1
else
  make_python_base
  reuse=0
fi

step "3/5 the images (the operator's beside the torch base and the probe's)"
# Two jobs at once: most of the time goes to unpacking and copying files, not to the CPU.
build docker/operator.Dockerfile PYTHON_IMAGE "$python_base" "$operator_image" &
operator_job=$!
[ "$reuse" = 1 ] || make_torch_base
build docker/probe.Dockerfile PYTORCH_IMAGE "$torch_base" "$probe_image"
wait "$operator_job" || die "building docker/operator.Dockerfile failed"

step "4/5 sizes"
"${buildah[@]}" images --noheading --format '{{.Name}}:{{.Tag}}  {{.Size}}' | grep -v '^<none>'

step "5/5 checks from inside the images (tests/images)"
GPU_SIZER_BUILDAH_DRIVER=$STORAGE_DRIVER GPU_SIZER_BUILDAH_ROOT=$work/storage \
GPU_SIZER_BUILDAH_RUNROOT=$work/run GPU_SIZER_OPERATOR_IMAGE=$operator_image \
GPU_SIZER_PROBE_IMAGE=$probe_image \
  "$python" -m pytest -q -p no:cacheprovider -n 0 tests/images
say "built and checked in $((SECONDS - started)) s"
