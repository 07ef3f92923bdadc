/*
 * Issue 22, section 1: a node talking to itself completes at once. One process, one node,
 * one thread; every pattern uses a single mcapi_test where existing programs do:
 *
 *   1. msg_recv_i (pending), msg_send_i "one", msg_send_i "two", msg_recv_i, then one
 *      mcapi_test on each of the four requests: all complete, in order;
 *   2. msg_send_i, then while (!mcapi_test(...)) on it: ends at once;
 *   3. a blocking msg_send, then msg_available == 1;
 *   4. priorities: queued lowest first, received highest first, FIFO within one;
 *   5. fill an endpoint until it is full: in spec mode (MCAPI_COMPAT unset or "spec") the
 *      send_i beyond NUM_RECV_BUFFERS stays pending until a receive makes room; in
 *      compatibility mode (MCAPI_COMPAT=mca) a blocking msg_send to the full endpoint is
 *      MCAPI_ERR_MEM_LIMIT at once.
 *
 * Prints "all checks passed" at the end.
 */
#include "check.h"

/* A non-blocking call's status: MCAPI_SUCCESS, or MCAPI_PENDING while its request is. */
#define EXPECT_STARTED(status) EXPECT((status) == MCAPI_SUCCESS || (status) == MCAPI_PENDING)

static void recv_expect(mcapi_endpoint_t ep, const char* want) {
    char buf[64];
    size_t size = 0;
    mcapi_status_t status;
    mcapi_msg_recv(ep, buf, sizeof buf, &size, &status);
    EXPECT_OK(status);
    EXPECT(size == strlen(want) + 1 && strcmp(buf, want) == 0);
}

int main(void) {
    const char* mode = getenv("MCAPI_COMPAT");
    int mca = mode && strcmp(mode, "mca") == 0;
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_initialize(0, 5, NULL, NULL, &info, &status);
    EXPECT_OK(status);
    mcapi_endpoint_t a = mcapi_endpoint_create(1, &status);
    EXPECT_OK(status);
    mcapi_endpoint_t b = mcapi_endpoint_create(2, &status);
    EXPECT_OK(status);
    size_t size;

    /* 1. Four requests, one test each. */
    char b1[16] = {0}, b2[16] = {0};
    mcapi_request_t r[4];
    mcapi_msg_recv_i(b, b1, sizeof b1, &r[0], &status);
    EXPECT_STARTED(status);
    mcapi_msg_send_i(a, b, "one", 4, 1, &r[1], &status);
    EXPECT_STARTED(status);
    mcapi_msg_send_i(a, b, "two", 4, 1, &r[2], &status);
    EXPECT_STARTED(status);
    mcapi_msg_recv_i(b, b2, sizeof b2, &r[3], &status);
    EXPECT_STARTED(status);
    for (int i = 0; i < 4; i++) {
        size = 0;
        EXPECT(mcapi_test(&r[i], &size, &status));
        EXPECT_OK(status);
        EXPECT(size == 4);
    }
    EXPECT(strcmp(b1, "one") == 0 && strcmp(b2, "two") == 0);

    /* 2. while (!mcapi_test) on a send: complete on the first test already. */
    mcapi_request_t s;
    mcapi_msg_send_i(a, b, "loop", 5, 0, &s, &status);
    EXPECT_STARTED(status);
    int tests = 0;
    while (!mcapi_test(&s, &size, &status)) {
        tests++;
    }
    EXPECT_OK(status);
    EXPECT(tests == 0 && size == 5);
    recv_expect(b, "loop");

    /* 3. A blocking send is counted by msg_available at once. */
    mcapi_msg_send(a, b, "blocking", 9, 0, &status);
    EXPECT_OK(status);
    EXPECT(mcapi_msg_available(b, &status) == 1);
    EXPECT_OK(status);
    recv_expect(b, "blocking");
    EXPECT(mcapi_msg_available(b, &status) == 0);

    /* 4. Priorities: highest (0) first, FIFO within one. */
    mcapi_msg_send(a, b, "low1", 5, 7, &status);
    EXPECT_OK(status);
    mcapi_msg_send(a, b, "mid", 4, 3, &status);
    EXPECT_OK(status);
    mcapi_msg_send(a, b, "low2", 5, 7, &status);
    EXPECT_OK(status);
    mcapi_msg_send(a, b, "high", 5, 0, &status);
    EXPECT_OK(status);
    EXPECT(mcapi_msg_available(b, &status) == 4);
    recv_expect(b, "high");
    recv_expect(b, "mid");
    recv_expect(b, "low1");
    recv_expect(b, "low2");

    /* 5. Fill b until full. */
    mcapi_uint_t buffers = 0;
    mcapi_endpoint_get_attribute(b, MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS, &buffers, sizeof buffers,
                                 &status);
    EXPECT_OK(status);
    EXPECT(buffers > 0);
    for (mcapi_uint_t i = 0; i < buffers; i++) {
        mcapi_msg_send(a, b, "fill", 5, 1, &status);
        EXPECT_OK(status);
    }
    EXPECT(mcapi_msg_available(b, &status) == buffers);
    mcapi_uint_t free_buffers = 1;
    mcapi_endpoint_get_attribute(b, MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS, &free_buffers,
                                 sizeof free_buffers, &status);
    EXPECT_OK(status);
    EXPECT(free_buffers == 0);
    if (mca) {
        mcapi_msg_send(a, b, "over", 5, 1, &status);
        EXPECT_STATUS(status, MCAPI_ERR_MEM_LIMIT);
        recv_expect(b, "fill");
        mcapi_msg_send(a, b, "last", 5, 1, &status);
        EXPECT_OK(status);
    } else {
        mcapi_request_t over;
        mcapi_msg_send_i(a, b, "last", 5, 1, &over, &status);
        EXPECT_STARTED(status);
        EXPECT(!mcapi_test(&over, &size, &status));
        EXPECT_STATUS(status, MCAPI_PENDING);
        recv_expect(b, "fill");
        EXPECT(mcapi_test(&over, &size, &status));
        EXPECT_OK(status);
    }
    for (mcapi_uint_t i = 1; i < buffers; i++) {
        recv_expect(b, "fill");
    }
    recv_expect(b, "last");
    EXPECT(mcapi_msg_available(b, &status) == 0);

    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("all checks passed\n");
    return 0;
}
