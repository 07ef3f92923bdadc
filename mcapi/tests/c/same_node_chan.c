/*
 * Packet and scalar channels whose two sides are in one node, driven by ONE thread (issue 22):
 * connect, both opens, a wait on each open (in either order), up to the channel's buffer
 * count of packets or scalars sent, then all of them received, twice over (credits come
 * back), and both sides closed. No second thread, no second process.
 *
 *   same_node_chan NODE
 *
 * The mode comes from MCAPI_COMPAT (spec or mca); in mca mode each open also completes on
 * its own (a wait on the send open before the receive open is called), and packets and
 * scalars sent before the receive side opened wait for it.
 */
#include "check.h"

#include <stdint.h>

#define DOMAIN 0
#define WAIT_MS 30000

static int compat_mca;

/* A non-blocking call started: MCAPI_SUCCESS (done already) or MCAPI_PENDING. */
#define EXPECT_STARTED(status)                                                              \
    do {                                                                                    \
        if ((status) != MCAPI_PENDING) {                                                    \
            EXPECT_OK(status);                                                              \
        }                                                                                   \
    } while (0)

static void wait_ok(mcapi_request_t* request) {
    mcapi_status_t status;
    size_t size;
    EXPECT(mcapi_wait(request, &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
}

static mcapi_endpoint_t endpoint(mcapi_port_t port) {
    mcapi_status_t status;
    mcapi_endpoint_t e = mcapi_endpoint_create(port, &status);
    EXPECT_OK(status);
    return e;
}

static void endpoint_delete(mcapi_endpoint_t e) {
    mcapi_status_t status;
    mcapi_endpoint_delete(e, &status);
    EXPECT_OK(status);
}

static mcapi_uint_t recv_buffers(mcapi_endpoint_t e) {
    mcapi_status_t status;
    mcapi_uint_t n = 0;
    mcapi_endpoint_get_attribute(e, MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS, &n, sizeof n, &status);
    EXPECT_OK(status);
    EXPECT(n > 0);
    return n;
}

/* ---- packet channels ---- */

struct pkt_channel {
    mcapi_endpoint_t send_ep, recv_ep;
    mcapi_pktchan_send_hndl_t send;
    mcapi_pktchan_recv_hndl_t recv;
};

static void pkt_connect(struct pkt_channel* c, mcapi_port_t port) {
    mcapi_status_t status;
    mcapi_request_t request;
    c->send_ep = endpoint(port);
    c->recv_ep = endpoint(port + 1);
    mcapi_pktchan_connect_i(c->send_ep, c->recv_ep, &request, &status);
    EXPECT_STARTED(status);
    wait_ok(&request);
}

/* Both opens issued, then waited for: the receive open first or the send open first. */
static void pkt_open_both(struct pkt_channel* c, int send_first) {
    mcapi_status_t status;
    mcapi_request_t send_req, recv_req;
    mcapi_pktchan_recv_open_i(&c->recv, c->recv_ep, &recv_req, &status);
    EXPECT_STARTED(status);
    mcapi_pktchan_send_open_i(&c->send, c->send_ep, &send_req, &status);
    EXPECT_STARTED(status);
    if (send_first) {
        wait_ok(&send_req);
        wait_ok(&recv_req);
    } else {
        wait_ok(&recv_req);
        wait_ok(&send_req);
    }
}

static void pkt_close(struct pkt_channel* c) {
    mcapi_status_t status;
    mcapi_request_t send_req, recv_req;
    mcapi_pktchan_send_close_i(c->send, &send_req, &status);
    EXPECT_STARTED(status);
    mcapi_pktchan_recv_close_i(c->recv, &recv_req, &status);
    EXPECT_STARTED(status);
    wait_ok(&send_req);
    wait_ok(&recv_req);
    endpoint_delete(c->send_ep);
    endpoint_delete(c->recv_ep);
}

static void fill(unsigned char* p, size_t len, unsigned seed) {
    size_t i;
    for (i = 0; i < len; i++) {
        p[i] = (unsigned char)(seed * 31 + i);
    }
}

static size_t pkt_len(unsigned i) { return 1 + (i * 37) % 200; }

/* Receives `n` packets with sequence numbers first.. and releases them. */
static void pkt_receive(struct pkt_channel* c, unsigned first, unsigned n) {
    mcapi_status_t status;
    unsigned i;
    EXPECT(mcapi_pktchan_available(c->recv, &status) == n);
    EXPECT_OK(status);
    for (i = first; i < first + n; i++) {
        unsigned char want[256];
        void* buffer = NULL;
        size_t size = 0;
        fill(want, pkt_len(i), i);
        mcapi_pktchan_recv(c->recv, &buffer, &size, &status);
        EXPECT_OK(status);
        EXPECT(size == pkt_len(i));
        EXPECT(memcmp(buffer, want, size) == 0);
        mcapi_pktchan_release(buffer, &status);
        EXPECT_OK(status);
    }
    EXPECT(mcapi_pktchan_available(c->recv, &status) == 0);
}

/* `n` packets by pktchan_send_i (each complete at its first test) or pktchan_send. */
static void pkt_send(struct pkt_channel* c, unsigned first, unsigned n, int blocking) {
    mcapi_status_t status;
    unsigned i;
    for (i = first; i < first + n; i++) {
        unsigned char data[256];
        fill(data, pkt_len(i), i);
        if (blocking) {
            mcapi_pktchan_send(c->send, data, pkt_len(i), &status);
            EXPECT_OK(status);
        } else {
            mcapi_request_t request;
            mcapi_pktchan_send_i(c->send, data, pkt_len(i), &request, &status);
            EXPECT_STARTED(status);
            {
                size_t size;
                if (mcapi_test(&request, &size, &status) != MCAPI_TRUE) {
                    fprintf(stderr, "packet %u of %u..%u: not complete at its first test\n", i,
                            first, first + n - 1);
                    exit(1);
                }
                EXPECT_OK(status);
            }
        }
    }
}

static void packet_channel(mcapi_port_t port, int send_first) {
    struct pkt_channel c;
    mcapi_status_t status;
    mcapi_request_t request;
    void* buffer = NULL;
    unsigned n, round;
    pkt_connect(&c, port);
    n = recv_buffers(c.recv_ep);
    pkt_open_both(&c, send_first);
    for (round = 0; round < 2; round++) {
        pkt_send(&c, round * n, n, round == 1);
        pkt_receive(&c, round * n, n);
    }
    /* A pending receive completes at its first test once a packet was sent. */
    mcapi_pktchan_recv_i(c.recv, &buffer, &request, &status);
    EXPECT_STARTED(status);
    pkt_send(&c, 2 * n, 1, 0);
    {
        size_t size = 0;
        EXPECT(mcapi_test(&request, &size, &status) == MCAPI_TRUE);
        EXPECT_OK(status);
        EXPECT(size == pkt_len(2 * n));
        mcapi_pktchan_release(buffer, &status);
        EXPECT_OK(status);
    }
    /* One packet more than the buffers: the send_i stays pending until one is received. */
    pkt_send(&c, 0, n, 0);
    {
        unsigned char data[256];
        size_t size;
        fill(data, pkt_len(n), n);
        mcapi_pktchan_send_i(c.send, data, pkt_len(n), &request, &status);
        EXPECT_STARTED(status);
        EXPECT(mcapi_test(&request, &size, &status) == MCAPI_FALSE);
        mcapi_pktchan_recv(c.recv, &buffer, &size, &status);
        EXPECT_OK(status);
        mcapi_pktchan_release(buffer, &status);
        EXPECT_OK(status);
        wait_ok(&request);
        pkt_receive(&c, 1, n);
    }
    pkt_close(&c);
    printf("packet channel on ports %u/%u (%s open waited first): %u packets x 2 rounds\n",
           (unsigned)port, (unsigned)port + 1, send_first ? "send" : "receive", n);
}

/* Compat mode: the send open completes alone; packets sent before the receive side opens
 * wait for it. Spec mode: the send open waits for the receive open. */
static void packet_channel_open_alone(mcapi_port_t port) {
    struct pkt_channel c;
    mcapi_status_t status;
    mcapi_request_t send_req, recv_req, sends[4];
    unsigned char data[4][256];
    size_t size;
    unsigned i;
    pkt_connect(&c, port);
    mcapi_pktchan_send_open_i(&c.send, c.send_ep, &send_req, &status);
    EXPECT_STARTED(status);
    if (compat_mca) {
        wait_ok(&send_req);
        /* Each pending send's buffer stays untouched until its request completes. */
        for (i = 0; i < 4; i++) {
            fill(data[i], pkt_len(i), i);
            mcapi_pktchan_send_i(c.send, data[i], pkt_len(i), &sends[i], &status);
            EXPECT_STARTED(status);
            EXPECT(mcapi_test(&sends[i], &size, &status) == MCAPI_FALSE);
        }
        mcapi_pktchan_recv_open_i(&c.recv, c.recv_ep, &recv_req, &status);
        EXPECT_STARTED(status);
        wait_ok(&recv_req);
        for (i = 0; i < 4; i++) {
            wait_ok(&sends[i]);
        }
        pkt_receive(&c, 0, 4);
    } else {
        EXPECT(mcapi_test(&send_req, &size, &status) == MCAPI_FALSE);
        EXPECT(mcapi_wait(&send_req, &size, 1, &status) == MCAPI_FALSE);
        EXPECT_STATUS(status, MCAPI_TIMEOUT);
        mcapi_pktchan_recv_open_i(&c.recv, c.recv_ep, &recv_req, &status);
        EXPECT_STARTED(status);
        wait_ok(&send_req);
        wait_ok(&recv_req);
    }
    pkt_send(&c, 10, 3, 1);
    pkt_receive(&c, 10, 3);
    pkt_close(&c);
    printf("packet channel on ports %u/%u: send open waited alone (%s mode)\n", (unsigned)port,
           (unsigned)port + 1, compat_mca ? "mca" : "spec");
}

/* ---- scalar channels ---- */

struct scl_channel {
    mcapi_endpoint_t send_ep, recv_ep;
    mcapi_sclchan_send_hndl_t send;
    mcapi_sclchan_recv_hndl_t recv;
};

static void scl_connect(struct scl_channel* c, mcapi_port_t port) {
    mcapi_status_t status;
    mcapi_request_t request;
    c->send_ep = endpoint(port);
    c->recv_ep = endpoint(port + 1);
    mcapi_sclchan_connect_i(c->send_ep, c->recv_ep, &request, &status);
    EXPECT_STARTED(status);
    wait_ok(&request);
}

static void scl_open_both(struct scl_channel* c, int send_first) {
    mcapi_status_t status;
    mcapi_request_t send_req, recv_req;
    mcapi_sclchan_send_open_i(&c->send, c->send_ep, &send_req, &status);
    EXPECT_STARTED(status);
    mcapi_sclchan_recv_open_i(&c->recv, c->recv_ep, &recv_req, &status);
    EXPECT_STARTED(status);
    if (send_first) {
        wait_ok(&send_req);
        wait_ok(&recv_req);
    } else {
        wait_ok(&recv_req);
        wait_ok(&send_req);
    }
}

static void scl_close(struct scl_channel* c) {
    mcapi_status_t status;
    mcapi_request_t send_req, recv_req;
    mcapi_sclchan_recv_close_i(c->recv, &recv_req, &status);
    EXPECT_STARTED(status);
    mcapi_sclchan_send_close_i(c->send, &send_req, &status);
    EXPECT_STARTED(status);
    wait_ok(&recv_req);
    wait_ok(&send_req);
    endpoint_delete(c->send_ep);
    endpoint_delete(c->recv_ep);
}

static uint64_t scalar_value(unsigned width, unsigned i) {
    uint64_t v = 0x0123456789ABCDEFull ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
    return width == 64 ? v : v & ((1ull << width) - 1);
}

static void scl_send_one(struct scl_channel* c, unsigned width, uint64_t v) {
    mcapi_status_t status;
    switch (width) {
    case 8: mcapi_sclchan_send_uint8(c->send, (mcapi_uint8_t)v, &status); break;
    case 16: mcapi_sclchan_send_uint16(c->send, (mcapi_uint16_t)v, &status); break;
    case 32: mcapi_sclchan_send_uint32(c->send, (mcapi_uint32_t)v, &status); break;
    default: mcapi_sclchan_send_uint64(c->send, v, &status); break;
    }
    EXPECT_OK(status);
}

static uint64_t scl_recv_one(struct scl_channel* c, unsigned width) {
    mcapi_status_t status;
    uint64_t v;
    switch (width) {
    case 8: v = mcapi_sclchan_recv_uint8(c->recv, &status); break;
    case 16: v = mcapi_sclchan_recv_uint16(c->recv, &status); break;
    case 32: v = mcapi_sclchan_recv_uint32(c->recv, &status); break;
    default: v = mcapi_sclchan_recv_uint64(c->recv, &status); break;
    }
    EXPECT_OK(status);
    return v;
}

static void scl_exchange(struct scl_channel* c, unsigned width, unsigned first, unsigned n) {
    mcapi_status_t status;
    unsigned i;
    for (i = first; i < first + n; i++) {
        scl_send_one(c, width, scalar_value(width, i));
    }
    EXPECT(mcapi_sclchan_available(c->recv, &status) == n);
    EXPECT_OK(status);
    for (i = first; i < first + n; i++) {
        EXPECT(scl_recv_one(c, width) == scalar_value(width, i));
    }
    EXPECT(mcapi_sclchan_available(c->recv, &status) == 0);
    EXPECT_OK(status);
}

static void scalar_channel(mcapi_port_t port, unsigned width, int send_first) {
    struct scl_channel c;
    unsigned n, round;
    scl_connect(&c, port);
    n = recv_buffers(c.recv_ep);
    scl_open_both(&c, send_first);
    for (round = 0; round < 3; round++) {
        scl_exchange(&c, width, round * n, n);
    }
    scl_close(&c);
    printf("scalar channel of %u bits on ports %u/%u: %u scalars x 3 rounds\n", width,
           (unsigned)port, (unsigned)port + 1, n);
}

static void scalar_channel_open_alone(mcapi_port_t port) {
    struct scl_channel c;
    mcapi_status_t status;
    mcapi_request_t send_req, recv_req;
    size_t size;
    scl_connect(&c, port);
    mcapi_sclchan_send_open_i(&c.send, c.send_ep, &send_req, &status);
    EXPECT_STARTED(status);
    if (compat_mca) {
        wait_ok(&send_req);
        mcapi_sclchan_recv_open_i(&c.recv, c.recv_ep, &recv_req, &status);
        EXPECT_STARTED(status);
        wait_ok(&recv_req);
    } else {
        EXPECT(mcapi_test(&send_req, &size, &status) == MCAPI_FALSE);
        mcapi_sclchan_recv_open_i(&c.recv, c.recv_ep, &recv_req, &status);
        EXPECT_STARTED(status);
        wait_ok(&recv_req);
        wait_ok(&send_req);
    }
    scl_exchange(&c, 32, 0, 5);
    scl_close(&c);
    printf("scalar channel on ports %u/%u: send open waited alone (%s mode)\n", (unsigned)port,
           (unsigned)port + 1, compat_mca ? "mca" : "spec");
}

int main(int argc, char** argv) {
    mcapi_status_t status;
    mcapi_info_t info;
    const char* compat = getenv("MCAPI_COMPAT");
    unsigned widths[4] = {8, 16, 32, 64};
    unsigned w;
    EXPECT(argc == 2);
    compat_mca = compat != NULL && strcmp(compat, "mca") == 0;
    mcapi_initialize(DOMAIN, (mcapi_node_t)atoi(argv[1]), NULL, NULL, &info, &status);
    EXPECT_OK(status);

    packet_channel(10, 0);
    packet_channel(12, 1);
    for (w = 0; w < 4; w++) {
        scalar_channel((mcapi_port_t)(20 + 2 * w), widths[w], (int)(w % 2));
    }
    packet_channel_open_alone(40);
    scalar_channel_open_alone(42);

    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("same-node channels: all checks passed\n");
    return 0;
}
