"""Tail logic of the kubelet log endpoint."""

from kinetic_dev.logserver import tail_bytes, tail_offset


def test_tail_bytes():
    data = b"a\nb\nc\n"
    assert tail_bytes(data, 1) == b"c\n"
    assert tail_bytes(data, 2) == b"b\nc\n"
    assert tail_bytes(data, 10) == data
    assert tail_bytes(data, 0) == b""
    assert tail_bytes(b"a\nb", 1) == b"b"


def test_tail_offset_large_file(tmp_path):
    p = tmp_path / "log"
    lines = [f"line {i}\n".encode() for i in range(50000)]
    p.write_bytes(b"".join(lines))
    off = tail_offset(p, 3)
    assert p.read_bytes()[off:] == b"".join(lines[-3:])
    assert tail_offset(p, 10**6) == 0
    assert tail_offset(p, -1) == 0
