"""allowedImages: whole registries and path parts, exact tags and digests, and "*" (table tests)."""

from __future__ import annotations

import pytest
from kinetic.model.images import (
    ImageRef,
    NotAnImage,
    image_allowed,
    parse_image,
    parse_pattern,
    pattern_problem,
)

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("image", "ref"),
    [
        ("busybox", ImageRef("docker.io", ("library", "busybox"))),
        ("busybox:1.36", ImageRef("docker.io", ("library", "busybox"), "1.36")),
        ("docker.io/busybox", ImageRef("docker.io", ("library", "busybox"))),
        ("index.docker.io/library/busybox:1", ImageRef("docker.io", ("library", "busybox"), "1")),
        ("acme/train", ImageRef("docker.io", ("acme", "train"))),
        ("ghcr.io/acme/train:1", ImageRef("ghcr.io", ("acme", "train"), "1")),
        ("GHCR.io/acme/train", ImageRef("ghcr.io", ("acme", "train"))),  # hosts: case-blind
        ("localhost:5000/x/y:2", ImageRef("localhost:5000", ("x", "y"), "2")),
        ("localhost/x", ImageRef("localhost", ("x",))),
        ("10.0.0.1:5000/x", ImageRef("10.0.0.1:5000", ("x",))),
        (f"ghcr.io/acme/train@{DIGEST}", ImageRef("ghcr.io", ("acme", "train"), None, DIGEST)),
        (f"python:3.12@{DIGEST}", ImageRef("docker.io", ("library", "python"), "3.12", DIGEST)),
        ("registry.corp.io.evil.com/x", ImageRef("registry.corp.io.evil.com", ("x",))),
        ("a.b/c__d/e-f.g_h", ImageRef("a.b", ("c__d", "e-f.g_h"))),
    ],
)
def test_an_image_is_read_as_the_runtime_reads_it(image: str, ref: ImageRef) -> None:
    assert parse_image(image) == ref


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("", "empty"),
        ("a b", "'a b' is not a repository path part"),
        ("x:", "'' is not a tag"),
        ("ghcr.io/Acme/x", "'Acme' is not a repository path part"),
        ("x@sha256:short", "is not a digest"),
        ("x@", "is not a digest"),
        ("bad_host.io:port/x", "is not a registry host[:port]"),
        ("ghcr.io//x", "'' is not a repository path part"),
        ("a" * 300, "longer than 255 characters"),
    ],
)
def test_what_is_not_an_image_says_why(image: str, says: str) -> None:
    with pytest.raises(NotAnImage) as raised:
        parse_image(image)
    assert says in str(raised.value)


CASES: list[tuple[str, str, bool]] = [
    # (entry, image, allowed)
    ("*", "anything/at:all", True),
    ("*", "Not An Image", True),
    # a registry alone: everything it serves, nothing of a host that merely starts like it
    ("registry.corp.io", "registry.corp.io/team/x:1", True),
    ("registry.corp.io", "registry.corp.io.evil.com/x", False),  # the bypass
    ("registry.corp.io", "registry.corp.io:5000/x", False),  # another port is another registry
    ("registry.corp.io:5000", "registry.corp.io:5000/x", True),
    ("Registry.Corp.IO", "registry.corp.io/x", True),
    ("localhost:5000", "localhost:5000/x/y:2", True),
    ("docker.io", "busybox:1.36", True),
    ("docker.io", "ghcr.io/x", False),
    # a repository path: itself and below, by whole parts
    ("ghcr.io/acme", "ghcr.io/acme/train:1", True),
    ("ghcr.io/acme/", "ghcr.io/acme/train:1", True),  # a trailing slash changes nothing
    ("ghcr.io/acme", "ghcr.io/acme:2", True),
    ("ghcr.io/acme", "ghcr.io/acme-evil/x", False),
    ("ghcr.io/acme/", "ghcr.io/acme-evil/x", False),
    ("ghcr.io/acme", "ghcr.io/acmecorp", False),
    ("ghcr.io/acme", "ghcr.io.evil.com/acme/x", False),
    ("ghcr.io/acme", "evil.io/ghcr.io/acme", False),
    ("ghcr.io/acme", f"ghcr.io/acme/train@{DIGEST}", True),
    # Docker Hub names, with or without their registry and library/
    ("busybox", "busybox:1.36", True),
    ("busybox", "docker.io/library/busybox:1.36", True),
    ("busybox", "busybox-evil:1", False),
    ("busybox", "busyboxes", False),
    ("docker.io/library/python", "python:3.12", True),
    ("acme", "acme/train", False),  # one Docker Hub part is an official image: library/acme
    ("acme/", "acme/train", True),  # ... and a trailing "/" names the organisation
    ("docker.io/acme/", "acme/train:1", True),
    ("acme/", "acmecorp/train", False),
    # exact tags: that tag only, and never under a digest (which pulls whatever it names)
    ("python:3.12", "python:3.12", True),
    ("python:3.12", "docker.io/library/python:3.12", True),
    ("python:3.12", "python:3.13", False),
    ("python:3.12", "python", False),
    ("python:3.12", f"python:3.12@{DIGEST}", False),
    ("python:3.12", "python/sub:3.12", False),  # a tag pins one repository, not a tree
    # exact digests: that digest, whatever tag is shown beside it
    (f"ghcr.io/acme/train@{DIGEST}", f"ghcr.io/acme/train@{DIGEST}", True),
    (f"ghcr.io/acme/train@{DIGEST}", f"ghcr.io/acme/train:any@{DIGEST}", True),
    (f"ghcr.io/acme/train@{DIGEST}", f"ghcr.io/acme/train@{OTHER}", False),
    (f"ghcr.io/acme/train@{DIGEST}", "ghcr.io/acme/train:1", False),
    # what is not an image is allowed only by "*"
    ("ghcr.io/acme", "ghcr.io/acme/Bad", False),
]


@pytest.mark.parametrize(("entry", "image", "allowed"), CASES)
def test_image_allowed(entry: str, image: str, allowed: bool) -> None:
    assert image_allowed(image, [entry]) is allowed


def test_any_entry_of_several_may_allow() -> None:
    entries = ["ghcr.io/acme", "busybox:1.36"]
    assert image_allowed("busybox:1.36", entries)
    assert image_allowed("ghcr.io/acme/x", entries)
    assert not image_allowed("alpine:3.20", entries)
    assert not image_allowed("busybox:1.36", [])


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("ghcr.io/acme/*", '"*" alone allows every image'),
        ("*.corp.io", '"*" alone allows every image'),
        ("ghcr.io/Acme", "'Acme' is not a repository path part"),
        ("python:", "'' is not a tag"),
        ("x@nope", "is not a digest"),
    ],
)
def test_an_entry_that_is_not_one_says_why(entry: str, says: str) -> None:
    problem = pattern_problem(entry)
    assert problem is not None and says in problem
    assert not image_allowed("ghcr.io/acme/x", [entry])  # and allows nothing


@pytest.mark.parametrize(
    ("entry", "ref"),
    [
        ("registry.corp.io", ImageRef("registry.corp.io", ())),
        ("localhost:5000", ImageRef("localhost:5000", ())),
        ("localhost", ImageRef("localhost", ())),
        ("python:3", ImageRef("docker.io", ("library", "python"), "3")),  # not host:port
        ("ghcr.io/acme/", ImageRef("ghcr.io", ("acme",))),
        ("*", None),
    ],
)
def test_an_entry_may_name_a_registry_alone(entry: str, ref: ImageRef | None) -> None:
    assert parse_pattern(entry) == ref
