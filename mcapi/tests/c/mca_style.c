/*
 * A program in the style of the MCA reference implementation's test programs, run unchanged
 * under MCAPI_COMPAT=mca (tests/c_abi.rs sets the environment; the program sets nothing):
 * one node, one thread, a WRONG macro, send/recv helpers that take the status expected,
 * mcapi_set_debug_level first, and `while (!mcapi_test(...))` polling, also on sends that
 * failed, whose errors the requests report.
 *
 * The reference's "fill a same-node queue until MCAPI_ERR_MEM_LIMIT" part needs a blocking
 * mcapi_msg_send to a full endpoint of the node to return MCAPI_ERR_MEM_LIMIT in this mode
 * (docs/c-abi.md); tests/c_abi.rs builds it with -DFILL_UNTIL_MEM_LIMIT=1.
 */
#include <mcapi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FILL_UNTIL_MEM_LIMIT
#define FILL_UNTIL_MEM_LIMIT 0
#endif

#define DOMAIN 0
#define NODE 5
#define PORT_NUM1 100
#define PORT_NUM2 101
#define BUFF_SIZE 64
#define NUM_MSGS 8

#define WRONG wrong(__LINE__);
static void wrong(unsigned line) {
    mcapi_status_t status;
    fprintf(stderr, "WRONG: line=%u\n", line);
    mcapi_finalize(&status);
    exit(1);
}

/* A non-blocking send polled to completion; the request reports the send's own error. */
static int send(mcapi_endpoint_t from, mcapi_endpoint_t to, const char* msg,
                mcapi_priority_t priority, mcapi_status_t exp_status) {
    mcapi_request_t request;
    mcapi_status_t status;
    size_t size;
    mcapi_msg_send_i(from, to, msg, strlen(msg), priority, &request, &status);
    if (status != MCAPI_PENDING && status != exp_status) {
        WRONG
    }
    while (!mcapi_test(&request, &size, &status)) {
    }
    if (status != exp_status) {
        WRONG
    }
    if (status == MCAPI_SUCCESS && size != strlen(msg)) {
        WRONG
    }
    return status == MCAPI_SUCCESS;
}

/* A non-blocking receive polled to completion. */
static int recv(mcapi_endpoint_t at, char* expected, mcapi_status_t exp_status) {
    char buffer[BUFF_SIZE];
    mcapi_request_t request;
    mcapi_status_t status;
    size_t size;
    mcapi_msg_recv_i(at, buffer, BUFF_SIZE, &request, &status);
    if (status != MCAPI_PENDING && status != exp_status) {
        WRONG
    }
    while (!mcapi_test(&request, &size, &status)) {
    }
    if (status != exp_status) {
        WRONG
    }
    if (status == MCAPI_SUCCESS && (size != strlen(expected) || memcmp(buffer, expected, size))) {
        WRONG
    }
    return status == MCAPI_SUCCESS;
}

int main(void) {
    static mcapi_param_t parms; /* never set: the defaults (and the environment's mode) */
    static char too_big[MCAPI_MAX_MSG_SIZE + 1];
    mcapi_status_t status;
    mcapi_info_t version;
    mcapi_endpoint_t ep1, ep2, ep3;
    mcapi_request_t request;
    mcapi_request_t* requests[1];
    char msg[BUFF_SIZE];
    size_t size;
    int i, pass_num = 0;

    mcapi_set_debug_level(1);

    mcapi_initialize(DOMAIN, NODE, NULL, &parms, &version, &status);
    if (status != MCAPI_SUCCESS) { WRONG }

    ep1 = mcapi_endpoint_create(PORT_NUM1, &status);
    if (status != MCAPI_SUCCESS) { WRONG }
    ep2 = mcapi_endpoint_create(PORT_NUM2, &status);
    if (status != MCAPI_SUCCESS) { WRONG }
    ep3 = 0xdeadbeef; /* an invalid endpoint */

    /* Messages to an endpoint of the same node, polled to completion. */
    for (i = 0; i < NUM_MSGS; i++) {
        sprintf(msg, "HELLO_MCAPI %d", i);
        if (send(ep1, ep2, msg, 1, MCAPI_SUCCESS)) { pass_num++; }
    }
    if (mcapi_msg_available(ep2, &status) < 1) { WRONG }
    for (i = 0; i < NUM_MSGS; i++) {
        sprintf(msg, "HELLO_MCAPI %d", i);
        if (recv(ep2, msg, MCAPI_SUCCESS)) { pass_num++; }
    }

    /* Failed sends: the loop ends, and the request says why. */
    send(ep1, ep3, "to nowhere", 1, MCAPI_ERR_ENDP_INVALID);
    send(ep1, ep2, "bad priority", MCAPI_MAX_PRIORITY + 1, MCAPI_ERR_PRIORITY);
    mcapi_msg_send_i(ep1, ep2, too_big, sizeof too_big, 1, &request, &status);
    if (status != MCAPI_ERR_MSG_SIZE) { WRONG }
    if (!mcapi_wait(&request, &size, MCAPI_TIMEOUT_INFINITE, &status)) { WRONG }
    if (status != MCAPI_ERR_MSG_SIZE) { WRONG }
    recv(ep3, "", MCAPI_ERR_ENDP_INVALID);
    mcapi_endpoint_get_i(DOMAIN, NODE, 0x1000000, &ep3, &request, &status);
    if (status != MCAPI_ERR_PORT_INVALID) { WRONG }
    requests[0] = &request;
    if (mcapi_wait_any(1, requests, &size, MCAPI_TIMEOUT_INFINITE, &status) != 0) { WRONG }
    if (status != MCAPI_ERR_PORT_INVALID) { WRONG }
    /* A NULL size is refused, and the poll still ends. */
    mcapi_msg_send_i(ep1, ep2, "x", 1, 1, &request, &status);
    while (!mcapi_test(&request, NULL, &status)) {
    }
    if (status != MCAPI_ERR_PARAMETER) { WRONG }
    if (!mcapi_wait(&request, &size, MCAPI_TIMEOUT_INFINITE, &status)) { WRONG }
    if (!recv(ep2, "x", MCAPI_SUCCESS)) { WRONG }

#if FILL_UNTIL_MEM_LIMIT
    /* Fill ep2's queue until the node says it is full, then drain it. */
    {
        int sent = 0;
        for (;;) {
            mcapi_msg_send(ep1, ep2, "fill", 4, 1, &status);
            if (status == MCAPI_ERR_MEM_LIMIT) { break; }
            if (status != MCAPI_SUCCESS) { WRONG }
            sent++;
        }
        if (sent < 1 || mcapi_msg_available(ep2, &status) != (mcapi_uint_t)sent) { WRONG }
        while (sent-- > 0) {
            if (!recv(ep2, "fill", MCAPI_SUCCESS)) { WRONG }
        }
    }
#endif

    mcapi_display_state(&ep1);
    mcapi_endpoint_delete(ep1, &status);
    if (status != MCAPI_SUCCESS) { WRONG }
    mcapi_endpoint_delete(ep2, &status);
    if (status != MCAPI_SUCCESS) { WRONG }
    mcapi_finalize(&status);
    if (status != MCAPI_SUCCESS) { WRONG }

    if (pass_num != 2 * NUM_MSGS) { WRONG }
    printf("mca_style: Test PASSED\n");
    return 0;
}
