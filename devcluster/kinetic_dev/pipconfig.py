"""The package index settings of this machine's pip, as the chart's ``packageIndex`` values.

Job pods install a function's requirements with pip; they should reach the
index the way this machine does. pip's own view of its configuration (files
and ``PIP_*`` variables, ``pip config list``) is read, and what a pod can use
is kept: index URLs that are not host paths, the proxy, trusted hosts, and
the certificate authorities of pip's ``cert`` bundle that are not Debian's
public ones (a proxy's own CA, say). Those few certificates go to the pods;
the bundle itself stays here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PUBLIC_CAS = Path("/usr/share/ca-certificates/mozilla")
PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_END = "-----END CERTIFICATE-----"


def parse_config_list(text: str) -> dict[str, str]:
    """``pip config list`` lines (``global.cert='/x'``, ``:env:.proxy='y'``) by key;
    an environment variable wins over a file (as pip does)."""
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in text.splitlines():
        if "=" not in line or "." not in line.split("=", 1)[0]:
            continue
        name, value = line.split("=", 1)
        scope, key = name.rsplit(".", 1)
        value = value.strip().strip("'\"")
        (env if scope == ":env:" else files)[key] = value
    return {**files, **env}


def certificates(pem: str) -> list[str]:
    """The PEM blocks of a bundle, normalised (stripped lines)."""
    out, current = [], None
    for line in pem.splitlines():
        line = line.strip()
        if line == PEM_BEGIN:
            current = [line]
        elif current is not None:
            current.append(line)
            if line == PEM_END:
                out.append("\n".join(current))
                current = None
    return out


def extra_certificates(bundle: str, public: set[str]) -> list[str]:
    """The certificates of ``bundle`` that are not among the public ones."""
    return [c for c in certificates(bundle) if c not in public]


def package_index(pip_config: str | None = None) -> dict:
    """The chart's ``packageIndex`` values for this machine (empty parts left out)."""
    if pip_config is None:
        pip_config = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    conf = parse_config_list(pip_config)
    values: dict = {}

    def urls(key: str) -> list[str]:
        return [u for u in conf.get(key, "").split() if not u.startswith("file:")]

    if index := urls("index-url"):
        values["indexUrl"] = index[0]
    if extra := urls("extra-index-url"):
        values["extraIndexUrls"] = extra
    if conf.get("proxy"):
        values["proxy"] = conf["proxy"]
    if hosts := conf.get("trusted-host", "").split():
        values["trustedHosts"] = hosts
    cert = conf.get("cert")
    if cert and Path(cert).is_file():
        public = set()
        for crt in PUBLIC_CAS.glob("*.crt") if PUBLIC_CAS.is_dir() else []:
            public.update(certificates(crt.read_text(errors="replace")))
        extra_cas = extra_certificates(Path(cert).read_text(errors="replace"), public)
        if extra_cas:
            values["caCertificates"] = "\n".join(extra_cas) + "\n"
    return values
