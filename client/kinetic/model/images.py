"""Which images the administrator's ``allowedImages`` lets a job run: one rule for both sides.

The operator's webhook and reconciler (``kinetic_operator.logic.policy``) and the
client's submission preview (`kinetic.cli.submit_plan`) call `image_allowed`,
so a preview never promises what admission refuses. Pure.

**An image reference** is read the way the container runtime reads it (the
grammar of the `distribution` project that Docker and containerd share)::

    [registry/]path[:tag][@digest]

* ``registry`` is ``host[:port]``: the first ``/``-separated part when it has
  a ``.`` or a ``:``, is ``localhost``, or has an upper-case letter. Without
  one the registry is Docker Hub, ``docker.io`` (``index.docker.io`` is the
  same), where a one-part path is under ``library/``: ``busybox`` is
  ``docker.io/library/busybox``. Hosts compare case-blind; a port is part of
  the registry (``host:5000`` is not ``host``).
* ``path`` is one or more lower-case parts, separated by ``/``;
* ``tag`` follows the last ``:`` after the last ``/``; ``digest`` follows ``@``
  (``sha256:<hex>``). With a digest, the runtime pulls that digest and ignores
  the tag.

**An allowedImages entry** is one of:

* ``*``: every image;
* a registry alone (``registry.corp.io``, ``localhost:5000``, ``docker.io``):
  every image from that registry;
* a registry and a path, or a path alone (Docker Hub): that repository and
  every repository below it, by whole parts: ``ghcr.io/acme`` allows
  ``ghcr.io/acme/train:1`` and ``ghcr.io/acme:2``, never
  ``ghcr.io/acme-evil/x``; ``registry.corp.io`` never allows
  ``registry.corp.io.evil.com/x``. A trailing ``/`` changes nothing, except
  on Docker Hub, where a one-part name is an official image: ``python`` is
  ``library/python``, and ``acme/`` is the organisation ``acme``;
* a repository with a tag (``python:3.12``): that repository at that tag
  only, and without a digest (a digest would pull whatever it names, under
  any tag);
* a repository with a digest (``ghcr.io/acme/train@sha256:…``): that
  repository at that digest only, whatever tag the image also names.

Anything else (a ``*`` inside a name, upper case in a path, a stray ``@``) is
not an entry: `pattern_problem` says why, and the operator refuses a policy
that holds one. An image that is not a reference is allowed only by ``*``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

ANY_IMAGE = "*"
DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}
MAX_NAME_LENGTH = 255  # the distribution grammar's bound on registry/path

_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
)
_PATH_PART = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")


class NotAnImage(ValueError):
    """Text that is not an image reference (or not an allowedImages entry); says why."""


@dataclass(frozen=True)
class ImageRef:
    """An image reference, normalised as the runtime pulls it."""

    registry: str  # host[:port], the host lower-case; docker.io when none is named
    path: tuple[str, ...]
    tag: str | None = None
    digest: str | None = None


def parse_image(text: str) -> ImageRef:
    """``text`` as the runtime reads it; raises `NotAnImage` saying what is wrong."""
    return _parse(text, pattern=False)


def parse_pattern(text: str) -> ImageRef | None:
    """An allowedImages entry: None for ``*``; raises `NotAnImage` saying what is wrong.

    As `parse_image`, except that a registry may stand alone (``registry.corp.io``
    names a registry, not a repository) and a trailing ``/`` is dropped.
    """
    text = text.strip()
    if text == ANY_IMAGE:
        return None
    if "*" in text:
        raise NotAnImage(
            f'{text!r}: "*" alone allows every image; entries are otherwise matched by whole '
            "registry and path parts, without wildcards (ghcr.io/acme allows everything below "
            "ghcr.io/acme/)"
        )
    below = text.endswith("/")
    text = text.rstrip("/") if "@" not in text else text
    if _registry_alone(text):
        return ImageRef(_normalised(text, (), None, None).registry, ())
    return _parse(text, pattern=True, library=not below)


def _registry_alone(text: str) -> bool:
    """An entry that names a registry and nothing else: ``host[:port]`` whose host has a dot
    or is localhost (``python:3`` is a repository and a tag)."""
    host = text.rsplit(":", 1)[0] if text.count(":") == 1 else text
    return (
        "/" not in text
        and bool(_HOST.fullmatch(text))
        and ("." in host or host == "localhost" or host != host.lower())
    )


def pattern_problem(text: str) -> str | None:
    """Why ``text`` is not an allowedImages entry (None: it is one)."""
    try:
        parse_pattern(text)
    except NotAnImage as exc:
        return str(exc)
    return None


def image_allowed(image: str, patterns: Iterable[str]) -> bool:
    """Whether ``image`` is allowed by any of ``patterns`` (see the module's note).

    Entries that are not entries (`pattern_problem`) allow nothing; an image
    that is not a reference is allowed only by ``*``.
    """
    wanted = [p for p in patterns]
    if any(p.strip() == ANY_IMAGE for p in wanted):
        return True
    try:
        ref = parse_image(image)
    except NotAnImage:
        return False
    for text in wanted:
        try:
            pattern = parse_pattern(text)
        except NotAnImage:
            continue
        if pattern is not None and matches(ref, pattern):
            return True
    return False


def job_specs(kind: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every job spec an object runs, with its field path: the one place that knows where.

    A KineticJob is one; a KineticBatch runs its ``template`` for every
    input, or each entry of ``jobs`` (a batch of different job specs).
    """
    if kind == "KineticJob":
        yield "spec", spec
        return
    template = spec.get("template")
    if isinstance(template, dict):
        yield "spec.template", template
    jobs = spec.get("jobs")
    if isinstance(jobs, list):
        for i, job in enumerate(jobs):
            if isinstance(job, dict):
                yield f"spec.jobs[{i}]", job


def job_images(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, image) of each image a job spec names (none: the operator's default image)."""
    found = []
    if isinstance(job.get("image"), str):
        found.append(("image", job["image"]))
    container = job.get("container")
    if isinstance(container, dict) and isinstance(container.get("image"), str):
        found.append(("container.image", container["image"]))
    return found


def image_refusals(
    path: str,
    job: Mapping[str, Any],
    allowed: Iterable[str],
    default_image: str | None,
    source: str,
) -> list[str]:
    """Why ``allowed`` (a policy's allowedImages, from ``source``) refuses the images of the
    job spec at ``path``, one sentence each; empty when it allows them all or lists none.

    The operator's default image is always allowed: the administrator chose it.
    """
    entries = list(allowed)
    if not entries:
        return []
    return [
        f"{path}.{field} {image!r} is not an allowed image; allowed images: "
        f"{', '.join(entries)} ({source}): use an image under one of them (an entry allows "
        "what is below it by whole path parts, or exactly its tag or digest)"
        for field, image in job_images(job)
        if image != default_image and not image_allowed(image, entries)
    ]


def matches(image: ImageRef, pattern: ImageRef) -> bool:
    """Whether ``pattern`` (a parsed entry) allows ``image``: same registry, the pattern's
    path a whole-part prefix of the image's (the same path when it pins a tag or digest),
    and the pinned tag (without a digest) or digest."""
    if image.registry != pattern.registry:
        return False
    if pattern.tag is not None or pattern.digest is not None:
        if image.path != pattern.path:
            return False
        if pattern.digest is not None:
            return image.digest == pattern.digest
        return image.tag == pattern.tag and image.digest is None
    return image.path[: len(pattern.path)] == pattern.path


# --------------------------------------------------------------------------- parsing


def _parse(text: str, *, pattern: bool, library: bool = True) -> ImageRef:
    what = "allowedImages entry" if pattern else "image reference"
    if not text or text != text.strip():
        raise NotAnImage(f"{text!r} is not an {what}: it is empty or has spaces")
    name, at, digest = text.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise NotAnImage(f"{text!r} is not an {what}: {digest!r} is not a digest (sha256:<hex>)")
    name, tag = _split_tag(name)
    if tag is not None and not _TAG.fullmatch(tag):
        raise NotAnImage(f"{text!r} is not an {what}: {tag!r} is not a tag")
    if len(name) > MAX_NAME_LENGTH:
        raise NotAnImage(f"{text!r} is not an {what}: longer than {MAX_NAME_LENGTH} characters")
    registry, path = _split_registry(name)
    if registry is not None and not _HOST.fullmatch(registry):
        raise NotAnImage(f"{text!r} is not an {what}: {registry!r} is not a registry host[:port]")
    bad = next((p for p in path if not _PATH_PART.fullmatch(p)), None)
    if bad is not None:
        raise NotAnImage(
            f"{text!r} is not an {what}: {bad!r} is not a repository path part "
            "(lower-case letters, digits and . _ - between them)"
        )
    return _normalised(registry, path, tag, digest if at else None, library=library)


def _split_tag(name: str) -> tuple[str, str | None]:
    """``name`` and its tag: what follows the last ``:`` after the last ``/``."""
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, None


def _split_registry(name: str) -> tuple[str | None, tuple[str, ...]]:
    """The registry (None: Docker Hub) and the path parts of ``name``."""
    first, slash, rest = name.partition("/")
    looks_like_host = "." in first or ":" in first or first == "localhost" or first != first.lower()
    if slash and looks_like_host:
        return first, tuple(rest.split("/"))
    return None, tuple(name.split("/"))


def _normalised(
    registry: str | None,
    path: tuple[str, ...],
    tag: str | None,
    digest: str | None,
    *,
    library: bool = True,
) -> ImageRef:
    """Docker Hub under one name, and its one-part paths under ``library/`` (unless the
    entry ends in ``/``: ``acme/`` is the acme organisation, ``acme`` the official image)."""
    host = (registry or DOCKER_HUB).lower()
    if host in _HUB_ALIASES:
        host = DOCKER_HUB
        if len(path) == 1 and library:
            path = ("library", *path)
    return ImageRef(host, path, tag, digest)
