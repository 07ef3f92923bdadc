/*
 * The two modes of libmcapi where the MCA reference implementation reads the spec otherwise
 * (docs/c-abi.md, "Compatibility mode (MCAPI_COMPAT=mca)"). One process, one node:
 *
 *   compat spec param   mcapi_param_t.compat = MCAPI_COMPAT_SPEC: the letter of the spec
 *   compat mca param    mcapi_param_t.compat = MCAPI_COMPAT_MCA
 *   compat mca env      MCAPI_COMPAT=mca in the environment (set by tests/c_abi.rs), the
 *                       parameter block left at "no override"
 *
 * Each check states what both modes do; where they differ, `mca` selects the branch.
 */
#include "check.h"

#define DOMAIN 0
#define NODE 3
#define WAIT_MS 30000
#define GARBAGE_ENDPOINT ((mcapi_endpoint_t)0xdeadbeefULL)
#define GARBAGE_CHANNEL ((mcapi_pktchan_send_hndl_t)0xdeadbeefULL)
#define GARBAGE_REQUEST ((mcapi_request_t)0x1234ULL)

static int mca;

/* An `_i` call refused at once with `error`: in spec mode the request is left as it was
 * (chapter 4: on error only the status is set); in MCA mode it is a request complete with
 * `error`, which mcapi_test reports (MCAPI_TRUE) and mcapi_wait then releases. */
static void refused(mcapi_request_t* request, mcapi_status_t status, mcapi_status_t error,
                    const char* what) {
    mcapi_status_t got;
    size_t size = 12345;
    if (status != error) {
        char a[MCAPI_MAX_STATUS_MSG_LEN], b[MCAPI_MAX_STATUS_MSG_LEN];
        fprintf(stderr, "%s: status %s, expected %s\n", what, status_name(status, a),
                status_name(error, b));
        exit(1);
    }
    if (!mca) {
        EXPECT(*request == GARBAGE_REQUEST);
        EXPECT(mcapi_test(request, &size, &got) == MCAPI_FALSE);
        EXPECT_STATUS(got, MCAPI_ERR_REQUEST_INVALID);
        return;
    }
    EXPECT(*request != GARBAGE_REQUEST);
    /* The reference's idiom: poll until done; a failed request is done. */
    while (!mcapi_test(request, &size, &got)) {
    }
    if (got != error) {
        char a[MCAPI_MAX_STATUS_MSG_LEN], b[MCAPI_MAX_STATUS_MSG_LEN];
        fprintf(stderr, "%s: the request reports %s, expected %s\n", what, status_name(got, a),
                status_name(error, b));
        exit(1);
    }
    EXPECT(mcapi_wait(request, &size, WAIT_MS, &got) == MCAPI_TRUE);
    EXPECT_STATUS(got, error);
    /* Released by the wait. */
    EXPECT(mcapi_wait(request, &size, 0, &got) == MCAPI_FALSE);
    EXPECT_STATUS(got, MCAPI_ERR_REQUEST_INVALID);
}

/* Every `_i` function, refused at once for a reason of its ERRORS table. */
static void refused_at_once(mcapi_endpoint_t a, mcapi_endpoint_t b) {
    static char big[MCAPI_MAX_MSG_SIZE + 1];
    mcapi_status_t status;
    mcapi_request_t r;
    mcapi_endpoint_t ep;
    mcapi_pktchan_send_hndl_t ps;
    mcapi_pktchan_recv_hndl_t pr;
    mcapi_sclchan_send_hndl_t ss;
    mcapi_sclchan_recv_hndl_t sr;
    void* packet;
    char buffer[8];

#define REFUSED(call, error)                     \
    do {                                         \
        r = GARBAGE_REQUEST;                     \
        call;                                    \
        refused(&r, status, (error), #call);     \
    } while (0)

    REFUSED(mcapi_msg_send_i(a, b, "x", 1, MCAPI_MAX_PRIORITY + 1, &r, &status),
            MCAPI_ERR_PRIORITY);
    REFUSED(mcapi_msg_send_i(a, b, big, sizeof big, 0, &r, &status), MCAPI_ERR_MSG_SIZE);
    REFUSED(mcapi_msg_send_i(a, GARBAGE_ENDPOINT, "x", 1, 0, &r, &status),
            MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_msg_send_i(a, b, NULL, 1, 0, &r, &status), MCAPI_ERR_PARAMETER);
    REFUSED(mcapi_msg_recv_i(GARBAGE_ENDPOINT, buffer, sizeof buffer, &r, &status),
            MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_msg_recv_i(a, NULL, 8, &r, &status), MCAPI_ERR_PARAMETER);
    REFUSED(mcapi_endpoint_get_i(DOMAIN, NODE, 0x1000000, &ep, &r, &status),
            MCAPI_ERR_PORT_INVALID);
    REFUSED(mcapi_endpoint_get_i(256, NODE, 1, &ep, &r, &status), MCAPI_ERR_DOMAIN_INVALID);
    REFUSED(mcapi_endpoint_get_i(DOMAIN, 65535, 1, &ep, &r, &status), MCAPI_ERR_NODE_INVALID);
    REFUSED(mcapi_endpoint_get_i(DOMAIN, NODE, 1, NULL, &r, &status), MCAPI_ERR_PARAMETER);
    REFUSED(mcapi_pktchan_connect_i(a, a, &r, &status), MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_sclchan_connect_i(a, GARBAGE_ENDPOINT, &r, &status), MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_pktchan_recv_open_i(&pr, GARBAGE_ENDPOINT, &r, &status),
            MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_pktchan_send_open_i(&ps, GARBAGE_ENDPOINT, &r, &status),
            MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_sclchan_recv_open_i(&sr, GARBAGE_ENDPOINT, &r, &status),
            MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_sclchan_send_open_i(&ss, GARBAGE_ENDPOINT, &r, &status),
            MCAPI_ERR_ENDP_INVALID);
    REFUSED(mcapi_pktchan_recv_open_i(NULL, a, &r, &status), MCAPI_ERR_PARAMETER);
    REFUSED(mcapi_pktchan_send_i(GARBAGE_CHANNEL, "x", 1, &r, &status), MCAPI_ERR_CHAN_INVALID);
    REFUSED(mcapi_pktchan_send_i(GARBAGE_CHANNEL, NULL, 1, &r, &status), MCAPI_ERR_PARAMETER);
    REFUSED(mcapi_pktchan_recv_i(GARBAGE_CHANNEL, &packet, &r, &status), MCAPI_ERR_CHAN_INVALID);
    REFUSED(mcapi_pktchan_recv_i(GARBAGE_CHANNEL, NULL, &r, &status), MCAPI_ERR_PARAMETER);
    REFUSED(mcapi_pktchan_recv_close_i(GARBAGE_CHANNEL, &r, &status), MCAPI_ERR_CHAN_INVALID);
    REFUSED(mcapi_pktchan_send_close_i(GARBAGE_CHANNEL, &r, &status), MCAPI_ERR_CHAN_INVALID);
    REFUSED(mcapi_sclchan_recv_close_i(GARBAGE_CHANNEL, &r, &status), MCAPI_ERR_CHAN_INVALID);
    REFUSED(mcapi_sclchan_send_close_i(GARBAGE_CHANNEL, &r, &status), MCAPI_ERR_CHAN_INVALID);
#undef REFUSED

    /* A NULL request pointer has nowhere to put a request: the status alone, both modes. */
    mcapi_msg_send_i(a, b, "x", 1, MCAPI_MAX_PRIORITY + 1, NULL, &status);
    EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
}

/* Channels: an open of the wrong type or direction, refused at once (4.4.2, 4.5.2). */
static void wrong_opens(mcapi_endpoint_t tx, mcapi_endpoint_t rx) {
    mcapi_status_t status;
    mcapi_request_t r, opens[2];
    mcapi_pktchan_send_hndl_t ps;
    mcapi_pktchan_recv_hndl_t pr;
    mcapi_sclchan_recv_hndl_t sr;
    size_t size;

    mcapi_pktchan_connect_i(tx, rx, &r, &status);
    EXPECT_OK(status);
    EXPECT(mcapi_wait(&r, &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
    r = GARBAGE_REQUEST;
    mcapi_sclchan_recv_open_i(&sr, rx, &r, &status);
    refused(&r, status, MCAPI_ERR_CHAN_TYPE, "sclchan_recv_open_i of a packet channel");
    r = GARBAGE_REQUEST;
    mcapi_pktchan_send_open_i(&ps, rx, &r, &status);
    refused(&r, status, MCAPI_ERR_CHAN_DIRECTION, "pktchan_send_open_i of the receive side");
    /* The channel still opens and closes. */
    mcapi_pktchan_recv_open_i(&pr, rx, &opens[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_pktchan_send_open_i(&ps, tx, &opens[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    EXPECT(mcapi_wait(&opens[1], &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
    EXPECT(mcapi_wait(&opens[0], &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
    /* A packet larger than the channel's limit is refused at once (4.4.4). */
    {
        static char huge[MCAPI_MAX_PKT_SIZE + 1];
        r = GARBAGE_REQUEST;
        mcapi_pktchan_send_i(ps, huge, sizeof huge, &r, &status);
        refused(&r, status, MCAPI_ERR_PKT_SIZE, "pktchan_send_i above the payload limit");
    }
    mcapi_pktchan_send_close_i(ps, &opens[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_pktchan_recv_close_i(pr, &opens[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    EXPECT(mcapi_wait(&opens[1], &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
    EXPECT(mcapi_wait(&opens[0], &size, WAIT_MS, &status) == MCAPI_TRUE);
    EXPECT_OK(status);
    /* Closed: a second close is refused at once. */
    r = GARBAGE_REQUEST;
    mcapi_pktchan_send_close_i(ps, &r, &status);
    EXPECT(status != MCAPI_SUCCESS && status != MCAPI_PENDING);
    refused(&r, status, status, "pktchan_send_close_i of a closed side");
}

/* mcapi_test, mcapi_wait and mcapi_wait_any on their own errors and on a request that
 * finished with an error. */
static void test_and_wait(mcapi_endpoint_t a) {
    mcapi_status_t status;
    mcapi_request_t r = GARBAGE_REQUEST, ok;
    mcapi_request_t* list[2];
    char buffer[1];
    size_t size;

    /* Parameter errors: MCAPI_FALSE in spec mode, MCAPI_TRUE in MCA mode. */
    EXPECT(mcapi_test(&r, NULL, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
    EXPECT(mcapi_test(NULL, &size, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
    EXPECT(mcapi_wait(&r, NULL, 0, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
    /* An invalid request: mcapi_test says done in MCA mode (nothing to poll for), mcapi_wait
     * says MCAPI_FALSE in both (as the reference's mcapi_wait does). */
    EXPECT(mcapi_test(&r, &size, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_REQUEST_INVALID);
    EXPECT(mcapi_wait(&r, &size, 0, &status) == MCAPI_FALSE);
    EXPECT_STATUS(status, MCAPI_ERR_REQUEST_INVALID);

    /* A receive that finishes with an error of its own: truncated (4.3.3). */
    mcapi_msg_send(a, a, "too long", 8, 1, &status);
    EXPECT_OK(status);
    mcapi_msg_recv_i(a, buffer, sizeof buffer, &r, &status);
    while (status == MCAPI_PENDING) {
        (void)mcapi_test(&r, &size, &status);
    }
    EXPECT_STATUS(status, MCAPI_ERR_MSG_TRUNCATED);
    EXPECT(mcapi_test(&r, &size, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_MSG_TRUNCATED);
    EXPECT(mcapi_wait(&r, &size, WAIT_MS, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_MSG_TRUNCATED);
    {
        char whole[16];
        mcapi_msg_recv(a, whole, sizeof whole, &size, &status);
        EXPECT_OK(status);
        EXPECT(size == 8);
    }

    /* A cancelled receive waited on. */
    mcapi_msg_recv_i(a, buffer, sizeof buffer, &r, &status);
    EXPECT_STATUS(status, MCAPI_PENDING);
    mcapi_cancel(&r, &status);
    EXPECT_OK(status);
    EXPECT(mcapi_wait(&r, &size, WAIT_MS, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
    EXPECT_STATUS(status, MCAPI_ERR_REQUEST_CANCELLED);

    /* wait_any over a receive that finishes with an error (truncated) and a pending
     * request: both modes name the failed request (4.6.3: the index of the operation that
     * "has completed (successfully or with an error)"), which is released; the other
     * stays pending. */
    mcapi_msg_recv_i(a, buffer, sizeof buffer, &ok, &status);
    EXPECT_STATUS(status, MCAPI_PENDING);
    {
        mcapi_request_t pending;
        mcapi_endpoint_t idle = mcapi_endpoint_create(MCAPI_PORT_ANY, &status);
        EXPECT_OK(status);
        mcapi_msg_recv_i(idle, buffer, sizeof buffer, &pending, &status);
        EXPECT_STATUS(status, MCAPI_PENDING);
        list[0] = &pending;
        list[1] = &ok;
        mcapi_msg_send(a, a, "too long", 8, 1, &status);
        EXPECT_OK(status);
        EXPECT(mcapi_wait_any(2, list, &size, WAIT_MS, &status) == 1);
        EXPECT_STATUS(status, MCAPI_ERR_MSG_TRUNCATED);
        EXPECT(mcapi_test(&ok, &size, &status) == (mca ? MCAPI_TRUE : MCAPI_FALSE));
        EXPECT_STATUS(status, MCAPI_ERR_REQUEST_INVALID);
        EXPECT(mcapi_wait_any(1, list, &size, 0, &status) == MCAPI_RETURN_VALUE_INVALID);
        EXPECT_STATUS(status, MCAPI_TIMEOUT);
        mcapi_cancel(&pending, &status);
        EXPECT_OK(status);
        mcapi_endpoint_delete(idle, &status);
        EXPECT_OK(status);
        /* The truncated message stays queued (4.3.3): take it. */
        {
            char whole[8];
            mcapi_msg_recv(a, whole, sizeof whole, &size, &status);
            EXPECT_OK(status);
            EXPECT(size == 8);
        }
    }

    /* A refused `_i` call: spec mode leaves the request untouched (nothing to wait for),
     * MCA mode makes it a request complete with the error, which wait_any names. */
    mcapi_msg_recv_i(a, buffer, sizeof buffer, &ok, &status);
    EXPECT_STATUS(status, MCAPI_PENDING);
    r = GARBAGE_REQUEST;
    mcapi_msg_send_i(a, a, "x", 1, MCAPI_MAX_PRIORITY + 1, &r, &status);
    EXPECT_STATUS(status, MCAPI_ERR_PRIORITY);
    if (mca) {
        list[0] = &ok;
        list[1] = &r;
        EXPECT(mcapi_wait_any(2, list, &size, WAIT_MS, &status) == 1);
        EXPECT_STATUS(status, MCAPI_ERR_PRIORITY);
    } else {
        list[0] = &ok;
        EXPECT(mcapi_wait_any(1, list, &size, 0, &status) == MCAPI_RETURN_VALUE_INVALID);
        EXPECT_STATUS(status, MCAPI_TIMEOUT);
    }
    mcapi_cancel(&ok, &status);
    EXPECT_OK(status);
}

/* A request table with every slot pending: a refused `_i` call has no slot for its failed
 * request, so the status alone reports the error, in both modes (*request untouched). */
static void full_request_table(mcapi_param_t* params) {
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_endpoint_t a, b;
    mcapi_request_t pending[2], r = GARBAGE_REQUEST;
    char buffer[2][8];
    params->request_table_size = 2;
    mcapi_initialize(DOMAIN, NODE, NULL, params, &info, &status);
    EXPECT_OK(status);
    a = mcapi_endpoint_create(1, &status);
    EXPECT_OK(status);
    b = mcapi_endpoint_create(2, &status);
    EXPECT_OK(status);
    mcapi_msg_recv_i(b, buffer[0], sizeof buffer[0], &pending[0], &status);
    EXPECT_STATUS(status, MCAPI_PENDING);
    mcapi_msg_recv_i(b, buffer[1], sizeof buffer[1], &pending[1], &status);
    EXPECT_STATUS(status, MCAPI_PENDING);
    mcapi_msg_send_i(a, b, "x", 1, MCAPI_MAX_PRIORITY + 1, &r, &status);
    EXPECT_STATUS(status, MCAPI_ERR_PRIORITY);
    EXPECT(r == GARBAGE_REQUEST);
    mcapi_msg_recv_i(b, buffer[0], sizeof buffer[0], &r, &status);
    EXPECT_STATUS(status, MCAPI_ERR_REQUEST_LIMIT);
    EXPECT(r == GARBAGE_REQUEST);
    mcapi_cancel(&pending[0], &status);
    EXPECT_OK(status);
    mcapi_cancel(&pending[1], &status);
    EXPECT_OK(status);
    /* Cancelled slots are reclaimable: the next refusal gets its request in MCA mode. */
    mcapi_msg_send_i(a, b, "x", 1, MCAPI_MAX_PRIORITY + 1, &r, &status);
    refused(&r, status, MCAPI_ERR_PRIORITY, "msg_send_i once slots are free again");
    mcapi_finalize(&status);
    EXPECT_OK(status);
}

int main(int argc, char** argv) {
    mcapi_status_t status;
    mcapi_param_t params;
    mcapi_info_t info;
    mcapi_endpoint_t a, b, tx, rx;
    const char* mode;
    if (argc != 3 || (strcmp(argv[1], "spec") != 0 && strcmp(argv[1], "mca") != 0) ||
        (strcmp(argv[2], "param") != 0 && strcmp(argv[2], "env") != 0)) {
        fprintf(stderr, "usage: %s spec|mca param|env\n", argv[0]);
        return 2;
    }
    mca = strcmp(argv[1], "mca") == 0;
    mcapi_param_init(&params, &status);
    EXPECT_OK(status);
    if (strcmp(argv[2], "param") == 0) {
        params.compat = mca ? MCAPI_COMPAT_MCA : MCAPI_COMPAT_SPEC;
    }
    mcapi_initialize(DOMAIN, NODE, NULL, &params, &info, &status);
    EXPECT_OK(status);

    a = mcapi_endpoint_create(1, &status);
    EXPECT_OK(status);
    b = mcapi_endpoint_create(2, &status);
    EXPECT_OK(status);
    tx = mcapi_endpoint_create(3, &status);
    EXPECT_OK(status);
    rx = mcapi_endpoint_create(4, &status);
    EXPECT_OK(status);

    refused_at_once(a, b);
    wrong_opens(tx, rx);
    test_and_wait(a);

    mcapi_finalize(&status);
    EXPECT_OK(status);
    full_request_table(&params);
    /* A compat value that is neither is a parameter error. */
    mcapi_param_init(&params, &status);
    params.compat = 3;
    mcapi_initialize(DOMAIN, NODE, NULL, &params, &info, &status);
    EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
    mode = mca ? "mca" : "spec";
    printf("compat %s %s: all checks passed\n", mode, argv[2]);
    return 0;
}
