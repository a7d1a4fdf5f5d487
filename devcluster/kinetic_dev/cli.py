"""`kinetic local up|down|status`: the local cluster from the command line."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Run a real Kubernetes control plane on this machine.")


def _cluster():
    from kinetic_dev.cluster import Cluster

    return Cluster()


def _fail(e: Exception) -> None:
    typer.secho(f"kinetic local: {e}", fg=typer.colors.RED, err=True)
    raise typer.Exit(1)


@app.command()
def up() -> None:
    """Start (or repair) the local cluster; returns when everything is ready."""
    from kinetic_dev.procs import ClusterError

    try:
        _cluster().up(out=typer.echo)
    except ClusterError as e:
        _fail(e)


@app.command()
def down(
    purge: bool = typer.Option(False, "--purge", help="also delete the state dir (.local)"),
) -> None:
    """Stop exactly what `up` started (by pid file)."""
    _cluster().down(out=typer.echo, purge=purge)


@app.command()
def status() -> None:
    """Show each component (running/stopped, pid, port) and the node's readiness."""
    rows = _cluster().status()
    typer.echo(f"{'COMPONENT':<26} {'STATE':<10} {'PID':>8} {'PORT':>6}  LOG")
    for r in rows:
        pid = str(r["pid"]) if r["pid"] else "-"
        port = str(r["port"]) if r["port"] else "-"
        typer.echo(f"{r['component']:<26} {r['state']:<10} {pid:>8} {port:>6}  {r['log']}")


@app.command()
def images(
    docker_host: str = typer.Option(
        None,
        "--docker-host",
        help="build with this Docker Engine (e.g. unix:///var/run/docker.sock, for kind) "
        "instead of the local cluster's, and push nowhere",
    ),
) -> None:
    """Build the images (docker/*.Dockerfile and the stand-ins); print their names as JSON.

    The same build `kinetic local up` runs: offline from the wheelhouse, with this
    interpreter's Python in the runner, pushed to the local registry. With
    --docker-host, only the runner and operator, left in that engine:
    `scripts/kind-e2e.sh` loads them into kind.
    """
    import json
    import sys

    from kinetic_dev.cluster import Cluster
    from kinetic_dev.images import Images
    from kinetic_dev.procs import ClusterError

    cluster = Cluster()
    try:
        if cluster.repo_root is None:
            raise ClusterError("`kinetic local images` builds from a checkout of the repository")
        if docker_host is None:
            built = cluster.build_images(out=_to_stderr)
        else:
            cluster.cfg.logs_dir.mkdir(parents=True, exist_ok=True)
            bins = {"docker": find_runtime_docker()}
            builder = Images(cluster.cfg, cluster.repo_root, bins, _to_stderr, docker_host)
            built = builder.ensure_project()
    except ClusterError as e:
        _fail(e)
    json.dump(
        {
            "operatorImage": built.operator_image,
            "runnerRepository": built.runner_repository,
            "runnerTag": built.runner_tag,
            "runnerImage": built.runner_image,
            "python": built.python,
        },
        sys.stdout,
    )
    typer.echo()


def _to_stderr(line: str) -> None:
    """Progress goes to stderr: stdout is the JSON a script reads."""
    typer.echo(line, err=True)


def find_runtime_docker() -> str:
    import shutil

    from kinetic_dev.procs import ClusterError

    path = shutil.which("docker")
    if path is None:
        raise ClusterError("docker not found on PATH: `--docker-host` builds with a Docker Engine")
    return path


@app.command()
def env() -> None:
    """Print the `export` lines of .local/env (eval "$(kinetic local env)")."""
    from kinetic_dev.config import LocalConfig

    cfg = LocalConfig()
    for k, v in cfg.env().items():
        typer.echo(f"export {k}={v}")
