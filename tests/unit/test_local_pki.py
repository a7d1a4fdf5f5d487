"""The local CA issues what each component needs."""

from cryptography import x509
from cryptography.x509.oid import NameOID
from kinetic_dev.pki import PKI, leaf_specs


def test_pki_creates_ca_leaves_and_sa_key(tmp_path):
    pki = PKI(tmp_path)
    assert pki.ensure("kinetic-node") is True
    assert pki.complete(leaf_specs("kinetic-node"))
    admin = x509.load_pem_x509_certificate(pki.crt("admin").read_bytes())
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    node = x509.load_pem_x509_certificate(pki.crt("node").read_bytes())
    assert (
        node.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        == "system:node:kinetic-node"
    )
    serving = x509.load_pem_x509_certificate(pki.crt("node-serving").read_bytes())
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(i) for i in san.get_values_for_type(x509.IPAddress)]
    ca = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    assert serving.issuer == ca.subject
    before = pki.crt("admin").read_bytes()
    assert pki.ensure("kinetic-node") is False  # idempotent
    assert pki.crt("admin").read_bytes() == before
