/* fuzz_handshake.c - libFuzzer target over the daemon's decoding of a client's HELLO
 * (m40_ipc_hello_decode, daemon/ipc/hello.c), the first bytes any local user can send
 * m40d, under ASan and UBSan. The input is what the client sent (any length; the daemon
 * passes the first 24 bytes). Property: the decoder agrees with the protocol's rules as
 * m40/proto.h states them, written out again here: 0 with the version for a HELLO of a
 * served version, M40_EVERSION with the version for a HELLO of another one, M40_EPROTO for
 * anything else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/ipc.h"
#include "m40/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t u32(const uint8_t *p)
{
        uint32_t v;

        memcpy(&v, p, 4);
        return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        uint32_t version = 0xdeadbeef, want_version = 0;
        int r, want;

        r = m40_ipc_hello_decode(data, size, &version);
        if (size != 24 || u32(data) != M40_PROTO_HELLO || u32(data + 4) != 16 ||
            u32(data + 8) != M40_PROTO_MAGIC) {
                want = M40_EPROTO;
        } else {
                want_version = u32(data + 12);
                want = want_version >= M40_PROTO_VERSION_MIN && want_version <= M40_PROTO_VERSION
                               ? 0
                               : M40_EVERSION;
        }
        if (r != want || (want != M40_EPROTO && version != want_version) ||
            (want == M40_EPROTO && version != 0xdeadbeef))
                abort();
        return 0;
}
