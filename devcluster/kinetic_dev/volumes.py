"""Pure logic of the process node's volumes: Pod volumes -> files on disk -> bind mounts.

A kubelet gives each container its volumes at their ``mountPath``. The
process node runs containers on the host's filesystem, so it writes each
volume's files under the pod's directory and runs the container in its own
mount namespace (``unshare -m``) where those directories are bind-mounted at
the mount paths: the ServiceAccount token lands at
``/var/run/secrets/kubernetes.io/serviceaccount`` for that pod only.

Supported: emptyDir, configMap, secret, downwardAPI, hostPath and projected
(secret, configMap, downwardAPI, serviceAccountToken sources): what the
admission plugins and charts put in pods. Anything else is refused with a
message naming the volume. No I/O here; the node fetches data through the
callables it passes in.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from kinetic_dev.podspec import PodConfigError, field_ref

SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600

# (kind "configMap" | "secret", namespace, name) -> key -> bytes, or None if absent
FetchData = Callable[[str, str, str], "dict[str, bytes] | None"]
# (audience or None, expirationSeconds) -> a token bound to the pod
FetchToken = Callable[["str | None", int], str]


@dataclass(frozen=True)
class VolumeFile:
    """One file of a volume, relative to the volume's directory."""

    path: str
    content: bytes
    mode: int = DEFAULT_MODE


@dataclass(frozen=True)
class Mount:
    """Bind ``source`` (a directory under the pod's directory, or a host path) at ``target``."""

    source: str
    target: str
    read_only: bool = False


def _relative(path: str, where: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise PodConfigError(f"{where}: path {path!r} must be relative and stay inside the volume")
    return str(p)


def _keyed_files(
    data: Mapping[str, bytes],
    items: list[Mapping] | None,
    default_mode: int,
    where: str,
) -> list[VolumeFile]:
    """configMap/secret data -> files: every key, or only ``items`` at their paths."""
    if not items:
        return [VolumeFile(_relative(k, where), v, default_mode) for k, v in sorted(data.items())]
    files = []
    for item in items:
        key = item["key"]
        if key not in data:
            raise PodConfigError(f"{where}: key {key!r} not found")
        files.append(
            VolumeFile(_relative(item["path"], where), data[key], item.get("mode") or default_mode)
        )
    return files


def _object_files(
    kind: str,
    source: Mapping,
    ns: str,
    fetch: FetchData,
    default_mode: int,
    where: str,
) -> list[VolumeFile]:
    name = source.get("secretName" if kind == "secret" else "name") or source.get("name")
    if not name:
        raise PodConfigError(f"{where}: a {kind} volume needs a name")
    data = fetch(kind, ns, name)
    if data is None:
        if source.get("optional"):
            return []
        raise PodConfigError(f"{where}: {kind} {ns}/{name} not found")
    return _keyed_files(data, source.get("items"), default_mode, where)


def _downward_files(
    pod: Mapping, source: Mapping, node_name: str, pod_ip: str, default_mode: int, where: str
) -> list[VolumeFile]:
    files = []
    for item in source.get("items") or []:
        if not item.get("fieldRef"):
            raise PodConfigError(f"{where}: only fieldRef items are supported on the process node")
        value = field_ref(pod, item["fieldRef"]["fieldPath"], node_name, pod_ip)
        files.append(
            VolumeFile(
                _relative(item["path"], where), value.encode(), item.get("mode") or default_mode
            )
        )
    return files


def volume_files(
    pod: Mapping,
    volume: Mapping,
    *,
    node_name: str,
    pod_ip: str,
    fetch: FetchData,
    token: FetchToken,
) -> list[VolumeFile] | None:
    """The files a volume holds; [] for an empty directory; None for a hostPath (no files)."""
    ns = pod["metadata"]["namespace"]
    where = f"volume {volume['name']!r}"
    if "emptyDir" in volume:
        return []
    if "hostPath" in volume:
        return None
    for kind in ("configMap", "secret"):
        if kind in volume:
            src = volume[kind] or {}
            mode = src.get("defaultMode") or DEFAULT_MODE
            return _object_files(kind, src, ns, fetch, mode, where)
    if "downwardAPI" in volume:
        src = volume["downwardAPI"] or {}
        return _downward_files(
            pod, src, node_name, pod_ip, src.get("defaultMode") or DEFAULT_MODE, where
        )
    if "projected" in volume:
        src = volume["projected"] or {}
        mode = src.get("defaultMode") or DEFAULT_MODE
        files: list[VolumeFile] = []
        for part in src.get("sources") or []:
            if part.get("secret"):
                files += _object_files("secret", part["secret"], ns, fetch, mode, where)
            elif part.get("configMap"):
                files += _object_files("configMap", part["configMap"], ns, fetch, mode, where)
            elif part.get("downwardAPI"):
                files += _downward_files(pod, part["downwardAPI"], node_name, pod_ip, mode, where)
            elif part.get("serviceAccountToken"):
                sat = part["serviceAccountToken"]
                value = token(
                    sat.get("audience"), int(sat.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
                )
                files.append(VolumeFile(_relative(sat["path"], where), value.encode(), mode))
            else:
                raise PodConfigError(f"{where}: unsupported projected source {sorted(part)}")
        return files
    kinds = sorted(k for k in volume if k != "name")
    raise PodConfigError(
        f"{where}: type {', '.join(kinds) or '(none)'} is not supported on the process node; "
        "use emptyDir, configMap, secret, downwardAPI, projected or hostPath"
    )


def container_mounts(pod: Mapping, container: Mapping, volumes_dir: str) -> list[Mount]:
    """The container's volumeMounts as bind mounts, in order (a later mount may nest inside)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    mounts = []
    for vm in container.get("volumeMounts") or []:
        where = f"container {container['name']!r} volumeMount {vm.get('name')!r}"
        volume = volumes.get(vm["name"])
        if volume is None:
            raise PodConfigError(f"{where}: no volume of that name in the pod")
        if vm.get("subPath") or vm.get("subPathExpr"):
            raise PodConfigError(f"{where}: subPath is not supported on the process node")
        target = vm["mountPath"]
        if not target.startswith("/"):
            raise PodConfigError(f"{where}: mountPath {target!r} must be absolute")
        if "hostPath" in volume:
            source = volume["hostPath"]["path"]
        else:
            source = f"{volumes_dir.rstrip('/')}/{vm['name']}"
        mounts.append(Mount(source, target, bool(vm.get("readOnly"))))
    return mounts


def hiding(mounts: list[Mount], needed: list[str]) -> tuple[list[Mount], list[Mount]]:
    """(mounts to make, mounts to skip): a mount whose target is one of the ``needed``
    host paths or a folder above one would hide it from the container.

    On a real node the image brings its own filesystem; here the host's is the
    image, so an emptyDir at /tmp must not cover a checkout (its virtualenv,
    the pod's own volume sources) that lives under /tmp. Skipped, the
    container sees the host's directory there instead.
    """

    def covers(target: str, path: str) -> bool:
        top = target.rstrip("/") or "/"
        return top == "/" or path == top or path.startswith(top + "/")

    keep = [m for m in mounts if not any(covers(m.target, p) for p in needed)]
    return keep, [m for m in mounts if m not in keep]


def mount_namespace_argv(
    argv: list[str], mounts: list[Mount], working_dir: str | None = None
) -> list[str]:
    """Run ``argv`` in a new mount namespace with the mounts in place; argv unchanged if none.

    ``unshare -m`` gives the process its own mount table (private propagation:
    nothing leaks to the host); the shell creates missing mount points, binds
    each source and execs the command, so the container's pid is the
    command's. Mount points that do not exist on the host are created as
    empty directories there (a dev machine's /var/run/secrets, say). The
    container's ``workingDir`` is entered after the mounts, so it may be one.
    """
    if not mounts:
        return argv
    lines = ["set -e"]
    for m in mounts:
        src, dst = shlex.quote(m.source), shlex.quote(m.target)
        lines.append(f"mkdir -p {dst}")
        lines.append(f"mount --bind {src} {dst}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {dst}")
    if working_dir:
        lines.append(f"mkdir -p {shlex.quote(working_dir)} && cd {shlex.quote(working_dir)}")
    lines.append('exec "$@"')
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        "\n".join(lines),
        "kinetic-mounts",
        *argv,
    ]


def service_env(host: str, port: int) -> dict[str, str]:
    """The variables a kubelet sets for the ``kubernetes`` Service: how pods find the API."""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
        f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
        f"KUBERNETES_PORT_{port}_TCP_PORT": str(port),
        f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
    }


def created_mount_points(targets: list[str], exists: Callable[[str], bool]) -> list[str]:
    """The directories creating ``targets`` as mount points adds to the host, deepest first.

    The host's filesystem is the image here, so a mount point like /data is
    made on the host; the node removes what it made (when empty and no
    other pod mounts there) once the pod is done, so a test run leaves no
    /data behind.
    """
    made: set[str] = set()
    for target in targets:
        path = target.rstrip("/")
        while path and path != "/" and not exists(path):
            made.add(path)
            path = path.rsplit("/", 1)[0]
    return sorted(made, key=lambda p: (-p.count("/"), p))


def in_use(path: str, targets: list[str]) -> bool:
    """Whether ``path`` is, or leads to, a mount point among ``targets`` (another pod's)."""
    top = path.rstrip("/")
    return any(t.rstrip("/") == top or t.startswith(top + "/") for t in targets)
