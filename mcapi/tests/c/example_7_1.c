/*
 * Spec 7.1: static naming, with a third party connecting a packet channel.
 *
 *   example_7_1 sender PACKETS     node <0,0>: endpoint port 17, sends PACKETS packets
 *   example_7_1 receiver PACKETS   node <0,1>: endpoint port 37, receives and checks them
 *   example_7_1 third              node <0,2>: gets both endpoints by their static tuples
 *                                  and connects them (mcapi_endpoint_get + connect)
 *
 * Each process is a node. The sender and receiver open their ends as soon as their
 * endpoints exist (the channel's endpoints keep their default attributes: the third party
 * may connect them at any moment, and attributes of a connected endpoint are fixed), before or after the third party's connect (the opens complete once both
 * ends are open). The third party's mcapi_endpoint_get does not raise the endpoints' "get
 * reference count" (in this implementation that count is the number of other nodes using
 * an endpoint as a message destination, docs/implementation-defined.md), so the connect of
 * two endpoints it looked up is allowed, as 7.1 intends.
 *
 * Additions to the fragments of 7.1: the opens are waited on, packets flow, both ends
 * close, and the third party checks the endpoints' channel status remotely; so that the
 * channel is still connected while it checks, the sender starts sending only when the third
 * party says "go" (a message to the sender's port GO_PORT_ID, answered before the third
 * party finalizes).
 */
#include "check.h"

#define SENDER_DOMAIN 0
#define SENDER_NODE 0
#define SEND_PORT_ID 17
#define RECEIVER_DOMAIN 0
#define RECEIVER_NODE 1
#define RECV_PORT_ID 37
#define THIRD_NODE 2
#define THIRD_PORT_ID 1
#define GO_PORT_ID 18
#define WAIT_MS 30000

struct packet {
    mcapi_uint32_t sequence;
    char text[28];
};

static void initialize(mcapi_domain_t domain, mcapi_node_t node) {
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_initialize(domain, node, NULL, NULL, &info, &status);
    EXPECT_OK(status);
}

static void set_timeout(mcapi_endpoint_t endpoint) {
    mcapi_status_t status;
    mcapi_timeout_t timeout = WAIT_MS;
    mcapi_endpoint_set_attribute(endpoint, MCAPI_ENDP_ATTR_TIMEOUT, &timeout, sizeof timeout,
                                 &status);
    EXPECT_OK(status);
}

static void wait_for(mcapi_request_t* request) {
    mcapi_status_t status;
    size_t size;
    EXPECT(mcapi_wait(request, &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
}

static int sender(unsigned packets) {
    mcapi_status_t status;
    mcapi_request_t request;
    mcapi_pktchan_send_hndl_t send_handle;
    struct packet p;
    unsigned i;
    initialize(SENDER_DOMAIN, SENDER_NODE);

    /* Sender process (7.1). */
    mcapi_endpoint_t send_endpoint = mcapi_endpoint_create(SEND_PORT_ID, &status);
    EXPECT_OK(status);

    mcapi_pktchan_send_open_i(&send_handle, send_endpoint, &request, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_for(&request);
    {
        mcapi_endpoint_t go = mcapi_endpoint_create(GO_PORT_ID, &status), third;
        size_t size;
        EXPECT_OK(status);
        set_timeout(go);
        mcapi_msg_recv(go, &third, sizeof third, &size, &status);
        EXPECT_OK(status);
        EXPECT(size == sizeof third);
        mcapi_msg_send(go, third, "going", 5, 0, &status);
        EXPECT_OK(status);
    }
    for (i = 0; i < packets; i++) {
        memset(&p, 0, sizeof p);
        p.sequence = i;
        snprintf(p.text, sizeof p.text, "packet %u", i);
        mcapi_pktchan_send(send_handle, &p, sizeof p, &status);
        EXPECT_OK(status);
    }
    mcapi_pktchan_send_close_i(send_handle, &request, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_for(&request);
    mcapi_finalize(&status);
    EXPECT_OK(status);
    return 0;
}

static int receiver(unsigned packets) {
    mcapi_status_t status;
    mcapi_request_t request;
    mcapi_pktchan_recv_hndl_t receive_handle;
    unsigned i;
    initialize(RECEIVER_DOMAIN, RECEIVER_NODE);

    /* Receiver process (7.1). */
    mcapi_endpoint_t receive_endpoint = mcapi_endpoint_create(RECV_PORT_ID, &status);
    EXPECT_OK(status);

    mcapi_pktchan_recv_open_i(&receive_handle, receive_endpoint, &request, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_for(&request);
    for (i = 0; i < packets; i++) {
        struct packet* p;
        char want[28];
        size_t size;
        mcapi_pktchan_recv(receive_handle, (void**)&p, &size, &status);
        EXPECT_OK(status);
        EXPECT(size == sizeof *p);
        EXPECT(p->sequence == i);
        snprintf(want, sizeof want, "packet %u", i);
        EXPECT(strcmp(p->text, want) == 0);
        mcapi_pktchan_release(p, &status);
        EXPECT_OK(status);
    }
    mcapi_pktchan_recv_close_i(receive_handle, &request, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_for(&request);
    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("receiver: %u packets in order\n", packets);
    return 0;
}

static int third_party(void) {
    mcapi_status_t status;
    mcapi_request_t request;
    mcapi_uint_t flags;
    mcapi_timeout_t timeout = WAIT_MS;
    initialize(0, THIRD_NODE);

    /* Third party process (7.1): the endpoints by their static names, then the connect. */
    mcapi_endpoint_t send_endpoint =
        mcapi_endpoint_get(SENDER_DOMAIN, SENDER_NODE, SEND_PORT_ID, timeout, &status);
    EXPECT_OK(status);
    mcapi_endpoint_t receive_endpoint =
        mcapi_endpoint_get(RECEIVER_DOMAIN, RECEIVER_NODE, RECV_PORT_ID, timeout, &status);
    EXPECT_OK(status);
    mcapi_pktchan_connect_i(send_endpoint, receive_endpoint, &request, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_for(&request);

    /* Connected now, as both owners report. */
    mcapi_endpoint_get_attribute(send_endpoint, MCAPI_ENDP_ATTR_STATUS, &flags, sizeof flags,
                                 &status);
    EXPECT_OK(status);
    EXPECT(flags & MCAPI_ENDP_ATTR_STATUS_CONNECTED);
    EXPECT(flags & MCAPI_ENDP_ATTR_STATUS_PKTCHAN);
    EXPECT(flags & MCAPI_ENDP_ATTR_STATUS_SEND);
    mcapi_endpoint_get_attribute(receive_endpoint, MCAPI_ENDP_ATTR_STATUS, &flags,
                                 sizeof flags, &status);
    EXPECT_OK(status);
    EXPECT(flags & MCAPI_ENDP_ATTR_STATUS_CONNECTED);
    EXPECT(flags & MCAPI_ENDP_ATTR_STATUS_RECEIVE);
    /* A second connection of either endpoint is refused. */
    mcapi_pktchan_connect_i(send_endpoint, receive_endpoint, &request, &status);
    EXPECT_STATUS(status, MCAPI_ERR_CHAN_CONNECTED);
    {
        mcapi_endpoint_t me = mcapi_endpoint_create(THIRD_PORT_ID, &status);
        mcapi_endpoint_t go =
            mcapi_endpoint_get(SENDER_DOMAIN, SENDER_NODE, GO_PORT_ID, timeout, &status);
        char reply[8];
        size_t size;
        EXPECT_OK(status);
        set_timeout(me);
        mcapi_msg_send(me, go, &me, sizeof me, 0, &status);
        EXPECT_OK(status);
        mcapi_msg_recv(me, reply, sizeof reply, &size, &status);
        EXPECT_OK(status);
        EXPECT(size == 5 && memcmp(reply, "going", 5) == 0);
    }
    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("third party: connected <%u,%u,%u> to <%u,%u,%u>\n", SENDER_DOMAIN, SENDER_NODE,
           SEND_PORT_ID, RECEIVER_DOMAIN, RECEIVER_NODE, RECV_PORT_ID);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "sender") == 0) {
        return sender((unsigned)atoi(argv[2]));
    }
    if (argc == 3 && strcmp(argv[1], "receiver") == 0) {
        return receiver((unsigned)atoi(argv[2]));
    }
    if (argc == 2 && strcmp(argv[1], "third") == 0) {
        return third_party();
    }
    fprintf(stderr, "usage: %s sender N | receiver N | third\n", argv[0]);
    return 2;
}
