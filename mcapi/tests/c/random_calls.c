/* Seeded random calls of the whole C API with garbage handles, NULLs, absurd sizes and
 * priorities, short timeouts, before initialize and after finalize: every call must return
 * (no crash, no hang: blocking calls get endpoint timeouts of a few ms) with a status that is
 * a status, and afterwards a message must still round-trip on fresh endpoints.
 *
 *     random_calls SEED CALLS      (MCAPI_PROVIDER, MCAPI_JOB from the environment)
 *
 * Pointers passed are NULL or valid: a wild pointer is outside any C API's contract. */
#include "check.h"

#include <stdint.h>

static uint64_t rng;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t pick(uint64_t n) { return n ? next() % n : 0; }

#define POOL 16
static uint64_t endpoints[POOL], handles[POOL];
static mcapi_request_t requests[POOL];
static char buf[70000];
static void* packet;

/* A value of a handle-like kind: one of ours (live or stale), zero, or garbage. */
static uint64_t handle_from(const uint64_t* pool) {
    switch (pick(6)) {
        case 0: return 0;
        case 1: return next();
        case 2: return 0xdeadbeef;
        default: return pool[pick(POOL)];
    }
}

static size_t size_any(void) {
    static const size_t sizes[] = {0, 1, 8, 4096, 65536, 65537, 1 << 20, (size_t)-1};
    return pick(4) ? sizes[pick(8)] : (size_t)pick(70000);
}

static void* ptr_or_null(void) { return pick(8) ? (void*)buf : NULL; }
static mcapi_status_t* status_or_null(mcapi_status_t* s) { return pick(16) ? s : NULL; }

/* A status the library returned must be one (or untouched when NULL was passed). */
static unsigned long calls;
static void check_status(mcapi_status_t s) {
    char text[MCAPI_MAX_STATUS_MSG_LEN];
    if (s != (mcapi_status_t)-1 && !mcapi_display_status(s, text, sizeof text)) {
        fprintf(stderr, "call %lu returned %d, which is no status\n", calls, (int)s);
        exit(1);
    }
}

static void remember(uint64_t* pool, uint64_t v) { pool[pick(POOL)] = v; }

static void one_call(mcapi_node_t node) {
    mcapi_status_t st = (mcapi_status_t)-1;
    mcapi_status_t* s = status_or_null(&st);
    mcapi_request_t r = 0;
    size_t size = 0;
    mcapi_timeout_t t = (mcapi_timeout_t)pick(3);
    calls++;
    switch (pick(30)) {
        case 0: {
            mcapi_endpoint_t e = mcapi_endpoint_create((mcapi_port_t)pick(8), s);
            mcapi_timeout_t ms = 2;
            mcapi_status_t ignored;
            mcapi_endpoint_set_attribute(e, MCAPI_ENDP_ATTR_TIMEOUT, &ms, sizeof ms, &ignored);
            remember(endpoints, e);
            break;
        }
        case 1: mcapi_endpoint_delete(handle_from(endpoints), s); break;
        case 2:
            remember(endpoints,
                     mcapi_endpoint_get(0, pick(3) ? node : (mcapi_node_t)next(), (mcapi_port_t)pick(8),
                                        t, s));
            break;
        case 3: {
            mcapi_uint_t v = 0;
            mcapi_endpoint_get_attribute(handle_from(endpoints), (mcapi_uint_t)pick(14),
                                         pick(8) ? (void*)&v : NULL, pick(2) ? sizeof v : size_any(),
                                         s);
            break;
        }
        case 4: {
            mcapi_timeout_t ms = (mcapi_timeout_t)pick(4);
            mcapi_endpoint_set_attribute(handle_from(endpoints), (mcapi_uint_t)pick(14),
                                         pick(8) ? (void*)&ms : NULL,
                                         pick(2) ? sizeof ms : size_any(), s);
            break;
        }
        case 5:
            mcapi_msg_send(handle_from(endpoints), handle_from(endpoints), ptr_or_null(),
                           size_any() % 70000, (mcapi_priority_t)pick(10), s);
            break;
        case 6:
            mcapi_msg_send_i(handle_from(endpoints), handle_from(endpoints), ptr_or_null(),
                             size_any() % 70000, (mcapi_priority_t)pick(10), pick(8) ? &r : NULL,
                             s);
            remember(requests, r);
            break;
        case 7:
            mcapi_msg_recv(handle_from(endpoints), ptr_or_null(), size_any() % 70000,
                           pick(8) ? &size : NULL, s);
            break;
        case 8:
            mcapi_msg_recv_i(handle_from(endpoints), ptr_or_null(), size_any() % 70000,
                             pick(8) ? &r : NULL, s);
            remember(requests, r);
            break;
        case 9: mcapi_msg_available(handle_from(endpoints), s); break;
        case 10:
            mcapi_pktchan_connect_i(handle_from(endpoints), handle_from(endpoints),
                                    pick(8) ? &r : NULL, s);
            remember(requests, r);
            break;
        case 11:
            mcapi_sclchan_connect_i(handle_from(endpoints), handle_from(endpoints),
                                    pick(8) ? &r : NULL, s);
            remember(requests, r);
            break;
        case 12: {
            uint64_t h = 0;
            switch (pick(4)) {
                case 0: mcapi_pktchan_recv_open_i(pick(8) ? &h : NULL, handle_from(endpoints), &r, s); break;
                case 1: mcapi_pktchan_send_open_i(pick(8) ? &h : NULL, handle_from(endpoints), &r, s); break;
                case 2: mcapi_sclchan_recv_open_i(pick(8) ? &h : NULL, handle_from(endpoints), &r, s); break;
                default: mcapi_sclchan_send_open_i(pick(8) ? &h : NULL, handle_from(endpoints), &r, s); break;
            }
            remember(handles, h);
            remember(requests, r);
            break;
        }
        case 13:
            mcapi_pktchan_send(handle_from(handles), ptr_or_null(), size_any() % 70000, s);
            break;
        case 14:
            mcapi_pktchan_send_i(handle_from(handles), ptr_or_null(), size_any() % 70000,
                                 pick(8) ? &r : NULL, s);
            remember(requests, r);
            break;
        case 15: {
            void* p = NULL;
            mcapi_pktchan_recv(handle_from(handles), pick(8) ? &p : NULL, pick(8) ? &size : NULL, s);
            if (p) packet = p;
            break;
        }
        case 16:
            mcapi_pktchan_recv_i(handle_from(handles), pick(8) ? &packet : NULL, pick(8) ? &r : NULL, s);
            remember(requests, r);
            break;
        case 17: mcapi_pktchan_available(handle_from(handles), s); break;
        case 18:
            /* Only a packet we got (perhaps released already), NULL, or our own buffer. */
            mcapi_pktchan_release(pick(2) ? packet : ptr_or_null(), s);
            break;
        case 19: mcapi_pktchan_release_test(pick(2) ? packet : ptr_or_null(), s); break;
        case 20:
            switch (pick(4)) {
                case 0: mcapi_pktchan_recv_close_i(handle_from(handles), &r, s); break;
                case 1: mcapi_pktchan_send_close_i(handle_from(handles), &r, s); break;
                case 2: mcapi_sclchan_recv_close_i(handle_from(handles), &r, s); break;
                default: mcapi_sclchan_send_close_i(handle_from(handles), &r, s); break;
            }
            remember(requests, r);
            break;
        case 21:
            switch (pick(4)) {
                case 0: mcapi_sclchan_send_uint8(handle_from(handles), (mcapi_uint8_t)next(), s); break;
                case 1: mcapi_sclchan_send_uint16(handle_from(handles), (mcapi_uint16_t)next(), s); break;
                case 2: mcapi_sclchan_send_uint32(handle_from(handles), (mcapi_uint32_t)next(), s); break;
                default: mcapi_sclchan_send_uint64(handle_from(handles), next(), s); break;
            }
            break;
        case 22:
            switch (pick(4)) {
                case 0: mcapi_sclchan_recv_uint8(handle_from(handles), s); break;
                case 1: mcapi_sclchan_recv_uint16(handle_from(handles), s); break;
                case 2: mcapi_sclchan_recv_uint32(handle_from(handles), s); break;
                default: mcapi_sclchan_recv_uint64(handle_from(handles), s); break;
            }
            break;
        case 23: mcapi_sclchan_available(handle_from(handles), s); break;
        case 24: {
            mcapi_request_t q = handle_from(requests);
            mcapi_test(pick(8) ? &q : NULL, pick(8) ? &size : NULL, s);
            break;
        }
        case 25: {
            mcapi_request_t q = handle_from(requests);
            mcapi_wait(pick(8) ? &q : NULL, pick(8) ? &size : NULL, t, s);
            break;
        }
        case 26: {
            mcapi_request_t qs[4];
            mcapi_request_t* ps[4];
            for (int i = 0; i < 4; i++) {
                qs[i] = handle_from(requests);
                ps[i] = pick(8) ? &qs[i] : NULL;
            }
            mcapi_wait_any((size_t)pick(5), pick(8) ? ps : NULL, pick(8) ? &size : NULL, t, s);
            break;
        }
        case 27: {
            mcapi_request_t q = handle_from(requests);
            mcapi_cancel(pick(8) ? &q : NULL, s);
            break;
        }
        case 28: {
            mcapi_uint_t v = 0;
            mcapi_node_get_attribute(0, pick(2) ? node : (mcapi_node_t)pick(300), (mcapi_uint_t)pick(8),
                                     pick(8) ? (void*)&v : NULL, pick(2) ? sizeof v : size_any(), s);
            break;
        }
        default:
            mcapi_domain_id_get(s);
            mcapi_node_id_get(s);
            break;
    }
    check_status(st);
}

/* Every endpoint of ours gets a short timeout, so that no blocking call blocks for long. */
static void short_timeouts(void) {
    for (int i = 0; i < POOL; i++) {
        mcapi_timeout_t ms = 2;
        mcapi_status_t st;
        mcapi_endpoint_set_attribute(endpoints[i], MCAPI_ENDP_ATTR_TIMEOUT, &ms, sizeof ms, &st);
    }
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: random_calls SEED CALLS\n");
        return 2;
    }
    rng = strtoull(argv[1], NULL, 10) | 1;
    unsigned long n = strtoul(argv[2], NULL, 10);
    const mcapi_node_t node = 7;
    mcapi_status_t st;
    mcapi_info_t info;

    for (unsigned long i = 0; i < n / 10; i++) one_call(node); /* before initialize */

    mcapi_initialize(0, node, NULL, NULL, &info, &st);
    EXPECT_OK(st);
    /* A few endpoints (shm posts a node's receives from one limited pool), each twice. */
    for (int i = 0; i < POOL / 2; i++) {
        endpoints[i] = endpoints[i + POOL / 2] = mcapi_endpoint_create((mcapi_port_t)(100 + i), &st);
        EXPECT_OK(st);
    }
    short_timeouts();
    for (unsigned long i = 0; i < n; i++) {
        one_call(node);
    }

    /* Health: a message still round-trips between fresh endpoints. */
    mcapi_endpoint_t a = mcapi_endpoint_create(200, &st);
    EXPECT_OK(st);
    mcapi_endpoint_t b = mcapi_endpoint_create(201, &st);
    EXPECT_OK(st);
    mcapi_msg_send(a, b, "healthy", 8, 1, &st);
    EXPECT_OK(st);
    char got[8] = {0};
    size_t len = 0;
    mcapi_msg_recv(b, got, sizeof got, &len, &st);
    EXPECT_OK(st);
    EXPECT(len == 8 && memcmp(got, "healthy", 8) == 0);

    mcapi_finalize(&st);
    EXPECT_OK(st);
    for (unsigned long i = 0; i < n / 10; i++) one_call(node); /* after finalize */
    printf("%lu random calls, health check passed\n", calls);
    return 0;
}
