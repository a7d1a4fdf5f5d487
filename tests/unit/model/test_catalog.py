"""The accelerator catalog: names to resources, node selectors and tolerations."""

from __future__ import annotations

import json
import math

import pytest
from kinetic.model.catalog import (
    Catalog,
    GpuType,
    UnknownAccelerator,
    canonical_name,
    check_name,
    default_catalog,
    device_count,
    hosts_of,
    is_tpu,
    resolve,
)
from kinetic_operator.settings import OperatorSettings

CATALOG = default_catalog()
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION = {
    "key": "cloud.google.com/gke-spot",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}


def test_cpu_adds_nothing():
    p = resolve(CATALOG, "cpu")
    assert (p.limits, p.node_selector, p.tolerations) == ({}, {}, [])


@pytest.mark.parametrize(
    "name, count, label",
    [
        ("gpu-l4", "1", "nvidia-l4"),
        ("gpu-l4x1", "1", "nvidia-l4"),
        ("gpu-t4x4", "4", "nvidia-tesla-t4"),
        ("gpu-a100x8", "8", "nvidia-tesla-a100"),
        ("gpu-h100x2", "2", "nvidia-h100-80gb"),
    ],
)
def test_gpus_get_count_selector_and_toleration(name, count, label):
    p = resolve(CATALOG, name)
    assert p.limits == {"nvidia.com/gpu": count}
    assert p.node_selector == {"cloud.google.com/gke-accelerator": label}
    assert p.tolerations == [GPU_TOLERATION]


@pytest.mark.parametrize(
    "name, chips, label, topology",
    [
        ("tpu-v5e-1", "1", "tpu-v5-lite-podslice", "1x1"),
        ("tpu-v6e-4", "4", "tpu-v6e-slice", "2x2"),
        ("tpu-v5p-8", "4", "tpu-v5p-slice", "2x2x1"),
    ],
)
def test_tpu_slices_get_chips_and_topology(name, chips, label, topology):
    p = resolve(CATALOG, name)
    assert p.limits == {"google.com/tpu": chips}
    assert p.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": label,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert p.tolerations == [TPU_TOLERATION]


def test_spot_adds_selector_and_toleration():
    p = resolve(CATALOG, "gpu-l4", spot=True)
    assert p.node_selector["cloud.google.com/gke-spot"] == "true"
    assert p.tolerations == [GPU_TOLERATION, SPOT_TOLERATION]
    assert resolve(CATALOG, "cpu", spot=True).tolerations == [SPOT_TOLERATION]


def test_resolve_does_not_mutate_the_catalog():
    resolve(CATALOG, "gpu-l4", spot=True)
    assert resolve(CATALOG, "gpu-l4").tolerations == [GPU_TOLERATION]


@pytest.mark.parametrize("name", ["gpu-v100", "tpu-v9-4", "tpu-v5e-3", "quantum", "gpu-"])
def test_unknown_accelerator_names_the_field_and_the_known_ones(name):
    with pytest.raises(UnknownAccelerator) as err:
        resolve(CATALOG, name)
    text = str(err.value)
    assert text.startswith("spec.accelerator:")
    assert repr(name) in text
    for known in ("cpu", "gpu-l4", "gpu-a100x8", "tpu-v5e-1", "tpu-v6e-4"):
        assert known in text


def test_unsupported_gpu_count_says_which_counts_exist():
    with pytest.raises(UnknownAccelerator, match=r"gpu-l4x3.*offer 1, 2, 4, 8"):
        resolve(CATALOG, "gpu-l4x3")


def test_names_are_sorted_and_complete():
    names = CATALOG.names()
    assert names[0] == "cpu"
    assert {"gpu-l4", "gpu-l4x8", "gpu-t4", "gpu-a100x16", "gpu-h100x8"} <= set(names)
    assert names.index("tpu-v5e-4") < names.index("tpu-v5e-8")


def test_catalog_from_env_accepts_yaml_and_json(monkeypatch):
    monkeypatch.setenv(
        "KINETIC_ACCELERATOR_CATALOG",
        "gpus:\n  v100:\n    node_label: nvidia-tesla-v100\n    counts: [1, 2]\n",
    )
    s = OperatorSettings()
    assert {"gpu-v100", "gpu-v100x2", "gpu-l4"} <= set(s.accelerator_catalog.names())
    assert resolve(s.accelerator_catalog, "gpu-v100x2").limits == {"nvidia.com/gpu": "2"}

    custom = Catalog(gpus={"x1": GpuType(node_label="x", counts=[1])})
    monkeypatch.setenv("KINETIC_ACCELERATOR_CATALOG", json.dumps(custom.model_dump()))
    catalog = OperatorSettings().accelerator_catalog
    assert catalog.gpus["x1"] == custom.gpus["x1"] and "l4" in catalog.gpus


def test_settings_defaults_and_lists(monkeypatch):
    for var in ("KINETIC_NAMESPACES", "KINETIC_RUNNER_COMMAND", "KINETIC_STORAGE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    s = OperatorSettings()
    assert s.operator_namespace == "kinetic-system"
    assert s.config_map_name == "kinetic-config"
    assert s.runner_service_account == "kinetic-runner"
    assert (s.max_disruptions, s.attempt_history) == (3, 10)
    assert s.namespaces == []
    assert s.runner_command == ["python", "-m", "kinetic.runtime.runner"]
    monkeypatch.setenv("KINETIC_NAMESPACES", "a, b,,c")
    monkeypatch.setenv("KINETIC_RUNNER_COMMAND", "/opt/venv/bin/python -m kinetic.runtime.runner")
    monkeypatch.setenv("KINETIC_STORAGE_ROOT", "gs://bucket/root/")
    s = OperatorSettings()
    assert s.namespaces == ["a", "b", "c"]
    assert s.runner_command == ["/opt/venv/bin/python", "-m", "kinetic.runtime.runner"]
    assert s.storage_root == "gs://bucket/root"


def test_catalog_setting_extends_the_built_in_one(monkeypatch) -> None:
    from kinetic_operator.settings import OperatorSettings

    monkeypatch.setenv(
        "KINETIC_ACCELERATOR_CATALOG",
        '{"gpus": {"b200": {"node_label": "nvidia-b200", "counts": [1, 8]}}}',
    )
    names = OperatorSettings().accelerator_catalog.names()
    assert "gpu-b200x8" in names and "gpu-l4" in names and "tpu-v5e-1" in names


def test_empty_catalog_setting_keeps_the_built_in_one(monkeypatch) -> None:
    from kinetic_operator.settings import OperatorSettings

    monkeypatch.setenv("KINETIC_ACCELERATOR_CATALOG", "{}")
    assert OperatorSettings().accelerator_catalog.names() == default_catalog().names()


# --------------------------------------------------------------------------- names users type


@pytest.mark.parametrize(
    "typed, canonical",
    [
        ("cpu", "cpu"),
        ("v5litepod-4", "tpu-v5e-4"),
        ("tpu-v5litepod-4", "tpu-v5e-4"),
        ("v5e-8", "tpu-v5e-8"),
        ("tpu-v5e-1", "tpu-v5e-1"),
        ("tpu-v3-8", "tpu-v3-8"),
        ("v3-8", "tpu-v3-8"),
        ("v5p-8", "tpu-v5p-8"),
        ("V6E-4", "tpu-v6e-4"),
        ("l4", "gpu-l4"),
        ("gpu-l4", "gpu-l4"),
        ("gpu-l4x1", "gpu-l4"),
        ("a100x4", "gpu-a100x4"),
        ("gpu-a100", "gpu-a100"),
        ("h100x8", "gpu-h100x8"),
    ],
)
def test_reference_spellings_resolve_through_the_catalog(typed, canonical):
    assert canonical_name(typed) == canonical
    assert check_name(typed, CATALOG.names()) == canonical
    resolve(CATALOG, typed)  # the operator takes them too


@pytest.mark.parametrize(
    "typed, suggested",
    [
        ("v5litepod-3", ["tpu-v5e-4", "tpu-v5e-8"]),
        ("a100x3", ["gpu-a100x2", "gpu-a100x4"]),
        ("gpu-l40", ["gpu-l4"]),
        ("tpu-v5e-64", ["tpu-v5e-16"]),
    ],
)
def test_unknown_names_list_the_close_matches(typed, suggested):
    with pytest.raises(UnknownAccelerator) as err:
        check_name(typed, CATALOG.names())
    text = str(err.value)
    assert text.startswith(f"accelerator: unknown accelerator {typed!r}; did you mean ")
    hint = text.split("did you mean ")[1].split("?")[0]
    for name in suggested:
        assert repr(name) in hint
    assert "known accelerators: cpu, gpu-a100" in text


def test_a_name_with_nothing_close_lists_every_known_one():
    with pytest.raises(UnknownAccelerator) as err:
        check_name("quantum-9000", CATALOG.names())
    assert "did you mean" not in str(err.value)
    assert "known accelerators: cpu" in str(err.value)


def test_a_cluster_list_decides_what_exists():
    assert check_name("b200x8", ["cpu", "gpu-b200x8"]) == "gpu-b200x8"
    with pytest.raises(UnknownAccelerator, match="did you mean 'gpu-b200x8'"):
        check_name("b200x4", ["cpu", "gpu-b200x8"])


@pytest.mark.parametrize(
    "name, count",
    [("cpu", 0), ("l4", 1), ("gpu-a100x8", 8), ("v5litepod-4", 4), ("tpu-v5p-8", 4)],
)
def test_device_count(name, count):
    assert device_count(CATALOG, name) == count


# --------------------------------------------------------------------------- multi-host slices


@pytest.mark.parametrize(
    "name, label, topology, chips, hosts",
    [
        ("tpu-v5e-16", "tpu-v5-lite-podslice", "4x4", "4", 4),
        ("v5litepod-32", "tpu-v5-lite-podslice", "4x8", "4", 8),
        ("tpu-v4-16", "tpu-v4-podslice", "2x2x2", "4", 2),
        ("tpu-v4-32", "tpu-v4-podslice", "2x2x4", "4", 4),
        ("tpu-v6e-16", "tpu-v6e-slice", "4x4", "4", 4),
        ("v5p-16", "tpu-v5p-slice", "2x2x2", "4", 2),
    ],
)
def test_multi_host_slices_place_each_host_pod(name, label, topology, chips, hosts):
    p = resolve(CATALOG, name)
    assert p.limits == {"google.com/tpu": chips}  # per Pod: one Pod per host
    assert p.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": label,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert hosts_of(CATALOG, name) == hosts
    assert is_tpu(CATALOG, name)


@pytest.mark.parametrize("name", sorted(CATALOG.tpus))
def test_every_slice_agrees_with_its_name_and_topology(name):
    """The suffix counts chips on v5e/v6e and TensorCores (2 a chip) elsewhere; the topology's
    product is the slice's chips: a typo in a new entry fails here."""
    tpu = CATALOG.tpus[name]
    total = tpu.chips * tpu.hosts
    dims = [int(d) for d in tpu.topology.split("x")]
    assert total == math.prod(dims)
    per_chip = 1 if name.startswith(("tpu-v5e-", "tpu-v6e-")) else 2
    assert int(name.rsplit("-", 1)[1]) == total * per_chip


@pytest.mark.parametrize(
    "name, hosts", [("cpu", 1), ("l4", 1), ("gpu-a100x8", 1), ("tpu-v5e-8", 1), ("v4-32", 4)]
)
def test_hosts_of(name, hosts):
    assert hosts_of(CATALOG, name) == hosts


def test_hosts_of_refuses_an_unknown_name():
    with pytest.raises(UnknownAccelerator, match=r"^spec\.accelerator:"):
        hosts_of(CATALOG, "tpu-v5e-3")


def test_a_catalog_setting_without_hosts_means_single_host_slices():
    custom = Catalog.model_validate(
        {"tpus": {"tpu-v9-4": {"node_label": "tpu-v9", "topology": "2x2", "chips": 4}}}
    )
    assert hosts_of(custom, "tpu-v9-4") == 1
