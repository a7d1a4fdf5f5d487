"""Which gs:// backend a Pod's environment gets, and how transient failures are retried."""

from __future__ import annotations

import pytest
from kinetic.storage import gcs_http
from kinetic.storage.gcs_http import Anonymous, MetadataToken, lean_backend, with_retries


@pytest.mark.parametrize(
    ("environ", "endpoint", "auth"),
    [
        ({"STORAGE_EMULATOR_HOST": "http://127.0.0.1:4443"}, "http://127.0.0.1:4443", Anonymous),
        ({"STORAGE_EMULATOR_HOST": "gcs.local:4443"}, "http://gcs.local:4443", Anonymous),
        (  # the emulator wins over a key file, as in google-cloud-storage
            {"STORAGE_EMULATOR_HOST": "h:1", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json"},
            "http://h:1",
            Anonymous,
        ),
        ({}, "https://storage.googleapis.com", MetadataToken),
        ({"GCE_METADATA_HOST": "10.0.0.9"}, "https://storage.googleapis.com", MetadataToken),
    ],
)
def test_the_environment_picks_endpoint_and_credentials(
    environ: dict[str, str], endpoint: str, auth: type
) -> None:
    lean = lean_backend(environ)
    assert lean is not None and lean.endpoint == endpoint and isinstance(lean.auth, auth)
    if isinstance(lean.auth, MetadataToken):
        assert lean.auth.host == environ.get("GCE_METADATA_HOST", "metadata.google.internal")


def test_a_key_file_is_left_to_the_library() -> None:
    environ = {"GOOGLE_APPLICATION_CREDENTIALS": "/var/run/keys/sa.json"}
    assert lean_backend(environ) is None


class Flaky:
    """Fails ``failures`` times with a transient error, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise gcs_http._Transient("503 backend error", server_said=True)
        return "answer"


def test_transient_failures_are_retried_with_growing_pauses() -> None:
    pauses: list[float] = []
    call = Flaky(failures=5)
    assert with_retries(call, deadline_s=60, sleep=pauses.append) == "answer"
    assert call.calls == 6
    # 0.1 s doubling, each with jitter in [0.5, 1.5)
    for n, pause in enumerate(pauses):
        assert 0.05 * 2**n <= pause < 0.15 * 2**n


def test_retries_stop_at_the_deadline_with_the_last_error() -> None:
    call = Flaky(failures=10**6)
    with pytest.raises(gcs_http._Transient, match="503 backend error"):
        with_retries(call, deadline_s=0.0, sleep=lambda s: None)
    assert call.calls == 1
