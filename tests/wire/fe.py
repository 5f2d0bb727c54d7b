"""Frontend message encoders and a backend message splitter, for tests only."""

import struct


def cstr(s):
    return s.encode() + b"\0"


def msg(t, body=b""):
    return t + struct.pack("!i", len(body) + 4) + body


def startup(**params):
    body = struct.pack("!i", 196608) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\0"
    return struct.pack("!i", len(body) + 4) + body


def ssl_request():
    return struct.pack("!ii", 8, 80877103)


def cancel_request(pid, secret):
    return struct.pack("!iiII", 16, 80877102, pid, secret)


def query(sql):
    return msg(b"Q", cstr(sql))


def parse(name, sql, oids=()):
    return msg(b"P", cstr(name) + cstr(sql) + struct.pack(f"!h{len(oids)}I", len(oids), *oids))


def bind(portal, stmt, params=(), fmts=(), rfmts=()):
    body = cstr(portal) + cstr(stmt) + struct.pack(f"!h{len(fmts)}h", len(fmts), *fmts)
    body += struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    return msg(b"B", body + struct.pack(f"!h{len(rfmts)}h", len(rfmts), *rfmts))


def describe(kind, name):
    return msg(b"D", kind.encode() + cstr(name))


def execute(portal, max_rows=0):
    return msg(b"E", cstr(portal) + struct.pack("!i", max_rows))


def close(kind, name):
    return msg(b"C", kind.encode() + cstr(name))


def sync():
    return msg(b"S")


def flush():
    return msg(b"H")


def terminate():
    return msg(b"X")


def split_backend(data):
    """Split backend bytes into [(type, body)]."""
    out, i = [], 0
    while i < len(data):
        t = data[i : i + 1]
        (n,) = struct.unpack_from("!i", data, i + 1)
        out.append((t, data[i + 5 : i + 1 + n]))
        i += 1 + n
    return out


def types_of(data):
    return "".join(t.decode() for t, _ in split_backend(data))


def error_fields(body):
    fields = {}
    for part in body.rstrip(b"\0").split(b"\0"):
        if part:
            fields[part[:1].decode()] = part[1:].decode()
    return fields
