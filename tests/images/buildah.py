"""Run the built images as a kubelet runs a pod's container, with buildah and no daemon.

``hack/build-images.sh`` builds the images into a buildah store of its own and names it in the
environment (:data:`ENV_ROOT`, :data:`ENV_RUNROOT`, :data:`ENV_DRIVER`, :data:`ENV_OPERATOR`,
:data:`ENV_PROBE`); without those the image tests skip, saying how to build.

A container runs with ``buildah run --isolation chroot``: the host's network (so it reaches a
control plane on 127.0.0.1), the image's environment and user unless told otherwise, bind mounts
for volumes. ``podman run`` is not an option on these machines (its OCI runtime cannot set
rlimits here). Kubernetes runs the chart's pods and the measurement Jobs with
``readOnlyRootFilesystem: true``; buildah has no such switch, so :func:`command` makes one: in a
private mount namespace (``unshare -m``, gone when the process ends) the container's root
directory is bind-mounted onto itself and remounted read-only before ``buildah run`` starts, and
the container sees that read-only mount as ``/``. A write outside the mounted volumes then fails
with ``EROFS`` as in the pod. ``/run`` stays a separate writable bind, because buildah creates and
removes ``/run/.containerenv`` around each run (on a read-only ``/run`` its clean-up fails and
buildah 1.28 panics); :func:`run_leftovers` tells what a run left there, which must be nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_ROOT = "GPU_SIZER_BUILDAH_ROOT"
ENV_RUNROOT = "GPU_SIZER_BUILDAH_RUNROOT"
ENV_DRIVER = "GPU_SIZER_BUILDAH_DRIVER"
ENV_OPERATOR = "GPU_SIZER_OPERATOR_IMAGE"
ENV_PROBE = "GPU_SIZER_PROBE_IMAGE"
HOW_TO_BUILD = "hack/build-images.sh builds the images and runs these tests against them"


class BuildahError(RuntimeError):
    """A buildah command failed; the message has its command line and output."""


@dataclass(frozen=True)
class Volume:
    """A host path bind-mounted into the container (a pod volume's ``volumeMount``)."""

    host: Path
    path: str
    read_only: bool = False

    def option(self) -> str:
        return f"{self.host}:{self.path}:{'ro' if self.read_only else 'rw'}"


@dataclass(frozen=True)
class Store:
    """A buildah image store: storage driver, root and run root."""

    driver: str
    root: Path
    runroot: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Store | None:
        root, runroot = env.get(ENV_ROOT, ""), env.get(ENV_RUNROOT, "")
        if not root or not runroot:
            return None
        return cls(env.get(ENV_DRIVER, "") or "vfs", Path(root), Path(runroot))

    def argv(self, *args: str) -> list[str]:
        base = ["buildah", "--storage-driver", self.driver, "--root", str(self.root)]
        return [*base, "--runroot", str(self.runroot), *args]

    def call(self, *args: str, timeout: float = 300) -> str:
        """Run ``buildah ARGS`` on this store; its stdout. :raises BuildahError: it failed."""
        proc = subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise BuildahError(
                f"{shlex.join(self.argv(*args))} exited {proc.returncode}:\n"
                f"{proc.stdout}{proc.stderr}"
            )
        return proc.stdout

    def inspect(self, image: str) -> dict[str, Any]:
        """``buildah inspect --type image``: the image's OCI config under ``OCIv1``."""
        doc: dict[str, Any] = json.loads(self.call("inspect", "--type", "image", image))
        return doc

    @contextlib.contextmanager
    def container(self, image: str) -> Iterator[Container]:
        """A working container of ``image`` (never pulled), removed afterwards."""
        name = self.call("from", "--pull=never", "--quiet", image).strip()
        try:
            yield Container(self, name, Path(self.call("mount", name).strip()))
        finally:
            with contextlib.suppress(BuildahError, subprocess.TimeoutExpired):
                self.call("umount", name)
            with contextlib.suppress(BuildahError, subprocess.TimeoutExpired):
                self.call("rm", name)


@dataclass(frozen=True)
class Container:
    """A working container: its name and where its root directory is on the host."""

    store: Store
    name: str
    rootfs: Path

    def command(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        volumes: Sequence[Volume] = (),
        user: str | None = None,
        workdir: str | None = None,
        read_only_root: bool = True,
    ) -> list[str]:
        """The host command line that runs ``argv`` in the container (see the module doc)."""
        run = ["run", "--isolation", "chroot"]
        if user is not None:
            run += ["--user", user]
        if workdir is not None:
            run += ["--workingdir", workdir]
        for key, value in (env or {}).items():
            run += ["--env", f"{key}={value}"]
        for volume in volumes:
            # Destinations go to buildah with their links resolved inside the container: given
            # /var/run/... (a link to /run in Debian), buildah 1.28's chroot isolation creates
            # the mount point by following the link on the host, in the host's /run.
            target = inside(self.rootfs, volume.path)
            path = "/" + str(target.relative_to(self.rootfs))
            run += ["--volume", Volume(volume.host, path, volume.read_only).option()]
            if read_only_root:
                mountpoint(self.rootfs, path, file=volume.host.is_file())
        buildah = self.store.argv(*run, self.name, "--", *argv)
        if not read_only_root:
            return buildah
        root = shlex.quote(str(self.rootfs))
        script = (
            f"set -e; mount --bind {root} {root}; mount --bind {root}/run {root}/run; "
            f"mount -o remount,bind,ro {root}; exec {shlex.join(buildah)}"
        )
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]

    def run(
        self, argv: Sequence[str], *, timeout: float = 300, **options: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to its end (stdout and stderr captured apart)."""
        return subprocess.run(
            self.command(argv, **options),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def run_entries(self) -> set[str]:
        """Paths under the container's ``/run`` (the one writable place of its root)."""
        top = self.rootfs / "run"
        return {str(p.relative_to(self.rootfs)) for p in top.rglob("*")}


def inside(rootfs: Path, path: str) -> Path:
    """Where ``path`` of the container is on the host: symbolic links are followed inside
    ``rootfs`` (an absolute target is taken from the container's root, as in the container),
    never out to the host's own files (``/var/run -> /run`` must not reach the host's ``/run``).

    :raises ValueError: a link loop, or a path through a file.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        here = rootfs.joinpath(*resolved, part)
        if here.is_symlink():
            hops += 1
            if hops > 40:
                raise ValueError(f"{path}: too many symbolic links in the container")
            target = os.readlink(here)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return rootfs.joinpath(*resolved)


def mountpoint(rootfs: Path, path: str, *, file: bool = False) -> Path:
    """Make the mount point of a volume at ``path`` in the container's root directory, as a
    container runtime makes it in the container's writable layer before the root goes
    read-only (buildah would try to, and fail, on a read-only root)."""
    target = inside(rootfs, path)
    if file:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
    return target


def run_leftovers(before: set[str], container: Container) -> list[str]:
    """What appeared under ``/run`` since ``before`` (``Container.run_entries``)."""
    return sorted(container.run_entries() - before)


def unavailable() -> str | None:
    """Why images cannot be run here (None when they can): buildah, unshare and root."""
    if os.geteuid() != 0:
        return "running images with buildah needs root (vfs storage, chroot isolation, mounts)"
    missing = [tool for tool in ("buildah", "unshare") if shutil.which(tool) is None]
    if missing:
        return f"needs {' and '.join(missing)} (Debian: apt-get install buildah)"
    return None
