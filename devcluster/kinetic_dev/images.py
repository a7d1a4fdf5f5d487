"""The images the local cluster runs, built offline and served by a local registry.

Nothing comes from an image registry: this machine reaches only the package
registries (Debian, PyPI). So:

- a Debian bookworm root filesystem is made with ``mmdebstrap`` (cached);
- stand-ins for the public images that examples and tests name are built from
  it and from Debian packages: ``busybox`` (busybox-static), ``debian:12-slim``,
  ``python:3.X-slim`` (the interpreter of this checkout's virtualenv, so
  cloudpickle's bytes match), and ``kinetic-pause`` (the pod sandbox);
- ``kinetic-jax`` stands in for a user's JAX image: CPU jax and jaxlib from
  PyPI, through a wheelhouse of their own, on the python stand-in
  (``docker/jax.Dockerfile``), for gangs that meet through ``jax.distributed``;
- the project's own images are built from ``docker/*.Dockerfile`` with
  ``--network none``, their Python packages from a wheelhouse the host's pip
  fills (``docker/wheels``);
- everything is pushed to the local registry (Debian's ``docker-registry``),
  which containerd uses for every ``docker.io`` name: pulls, tags and
  ``imagePullPolicy`` behave as they do against Docker Hub, and an image that
  exists nowhere fails with ``ErrImagePull``.

Each image is rebuilt only when what it is made of changed (a content key,
recorded next to the registry's storage).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kinetic_dev import runtime
from kinetic_dev.config import LocalConfig
from kinetic_dev.engine import cache_root
from kinetic_dev.procs import ClusterError

SUITE = "bookworm"
# What the python stand-in's interpreter links against, plus what every image wants.
BASE_PACKAGES = (
    "ca-certificates",
    "netbase",
    "tzdata",
    "libbz2-1.0",
    "libexpat1",
    "libffi8",
    "liblzma5",
    "libncursesw6",
    "libreadline8",
    "libsqlite3-0",
    "libssl3",
    "libtirpc3",
    "libuuid1",
    "zlib1g",
)
# Keep the root filesystem small: no manuals, documentation or translations.
DPKG_EXCLUDES = (
    "/usr/share/man/*",
    "/usr/share/doc/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)
# Parts of a CPython install that no job needs (tests alone are 127 MB).
PYTHON_EXCLUDES = (
    "lib/python*/test",
    "lib/python*/idlelib",
    "lib/python*/tkinter",
    "lib/python*/turtledemo",
    "lib/python*/lib2to3/tests",
    "lib/python*/config-*/*.a",
    "lib/libpython*.a",
    "share",
    "include",
)
APP_NAME_RUNNER = "kinetic-runner"
APP_NAME_OPERATOR = "kinetic-operator"
PAUSE = "kinetic-pause:3.4"
# The JAX stand-in's release: jax and jaxlib of one version (they must match), pinned so
# the image, its tag and its cached wheels change only when this line does.
JAX_VERSION = "0.12.0.1"
JAX_REPOSITORY = "kinetic-jax"


@dataclass(frozen=True)
class Built:
    """The names one `ensure` run left in the registry, for the chart and the tests."""

    runner_repository: str
    runner_tag: str  # the runner for Python 3.X is <repository>:<tag>-py3.X
    python: str
    operator_image: str

    @property
    def runner_image(self) -> str:
        return f"{self.runner_repository}:{self.runner_tag}-py{self.python}"


def custom_runner(python: str) -> str:
    return f"{APP_NAME_RUNNER}:custom-py{python}"


def jax_image(python: str | None = None) -> str:
    """The JAX stand-in for Python 3.X (this interpreter's by default): tests name it."""
    return f"{JAX_REPOSITORY}:{JAX_VERSION}-py{python or python_version()}"


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def digest_files(paths: Iterable[Path], root: Path, *extra: str) -> str:
    """A content key over files (their paths relative to ``root`` and bytes) and strings."""
    h = hashlib.sha256()
    for s in extra:
        h.update(s.encode() + b"\0")
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def package_files(root: Path) -> list[Path]:
    """The files a package's image is made of (sources and metadata, not caches)."""
    skip = {"__pycache__", "build", ".mypy_cache", ".ruff_cache"}
    return [
        p
        for p in root.rglob("*")
        if p.is_file()
        and not any(
            part in skip or part.endswith(".egg-info") for part in p.relative_to(root).parts
        )
    ]


def busybox_tar(busybox: Path, applets: list[str]) -> bytes:
    """A root filesystem of busybox-static and its applet links (pure; unit-tested)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))

        for d in ("bin", "etc", "root", "home", "var", "usr", "usr/bin", "usr/sbin", "sbin"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_file("bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets:
            if applet == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
        add_file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
        )
        add_file("etc/group", b"root:x:0:\nnobody:x:65534:\n")
    return buf.getvalue()


def pause_tar(pause: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("pause")
        data = pause.read_bytes()
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Images:
    """Builds and pushes the local cluster's images through our Docker Engine."""

    def __init__(
        self,
        cfg: LocalConfig,
        repo_root: Path,
        bins: dict[str, str],
        out: Callable[[str], None],
        docker_host: str | None = None,
    ):
        """``docker_host`` None: our engine and our registry (the local cluster).
        Set: that engine (a user's, for kind), with no registry: images stay in it."""
        self.cfg = cfg
        self.repo = repo_root
        self.bins = bins
        self.out = out
        self.cache = cache_dir()
        self.log = cfg.logs_dir / "images.log"
        self.docker_host = docker_host or f"unix://{cfg.docker_socket}"
        self.registry = None if docker_host else f"127.0.0.1:{cfg.ports.registry}"
        self.python = python_version()

    # ---- plumbing -------------------------------------------------------------------------
    def docker(self, *args: str, stdin: bytes | None = None) -> str:
        env = {**os.environ, "DOCKER_HOST": self.docker_host, "DOCKER_BUILDKIT": "0"}
        with open(self.log, "ab") as log:
            log.write(f"\n$ docker {' '.join(args)}\n".encode())
            log.flush()
            proc = subprocess.run(
                [self.bins["docker"], *args],
                input=stdin,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
            log.write(proc.stdout[-4000:])
        if proc.returncode != 0:
            raise ClusterError(f"docker {args[0]} failed (exit {proc.returncode}); see {self.log}")
        return proc.stdout.decode(errors="replace").strip()

    def pull(self, ref: str) -> None:
        self.docker("pull", ref)

    def stamp_file(self, name: str) -> Path:
        where = "registry-stamps" if self.registry else "engine-stamps"
        return self.cache / where / name.replace("/", "_").replace(":", "_")

    def in_registry(self, name: str, tag: str) -> bool:
        url = f"http://{self.registry}/v2/library/{name}/manifests/{tag}"
        req = urllib.request.Request(
            url,
            method="HEAD",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status == 200
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return False
            raise

    def fresh(self, ref: str, key: str) -> bool:
        """The registry (or, without one, the engine) holds ``ref``, built from ``key``."""
        name, tag = ref.split(":", 1)
        stamp = self.stamp_file(ref)
        if not (stamp.exists() and stamp.read_text() == key):
            return False
        if self.registry is None:
            return bool(self.docker("images", "-q", ref))
        return self.in_registry(name, tag)

    def push(self, local: str, refs: Iterable[str], key: str) -> None:
        """Tag ``local`` as each of ``refs`` and push them to the registry (if there is one)."""
        for ref in refs:
            self.docker("tag", local, ref)
            if self.registry is not None:
                target = f"{self.registry}/library/{ref}"
                self.docker("tag", local, target)
                self.docker("push", target)
            stamp = self.stamp_file(ref)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(key)

    def step(self, what: str, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        self.out(f"  image: {what} ...")
        fn()
        self.out(f"  image: {what}: {time.monotonic() - t0:.0f}s")

    # ---- the Debian root filesystem --------------------------------------------------------
    def rootfs_key(self) -> str:
        return hashlib.sha256(
            json.dumps([SUITE, BASE_PACKAGES, DPKG_EXCLUDES]).encode()
        ).hexdigest()[:16]

    def rootfs(self) -> Path:
        """A bookworm minbase with BASE_PACKAGES, as a tar (mmdebstrap; cached)."""
        path = self.cache / f"rootfs-{SUITE}-{self.rootfs_key()}.tar"
        if path.exists():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        sources = Path("/etc/apt/sources.list.d/debian.sources")
        mirror = [str(sources)] if sources.exists() else []
        argv = [
            self.bins["mmdebstrap"],
            "--variant=minbase",
            "--format=tar",
            f"--include={','.join(BASE_PACKAGES)}",
            *(f"--dpkgopt=path-exclude={p}" for p in DPKG_EXCLUDES),
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            SUITE,
            str(tmp),
            *mirror,
        ]
        with open(self.log, "ab") as log:
            proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise ClusterError(
                f"mmdebstrap could not make the Debian base (exit {proc.returncode}); "
                f"see {self.log}"
            )
        tmp.replace(path)
        return path

    def base_image(self) -> str:
        """The root filesystem as a local image (``docker import``)."""
        name = f"kinetic-local-base:{self.rootfs_key()}"
        if not self.docker("images", "-q", name):
            tar = self.rootfs()
            self.docker(
                "import",
                "--change",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--change",
                'CMD ["bash"]',
                str(tar),
                name,
            )
        return name

    # ---- stand-ins -----------------------------------------------------------------------
    def ensure_debian(self) -> None:
        refs = ["debian:12-slim", "debian:12", "debian:bookworm-slim", "debian:bookworm"]
        key = self.rootfs_key()
        if all(self.fresh(r, key) for r in refs):
            return
        self.step(
            "debian:12-slim (mmdebstrap; first time about a minute)",
            lambda: self.push(self.base_image(), refs, key),
        )

    def ensure_busybox(self) -> None:
        busybox = Path(shutil.which("busybox") or "/bin/busybox")
        refs = ["busybox:1.36", "busybox:1", "busybox:latest"]
        key = digest_files([busybox.resolve()], busybox.resolve().parent, "busybox-1")
        if all(self.fresh(r, key) for r in refs):
            return

        def build() -> None:
            applets = subprocess.run(
                [str(busybox), "--list"], capture_output=True, text=True, check=True
            ).stdout.split()
            self.docker(
                "import",
                "--change",
                'CMD ["sh"]',
                "-",
                "kinetic-local-busybox:latest",
                stdin=busybox_tar(busybox.resolve(), applets),
            )
            self.push("kinetic-local-busybox:latest", refs, key)

        self.step("busybox (busybox-static)", build)

    def ensure_pause(self) -> None:
        pause = Path(self.bins["pause"])
        key = digest_files([pause], pause.parent, "pause-1")
        if self.fresh(PAUSE, key):
            return

        def build() -> None:
            self.docker(
                "import",
                "--change",
                'ENTRYPOINT ["/pause"]',
                "-",
                "kinetic-local-pause:latest",
                stdin=pause_tar(pause),
            )
            self.push("kinetic-local-pause:latest", [PAUSE], key)

        self.step("kinetic-pause (the pod sandbox)", build)

    def python_prefix(self) -> Path:
        """The installation the virtualenv's interpreter comes from."""
        return Path(sys.base_prefix)

    def ensure_python(self) -> None:
        v = self.python
        refs = [f"python:{v}-slim", f"python:{v}", f"python:{v}-slim-{SUITE}"]
        prefix = self.python_prefix()
        key = hashlib.sha256(
            f"{self.rootfs_key()} {prefix} {sys.version} python-1".encode()
        ).hexdigest()
        if all(self.fresh(r, key) for r in refs):
            return

        def build() -> None:
            with tempfile.TemporaryDirectory(prefix="kinetic-python-") as tmp:
                ctx = Path(tmp)
                copy_python(prefix, ctx / "python", v)
                (ctx / "Dockerfile").write_text(python_dockerfile(self.base_image(), v))
                self.docker(
                    "build",
                    "--network",
                    "none",
                    "-q",
                    "-t",
                    "kinetic-local-python:latest",
                    str(ctx),
                )
            self.push("kinetic-local-python:latest", refs, key)

        self.step(f"python:{v}-slim (this machine's Python {v} on the Debian base)", build)

    # ---- the project's images ---------------------------------------------------------------
    def wheelhouse(self) -> tuple[Path, str]:
        """The Python packages both images install, as wheels for this interpreter."""
        wheels = self.repo / "docker" / "wheels"
        freeze = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        pins = "\n".join(
            line for line in freeze.splitlines() if "==" in line and not line.startswith("-e")
        )
        wanted = [
            f"{self.repo / 'client'}[debug]",  # the runner image installs the debug extra
            str(self.repo / "operator"),
            "setuptools>=77",
            "wheel",
        ]
        key = digest_files(
            [self.repo / "client" / "pyproject.toml", self.repo / "operator" / "pyproject.toml"],
            self.repo,
            pins + "\n" + "\n".join(w.removeprefix(str(self.repo)) for w in wanted),
            self.python,
        )
        stamp = wheels / ".key"
        if stamp.exists() and stamp.read_text() == key:
            return wheels, key

        def build() -> None:
            for old in wheels.glob("*.whl"):
                old.unlink()
            constraints = self.cache / "wheel-constraints.txt"
            constraints.parent.mkdir(parents=True, exist_ok=True)
            constraints.write_text(pins + "\n")
            argv = [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "-w",
                str(wheels),
                "-c",
                str(constraints),
                *wanted,
            ]
            with open(self.log, "ab") as log:
                proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
            if proc.returncode != 0:
                raise ClusterError(f"pip wheel failed (exit {proc.returncode}); see {self.log}")
            # Our own packages are built from source in the image, not taken from here.
            for own in list(wheels.glob("kinetic-*.whl")) + list(
                wheels.glob("kinetic_operator-*.whl")
            ):
                own.unlink()
            stamp.write_text(key)

        self.step("wheelhouse (pip wheel: the images' Python packages)", build)
        return wheels, key

    def ensure_project(self) -> Built:
        """The runner and operator images from docker/*.Dockerfile, offline from the
        wheelhouse, on ``python:3.X-slim`` (our stand-in here; Docker Hub's for kind)."""
        wheels, wheel_key = self.wheelhouse()
        version = chart_app_version(self.repo)
        base = f"python:{self.python}-slim"
        if self.registry is None and not self.docker("images", "-q", base):
            self.step(f"{base} (docker pull)", lambda: self.pull(base))
        base_key = (
            self.stamp_file(base).read_text()
            if self.registry
            else self.docker("images", "-q", base)
        )
        client = package_files(self.repo / "client")
        operator = package_files(self.repo / "operator")
        runner_key = digest_files(
            [*client, self.repo / "docker" / "runner.Dockerfile"],
            self.repo,
            wheel_key,
            base_key,
        )
        operator_key = digest_files(
            [*client, *operator, self.repo / "docker" / "operator.Dockerfile"],
            self.repo,
            wheel_key,
            base_key,
        )
        runner_tag = f"{version}-{runner_key[:10]}"
        runner_ref = f"{APP_NAME_RUNNER}:{runner_tag}-py{self.python}"
        operator_ref = f"{APP_NAME_OPERATOR}:{version}-{operator_key[:10]}"
        for ref, dockerfile, key in (
            (runner_ref, "runner.Dockerfile", runner_key),
            (operator_ref, "operator.Dockerfile", operator_key),
        ):
            if self.fresh(ref, key):
                continue

            def build(ref: str = ref, dockerfile: str = dockerfile, key: str = key) -> None:
                self.docker(
                    "build",
                    "--network",
                    "none",
                    "-q",
                    "-f",
                    str(self.repo / "docker" / dockerfile),
                    "--build-arg",
                    f"BASE={base}",
                    "--build-arg",
                    "PIP_OPTIONS=--no-index --find-links=/wheels",
                    "-t",
                    ref,
                    str(self.repo),
                )
                # The runner is also the tests' and examples' "custom image": one a user
                # would build FROM it, named by the user (kinetic-runner:custom-py3.X).
                extra = [custom_runner(self.python)] if ref == runner_ref else []
                self.push(ref, [ref, *extra], key)

            self.step(f"{ref} (docker/{dockerfile})", build)
        return Built(
            runner_repository=APP_NAME_RUNNER,
            runner_tag=runner_tag,
            python=self.python,
            operator_image=operator_ref,
        )

    def jax_wheels(self) -> Path:
        """jax and jaxlib (and what they need) as wheels for this interpreter, downloaded
        once by the host's pip (so through its index and proxy settings) and kept."""
        wheels = self.cache / f"wheels-jax-{JAX_VERSION}-py{self.python}"
        done = wheels / ".complete"
        if done.exists():
            return wheels

        def download() -> None:
            shutil.rmtree(wheels, ignore_errors=True)
            wheels.mkdir(parents=True)
            argv = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                "-d",
                str(wheels),
                f"jax=={JAX_VERSION}",
                f"jaxlib=={JAX_VERSION}",
            ]
            with open(self.log, "ab") as log:
                proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
            if proc.returncode != 0:
                raise ClusterError(
                    f"pip could not download jax=={JAX_VERSION} and jaxlib for Python "
                    f"{self.python} (exit {proc.returncode}); see {self.log}"
                )
            done.write_text("\n".join(sorted(p.name for p in wheels.glob("*.whl"))) + "\n")

        self.step(f"JAX {JAX_VERSION} wheels (pip download, about 140 MB)", download)
        return wheels

    def ensure_jax(self) -> None:
        """The JAX stand-in (`jax_image`), on the python stand-in, built offline."""
        ref = jax_image(self.python)
        base = f"python:{self.python}-slim"
        dockerfile = self.repo / "docker" / "jax.Dockerfile"
        key = digest_files([dockerfile], self.repo, JAX_VERSION, self.stamp_file(base).read_text())
        if self.fresh(ref, key):
            return
        wheels = self.jax_wheels()

        def build() -> None:
            self.docker(
                "build",
                "--network",
                "none",
                "-q",
                "-f",
                str(dockerfile),
                "--build-arg",
                f"BASE={base}",
                "--build-arg",
                f"JAX_VERSION={JAX_VERSION}",
                "-t",
                ref,
                str(wheels),
            )
            self.push(ref, [ref], key)

        self.step(f"{ref} (docker/jax.Dockerfile; first time a few minutes)", build)

    def ensure_all(self) -> Built:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.ensure_pause()
        self.ensure_busybox()
        self.ensure_debian()
        self.ensure_python()
        self.ensure_jax()
        return self.ensure_project()


def cache_dir() -> Path:
    return cache_root() / "images"


def chart_app_version(repo: Path) -> str:
    for line in (repo / "helm" / "kinetic" / "Chart.yaml").read_text().splitlines():
        if line.startswith("appVersion:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    raise ClusterError("helm/kinetic/Chart.yaml has no appVersion")


def python_dockerfile(base: str, version: str) -> str:
    """The python:3.X-slim stand-in: an installed CPython copied under /usr/local."""
    return f"""FROM {base}
COPY python/ /usr/local/
RUN ldconfig && ln -sf python{version} /usr/local/bin/python3 \\
 && ln -sf python3 /usr/local/bin/python \\
 && python3 -c "import ssl, sqlite3, ctypes, uuid, lzma, bz2, zlib, readline"
ENV LANG=C.UTF-8 PYTHON_VERSION={version}
CMD ["python3"]
"""


def copy_python(prefix: Path, dest: Path, version: str) -> None:
    """Copy an installed CPython, without its tests and the packages installed into it
    (pip stays), rewriting script shebangs to /usr/local/bin."""
    import fnmatch

    def ignored(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(prefix)
        out = set()
        for name in names:
            path = str(rel / name) if str(rel) != "." else name
            if any(fnmatch.fnmatch(path, pat) for pat in PYTHON_EXCLUDES):
                out.add(name)
        if rel == Path("lib") / f"python{version}" / "site-packages":
            out |= {n for n in names if not (n == "pip" or n.startswith("pip-"))}
        return out

    shutil.copytree(prefix, dest, symlinks=True, ignore=ignored)
    for script in (dest / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            head = script.read_bytes()[:128]
            if head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]:
                rest = script.read_bytes().split(b"\n", 1)[1]
                script.write_bytes(f"#!/usr/local/bin/python{version}\n".encode() + rest)


def prepull(cfg: LocalConfig, ctr: str, built: Built, out: Callable[[str], None]) -> None:
    """Pull the images every test and the operator start from into the node, once.

    The kubelet would pull them on first use; pulling here keeps a first pod's
    start (and a first test's timeout) free of a 300 MB download.
    """
    refs = [f"docker.io/library/{PAUSE}", f"docker.io/library/{built.operator_image}"]
    refs += [f"docker.io/library/{built.runner_image}", "docker.io/library/busybox:1.36"]
    listed = subprocess.run(
        runtime.ctr_command(cfg, ctr, "images", "ls", "-q"),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    for ref in refs:
        if ref in listed:
            continue
        t0 = time.monotonic()
        hosts = str(runtime.registry_hosts_dir(cfg))
        proc = subprocess.run(
            runtime.ctr_command(cfg, ctr, "images", "pull", "--hosts-dir", hosts, ref),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise ClusterError(f"the node could not pull {ref}: {proc.stderr.strip()[-500:]}")
        out(f"  node pulled {ref} ({time.monotonic() - t0:.0f}s)")
