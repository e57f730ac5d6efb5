/* hello.c - decoding the HELLO a client opens its connection with (m40/proto.h), apart
 * from the socket I/O so that it can be tested and fuzzed alone. */
#include <string.h>

#include "ipc/ipc.h"
#include "m40/error.h"

int m40_ipc_hello_decode(const void *buf, size_t len, uint32_t *ret_version)
{
        struct m40_proto_msg m;
        struct m40_proto_hello h;

        if (len != sizeof(m) + sizeof(h))
                return M40_EPROTO;
        memcpy(&m, buf, sizeof(m));
        memcpy(&h, (const char *)buf + sizeof(m), sizeof(h));
        if (m.type != M40_PROTO_HELLO || m.len != sizeof(h) || h.magic != M40_PROTO_MAGIC)
                return M40_EPROTO;
        *ret_version = h.version;
        if (h.version < M40_PROTO_VERSION_MIN || h.version > M40_PROTO_VERSION)
                return M40_EVERSION;
        return 0;
}
