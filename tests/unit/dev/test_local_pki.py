"""The local CA issues what each component needs."""

from cryptography import x509
from cryptography.x509.oid import NameOID
from kinetic_dev.pki import PKI, leaf_specs

NODE_IP = "10.244.0.1"


def _ips(path) -> set[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(i) for i in san.get_values_for_type(x509.IPAddress)}


def test_pki_creates_ca_leaves_and_sa_key(tmp_path):
    pki = PKI(tmp_path)
    assert pki.ensure("kinetic-node", NODE_IP) is True
    assert pki.complete(leaf_specs("kinetic-node", NODE_IP))
    admin = x509.load_pem_x509_certificate(pki.crt("admin").read_bytes())
    orgs = [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]
    node = x509.load_pem_x509_certificate(pki.crt("node").read_bytes())
    assert (
        node.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        == "system:node:kinetic-node"
    )
    proxy = x509.load_pem_x509_certificate(pki.crt("kube-proxy").read_bytes())
    assert proxy.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-proxy"
    serving = x509.load_pem_x509_certificate(pki.crt("node-serving").read_bytes())
    # The API server checks the kubelet's certificate against the node's address.
    assert _ips(pki.crt("node-serving")) == {"127.0.0.1", NODE_IP}
    assert _ips(pki.crt("apiserver")) == {"127.0.0.1", "10.0.0.1", NODE_IP}
    ca = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    assert serving.issuer == ca.subject
    before = pki.crt("admin").read_bytes()
    assert pki.ensure("kinetic-node", NODE_IP) is False  # idempotent
    assert pki.crt("admin").read_bytes() == before


def test_a_new_node_address_reissues_only_the_serving_certificates(tmp_path):
    pki = PKI(tmp_path)
    pki.ensure("kinetic-node", NODE_IP)
    admin = pki.crt("admin").read_bytes()
    assert pki.ensure("kinetic-node", "10.250.0.1") is False  # same CA
    assert _ips(pki.crt("node-serving")) == {"127.0.0.1", "10.250.0.1"}
    assert "10.250.0.1" in _ips(pki.crt("apiserver"))
    assert pki.crt("admin").read_bytes() == admin
