"""The process node's volumes: Pod volumes -> files, volumeMounts -> bind mounts."""

from __future__ import annotations

import pytest
from kinetic_dev import volumes as vol
from kinetic_dev.podspec import PodConfigError


def pod(volumes: list[dict], mounts: list[dict] | None = None) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "a"}},
        "spec": {
            "serviceAccountName": "robot",
            "volumes": volumes,
            "containers": [{"name": "main", "command": ["true"], "volumeMounts": mounts or []}],
        },
    }


STORE = {
    ("secret", "ns", "robot-token"): {"token": b"T0K", "ca.crt": b"CA", "namespace": b"ns"},
    ("configMap", "ns", "settings"): {"a.yaml": b"a: 1", "b": b"\x00\x01"},
}


def fetch(kind: str, ns: str, name: str) -> dict[str, bytes] | None:
    return STORE.get((kind, ns, name))


def files(volume: dict) -> list[vol.VolumeFile] | None:
    return vol.volume_files(
        pod([volume]),
        volume,
        node_name="n",
        pod_ip="192.0.2.9",
        fetch=fetch,
        token=lambda aud, secs: f"bound:{aud}:{secs}",
    )


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        ({"name": "tmp", "emptyDir": {"medium": "Memory"}}, []),
        ({"name": "h", "hostPath": {"path": "/data"}}, None),
        (
            {"name": "sa", "secret": {"secretName": "robot-token"}},
            [("ca.crt", b"CA", 0o644), ("namespace", b"ns", 0o644), ("token", b"T0K", 0o644)],
        ),
        (
            {"name": "c", "configMap": {"name": "settings", "defaultMode": 0o400}},
            [("a.yaml", b"a: 1", 0o400), ("b", b"\x00\x01", 0o400)],
        ),
        (
            {
                "name": "c",
                "configMap": {"name": "settings", "items": [{"key": "a.yaml", "path": "d/x"}]},
            },
            [("d/x", b"a: 1", 0o644)],
        ),
        ({"name": "gone", "secret": {"secretName": "nope", "optional": True}}, []),
        (
            {
                "name": "d",
                "downwardAPI": {
                    "items": [
                        {"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}},
                        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
                    ]
                },
            },
            [("ip", b"192.0.2.9", 0o644), ("app", b"a", 0o644)],
        ),
        (  # what admission puts in pods from 1.21 on: token, CA, namespace
            {
                "name": "kube-api-access",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {
                            "secret": {
                                "name": "robot-token",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ]
                },
            },
            [
                ("token", b"bound:None:3607", 0o644),
                ("ca.crt", b"CA", 0o644),
                ("namespace", b"ns", 0o644),
            ],
        ),
    ],
)
def test_volume_files(volume: dict, expected: list | None) -> None:
    got = files(volume)
    assert (None if got is None else [(f.path, f.content, f.mode) for f in got]) == expected


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"name": "s", "secret": {"secretName": "nope"}}, "secret ns/nope not found"),
        (
            {"name": "c", "configMap": {"name": "settings", "items": [{"key": "zz", "path": "z"}]}},
            "key 'zz' not found",
        ),
        (
            {
                "name": "c",
                "configMap": {"name": "settings", "items": [{"key": "b", "path": "../x"}]},
            },
            "must be relative and stay inside the volume",
        ),
        ({"name": "n", "nfs": {"server": "s", "path": "/"}}, "type nfs is not supported"),
    ],
)
def test_bad_volumes_are_named(volume: dict, message: str) -> None:
    with pytest.raises(PodConfigError, match=f"volume '{volume['name']}'.*{message}"):
        files(volume)


def test_mounts_follow_the_volume_mounts_in_order() -> None:
    p = pod(
        [{"name": "sa", "secret": {"secretName": "t"}}, {"name": "h", "hostPath": {"path": "/d"}}],
        [
            {"name": "sa", "mountPath": vol.SA_MOUNT_PATH, "readOnly": True},
            {"name": "h", "mountPath": "/data"},
        ],
    )
    assert vol.container_mounts(p, p["spec"]["containers"][0], "/pods/p/volumes") == [
        vol.Mount("/pods/p/volumes/sa", vol.SA_MOUNT_PATH, True),
        vol.Mount("/d", "/data", False),
    ]


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ({"name": "missing", "mountPath": "/x"}, "no volume of that name"),
        ({"name": "v", "mountPath": "/x", "subPath": "a"}, "subPath is not supported"),
        ({"name": "v", "mountPath": "rel"}, "must be absolute"),
    ],
)
def test_bad_mounts_are_named(mount: dict, message: str) -> None:
    p = pod([{"name": "v", "emptyDir": {}}], [mount])
    with pytest.raises(PodConfigError, match=f"container 'main' volumeMount .*{message}"):
        vol.container_mounts(p, p["spec"]["containers"][0], "/v")


def test_no_mounts_runs_the_command_as_it_is() -> None:
    assert vol.mount_namespace_argv(["python", "-V"], []) == ["python", "-V"]


def test_mounts_run_the_command_in_its_own_mount_namespace() -> None:
    argv = vol.mount_namespace_argv(
        ["python", "-c", "print('a b')"],
        [vol.Mount("/pods/p q/sa", vol.SA_MOUNT_PATH, True), vol.Mount("/pods/tmp", "/tmp")],
    )
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[7]
    assert "mount --bind '/pods/p q/sa' /var/run/secrets/kubernetes.io/serviceaccount" in script
    assert "mount -o remount,bind,ro /var/run/secrets/kubernetes.io/serviceaccount" in script
    assert "mount -o remount,bind,ro /tmp" not in script
    assert script.rstrip().endswith('exec "$@"')
    assert argv[-3:] == ["python", "-c", "print('a b')"]  # the command, untouched


def test_service_env_names_the_api_server() -> None:
    env = vol.service_env("127.0.0.1", 6443)
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["KUBERNETES_PORT"] == "tcp://127.0.0.1:6443"


def test_the_working_dir_is_entered_after_the_mounts() -> None:
    argv = vol.mount_namespace_argv(["ls"], [vol.Mount("/pods/w", "/srv")], "/srv/app")
    script = argv[7]
    assert script.index("mount --bind /pods/w /srv") < script.index("cd /srv/app")


def test_a_mount_that_would_hide_the_pods_own_files_or_program_is_skipped() -> None:
    """A checkout under /tmp: an emptyDir at /tmp would cover its virtualenv and volumes."""
    from kinetic_dev.volumes import Mount, hiding

    tmp = Mount("/tmp/co/.local/pods/p/volumes/tmp", "/tmp")
    token = Mount("/tmp/co/.local/pods/p/volumes/tok", "/var/run/secrets/kubernetes.io/sa")
    certs = Mount("/tmp/co/.local/pods/p/volumes/tls", "/etc/kinetic/webhook")
    needed = ["/tmp/co/.local/pods/p", "/tmp/co/.venv/bin/kopf"]
    assert hiding([tmp, token, certs], needed) == ([token, certs], [tmp])
    # elsewhere (a checkout under /work), /tmp is mounted as asked
    assert hiding([tmp], ["/work/co/.local/pods/p", "/work/co/.venv/bin/kopf"]) == ([tmp], [])
    assert hiding([Mount("/x", "/")], ["/anything"]) == ([], [Mount("/x", "/")])
    assert hiding([Mount("/x", "/tmpfoo")], ["/tmp/co/p"]) == ([Mount("/x", "/tmpfoo")], [])


def test_mount_points_the_node_creates_are_listed_deepest_first() -> None:
    present = {"/", "/tmp", "/var", "/var/run"}
    made = vol.created_mount_points(
        ["/data", "/tmp/a/b", "/var/run/secrets/x", "/tmp"], lambda p: p in present
    )
    assert made == ["/var/run/secrets/x", "/tmp/a/b", "/var/run/secrets", "/tmp/a", "/data"]


def test_a_directory_another_pod_mounts_on_is_in_use() -> None:
    assert vol.in_use("/data", ["/data"]) and vol.in_use("/var/run", ["/var/run/secrets/x"])
    assert not vol.in_use("/data", ["/database", "/tmp/data"])
