"""gguf_vocab.py - copies a GGUF's metadata, without tensors, into a new file with some keys
replaced: a vocabulary-only model for llama.cpp (vocab_only=True) and m40 alike. Used by
conformance.py to run every supported tokenizer.ggml.pre over a real BPE vocabulary."""
import struct

_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class _Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, n):
        b = self.d[self.o:self.o + n]
        self.o += n
        return b

    def unpack(self, fmt):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))

    def value(self, t):
        """The raw bytes of a value of type t (re-emitted verbatim)."""
        start = self.o
        if t == 8:
            (n,) = self.unpack("Q")
            self.take(n)
        elif t == 9:
            et, n = self.unpack("IQ")
            if et in _FMT:
                self.take(n * struct.calcsize("<" + _FMT[et]))
            else:
                for _ in range(n):
                    self.value(et)
        else:
            self.take(struct.calcsize("<" + _FMT[t]))
        return self.d[start:self.o]


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_vocab_only(src, dst, replace):
    """Writes src's metadata to dst without tensors; replace maps key -> str value."""
    with open(src, "rb") as f:
        r = _Reader(f.read(64 << 20))
    magic, version, _n_tensors, n_kv = r.unpack("4sIQQ")
    kvs = []
    for _ in range(n_kv):
        (klen,) = r.unpack("Q")
        key = r.take(klen).decode()
        (t,) = r.unpack("I")
        raw = r.value(t)
        if key in replace:
            t, raw = 8, _str(replace[key])
        kvs.append((key, t, raw))
    for key, val in replace.items():
        if key not in [k for k, _, _ in kvs]:
            kvs.append((key, 8, _str(val)))
    out = struct.pack("<4sIQQ", magic, version, 0, len(kvs))
    for key, t, raw in kvs:
        out += _str(key) + struct.pack("<I", t) + raw
    out += b"\0" * (-len(out) % 32)
    with open(dst, "wb") as f:
        f.write(out)
