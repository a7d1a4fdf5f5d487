"""`@kinetic.run(...)`: turn a Python function into one that runs on the cluster.

Calling the decorated function blocks and returns the remote value;
`.run_async()` returns a `JobHandle` at once; `.run_async_map()` fans out over
many inputs and returns a `BatchHandle`. The client only uploads payloads and
creates resources: the operator does everything else.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kinetic import storage
from kinetic.api import accelerators, reference
from kinetic.api import project as projects  # `project` is also the reference's argument
from kinetic.api.batches import AUTO, BatchHandle, submit_map
from kinetic.api.config import ClientConfig, resolve
from kinetic.api.data import Data, call_data, check_volumes
from kinetic.api.hosts import check_hosts
from kinetic.api.jobs import JobHandle, new_job_id, submit_job
from kinetic.api.mixed import Call
from kinetic.api.staging import Stager
from kinetic.model import catalog, layout, limits, payload
from kinetic.model import resources as r
from kinetic.model.resources import ChunkSize


class RemoteFunction:
    """A function bound to how it should run remotely."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.fn = fn
        self.options = options
        functools.update_wrapper(self, fn)

    @property
    def func_name(self) -> str:
        return payload.function_name(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run remotely and block until the value (or the remote exception) comes back.

        With ``debug=True`` the call says which job waits for a debugger and how
        to attach, forwards a local port to it once its Pod is ready, and says
        when a debugger connected (`JobHandle.debug_result`).
        """
        job = self.run_async(*args, **kwargs)
        return job.debug_result() if job.debug else job.result()

    def run_async(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Submit one call and return its handle without waiting."""
        cfg = self._config()
        self.check_cluster(cfg)
        job_id = new_job_id(self.func_name)
        # kinetic.Data (arguments and volumes) goes to the namespace's upload cache first;
        # the payload carries only references, the spec only volume URIs.
        stager = Stager(cfg.storage_root, cfg.namespace, cfg.context)
        stager.check(self.options["volumes"], call_data(args, kwargs))  # fuse=True: mountable?
        args, kwargs = stager.call(args, kwargs)
        volumes = stager.volumes(self.options["volumes"])  # after the arguments: fuse mounts
        data = payload.build_job_payload(
            self.fn, args, kwargs, env=self.captured_env(), project=self.ship_project(cfg)
        )
        # Uploaded before the job exists (its UID is not known yet): a fresh folder of the
        # namespace's uploads; the operator puts the result under the job's own prefix.
        upload = layout.new_upload_dir(cfg.storage_root, cfg.namespace, job_id)
        payload_uri = layout.job_payload_uri(upload)
        storage.write_bytes(payload_uri, data)
        spec = self.job_spec(
            r.FunctionSpec(
                payload_uri=payload_uri, sha256=payload.sha256(data), name=self.func_name
            ),
            volumes=volumes,
        )
        return submit_job(cfg, spec, job_id)

    def run_async_map(
        self,
        inputs: Iterable[Any],
        *,
        input_mode: r.InputMode = "auto",
        max_concurrent: int | None = limits.DEFAULT_MAX_CONCURRENT,
        retries: int | None = None,
        fail_fast: bool = False,
        cancel_running_on_fail: bool = False,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        chunk_size: ChunkSize = AUTO,
        hosts: int | None = None,
    ) -> BatchHandle:
        """Fan out over `inputs`; see `kinetic.api.batches.submit_map` for the options.

        `input_mode`, `max_concurrent`, `retries`, `fail_fast`,
        `cancel_running_on_fail`, `name`, `tags` (the reference's, by keyword as
        it documents them), `chunk_size` (inputs per Pod: ``"auto"``, the default,
        lets the operator size each Pod's share from the inputs' measured durations;
        ``1`` runs one input per Pod; a number fixes it), and `hosts` (Pods per input, a
        gang; unset, this function's own `kinetic.run(hosts=...)`).
        """
        return submit_map(
            self,
            inputs,
            input_mode=input_mode,
            max_concurrent=max_concurrent,
            retries=retries,
            fail_fast=fail_fast,
            cancel_running_on_fail=cancel_running_on_fail,
            name=name,
            tags=tags,
            chunk_size=chunk_size,
            hosts=hosts,
        )

    def call(self, *args: Any, **kwargs: Any) -> Call:
        """This call, not submitted: an entry for `kinetic.batch` (different calls, one batch)."""
        return Call(self, args, dict(kwargs))

    def with_options(self, **changes: Any) -> RemoteFunction:
        """The same function with some `kinetic.run` options changed (image, env, retries...)."""
        # The options as `run` takes them: the accelerator as the user spelled it.
        current = {k: v for k, v in self.options.items() if k != "accelerator_as_given"}
        current["accelerator"] = self.options["accelerator_as_given"]
        allowed = set(current) | {"container_image"}
        unknown = sorted(set(changes) - allowed)
        if unknown:
            raise TypeError(
                f"unknown option(s) {', '.join(unknown)}; the options are "
                f"{', '.join(sorted(allowed))}"
            )
        if "container_image" in changes:
            current.pop("image")
        return run(**(current | changes))(self.fn)

    # ----------------------------------------------------------------- helpers

    def _config(self) -> ClientConfig:
        o = self.options
        context = reference.context_for("kinetic.run", o["cluster"], o["context"])
        return resolve(namespace=o["namespace"], context=context)

    def check_cluster(self, cfg: ClientConfig) -> None:
        """Refuse, before any upload, what the cluster cannot run: an accelerator its
        catalog does not offer, or this interpreter's Python without a runner image."""
        self.check_accelerator(cfg)
        if self.options["image"] is None:
            check_python(cfg)

    def check_accelerator(self, cfg: ClientConfig) -> None:
        """Refuse an accelerator the cluster's catalog does not offer, or that no node of a
        cluster that cannot grow offers (`kinetic.api.accelerators`).

        The cluster's list is what its operator published; without one, the
        built-in catalog's. The error lists the close matches.
        """
        known = cfg.accelerators or tuple(catalog.default_catalog().names())
        catalog.check_name(self.options["accelerator_as_given"], known)
        accelerators.check(
            [self.options["accelerator_as_given"]], accelerators.ClusterReads(cfg.context)
        )

    def ship_project(self, cfg: ClientConfig) -> dict[str, Any] | None:
        """Upload the function's project (what is not there yet) for the payload to name.

        Requirements are left out under a custom image, which should have them;
        the project's own source ships either way (unpickling may need it).
        """
        found = projects.discover(self.fn, with_requirements=self.options["image"] is None)
        if found is None:
            return None
        return projects.ship(found, cfg.storage_root, cfg.namespace)

    def captured_env(self) -> dict[str, str]:
        """The local variables named in capture_env_vars (a trailing * matches a prefix)."""
        return payload.capture_env(self.options["capture_env_vars"])

    def job_spec(
        self,
        function: r.FunctionSpec,
        retries: int | None = None,
        volumes: list[r.DataVolume] | None = None,
    ) -> r.KineticJobSpec:
        """The job spec for ``function``; outputDir unset means the operator's default
        (under the namespace's prefix, keyed by the object's UID)."""
        o = self.options
        if o["image"] is None:
            # The operator's runner image for this interpreter: cloudpickle needs it.
            function = function.model_copy(update={"python": PYTHON})
        return r.KineticJobSpec(
            function=function,
            accelerator=o["accelerator"],
            image=o["image"],
            env=[r.EnvVar(name=k, value=str(v)) for k, v in (o["env"] or {}).items()],
            spot=o["spot"],
            output_dir=o["output_dir"],
            retries=o["retries"] if retries is None else retries,
            deadline_seconds=o["deadline"],
            volumes=volumes,
            debug=o.get("debug", False),
            hosts=o.get("hosts"),
        )


PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


class PythonMismatch(RuntimeError):
    """This interpreter's Python has no runner image on the cluster."""


def check_python(cfg: ClientConfig) -> None:
    """The cluster's runner images carry a Python minor version each; a function
    pickled here must run under the same one, or unpickling may fail in the pod."""
    offered = cfg.runner_pythons
    if offered is None or PYTHON in offered:
        return
    raise PythonMismatch(
        f"this client runs Python {PYTHON}, but the cluster's runner images are for Python "
        f"{', '.join(offered)}: a function pickled by {PYTHON} must run under {PYTHON}. Use "
        f"Python {offered[-1]} here, ask the cluster's administrator to add {PYTHON} to the "
        "chart's runnerImage.pythonVersions, or pass image= an image with Python "
        f"{PYTHON} and kinetic installed (start FROM the runner image)."
    )


# This client's positional order before it took the reference's (`reference.moved_positions`);
# `image` and `container_image` were and are the same thing.
_RUN_BEFORE = (
    "accelerator",
    "container_image",
    "container_image",
    "namespace",
    "context",
    "env",
    "capture_env_vars",
    "retries",
    "spot",
    "output_dir",
    "deadline",
    "volumes",
    "debug",
)


@reference.moved_positions("kinetic.run", _RUN_BEFORE)
def run(
    accelerator: str = "cpu",
    container_image: str | None = None,
    base_image_repo: str | None = None,
    zone: str | None = None,
    project: str | None = None,
    capture_env_vars: list[str] | None = None,
    cluster: str | None = None,
    backend: str | None = None,
    namespace: str | None = None,
    volumes: Mapping[str, Data] | None = None,
    spot: bool = False,
    output_dir: str | None = None,
    debug: bool = False,
    *,
    image: str | None = None,
    context: str | None = None,
    env: Mapping[str, str] | None = None,
    retries: int = 0,
    deadline: int | None = None,
    hosts: int | None = None,
) -> Callable[[Callable[..., Any]], RemoteFunction]:
    """Decorator: run the function on the cluster.

    `accelerator` is `cpu`, `gpu-l4`, `gpu-a100x8`, `tpu-v5e-1`, ... (also spelled
    `l4`, `a100x8`, `v5litepod-1`, `v5e-1`; see `kinetic.model.catalog`); `env` sets
    variables in the job; `capture_env_vars` copies the named local variables
    (a trailing `*` matches a prefix); `retries` are extra attempts after a
    failure; `deadline` bounds each attempt in seconds; `volumes` maps absolute
    paths to `kinetic.Data`, present at those paths in the pod before the call
    (a `Data` passed as an argument arrives as a local path instead).

    `debug=True` starts debugpy in the Pod and holds the call until a debugger
    attaches: `job.debug_attach()` (or `kinetic jobs debug ID`) forwards a local
    port to it and prints the VS Code configuration. A debug job's `result()`
    keeps the job and its artifacts (`cleanup=False`) and does not stream logs,
    unless asked.

    `hosts=N` runs each attempt as a gang of N Pods, ranks 0 .. N-1, that find
    each other through the rendezvous environment (MASTER_ADDR, RANK,
    WORLD_SIZE, ...; see the README's "Multi-host jobs"). Left out, it is the
    accelerator's own count: 1, or a multi-host TPU slice's hosts
    (`tpu-v5e-16` alone runs 4 Pods). It is keyword-only, and per call it is
    `fn.with_options(hosts=N)`: `run_async`'s keywords are the function's own.

    `image` (or `container_image`, the reference's name for it) runs the
    function in that image as is. Without one (or with "bundled" or
    "prebuilt") the default image runs it, and the requirements of the
    function's project (`kinetic.api.project`) are installed when the pod starts.
    The project's own Python source ships either way.

    The positional order is the reference API's, up to ``debug``; this
    client's own arguments (``image``, ``context``, ``env``, ``retries``,
    ``deadline``, ``hosts``) are keyword-only. A value passed at a position
    that meant another argument before this order warns (`ArgumentMoved`).

    The reference API's arguments are accepted (`kinetic.api.reference`):
    `cluster` selects the kubeconfig context of that name (or the one context
    for a cluster of that name), at submission; an unknown name is a
    `ConfigError` listing the contexts. `backend` is "gke" (or None); "pathways"
    is refused, naming `hosts=` (a multi-host job here is a gang of Pods). `project`, `zone` and
    `base_image_repo` are kept in `options` but cannot matter here (the
    kubeconfig context picks the cluster; the operator's runner image, or
    `image=`, is the image): giving any of them warns once, naming the equivalent.
    """
    reference.accept(
        "kinetic.run", backend=backend, project=project, zone=zone, base_image_repo=base_image_repo
    )
    image = projects.resolve_image(image, container_image)
    if retries < 0:
        raise ValueError(f"retries must be 0 or more, got {retries}")
    # The reference's spellings (v5litepod-4, l4, a100x4, ...) become the catalog's; what
    # the cluster offers is checked at submission, before any upload.
    accelerator_as_given, accelerator = accelerator, _spelled(accelerator)
    check_hosts(hosts, accelerator)
    options: dict[str, Any] = dict(
        accelerator=accelerator,
        accelerator_as_given=accelerator_as_given,  # for error messages
        image=image,
        namespace=namespace,
        context=context,
        env=dict(env or {}),
        capture_env_vars=list(capture_env_vars or []),
        retries=retries,
        spot=spot,
        output_dir=output_dir,
        deadline=deadline,
        debug=bool(debug),
        hosts=hosts,
        volumes=check_volumes(volumes),  # before anything is uploaded
        # The reference API's: the cluster picks the kubeconfig context at submission;
        # the others are kept as given (see the docstring).
        cluster=cluster,
        backend=backend,
        project=project,
        zone=zone,
        base_image_repo=base_image_repo,
    )
    # Validate what the API server would reject anyway, but here, before any upload.
    r.KineticJobSpec(
        container=r.ContainerSpec(command=["validate"]),
        accelerator=accelerator,
        env=[r.EnvVar(name=k, value=str(v)) for k, v in options["env"].items()],
        retries=retries,
        deadline_seconds=deadline,
        output_dir=output_dir,
    )

    def wrap(fn: Callable[..., Any]) -> RemoteFunction:
        return RemoteFunction(fn, options)

    return wrap


def _spelled(accelerator: str) -> str:
    """The catalog's spelling of `accelerator`; a name no catalog could hold is refused now."""
    name = catalog.canonical_name(accelerator)
    if re.match(r.ACCELERATOR_PATTERN, name) and len(name) <= limits.MAX_ACCELERATOR_LENGTH:
        return name
    catalog.check_name(accelerator, catalog.default_catalog().names())
    return name
