/*
 * The configured maximum message size and eager threshold, from C (issue 25): set with
 * mcapi_param_t, read back as the node attributes MCAPI_NODE_ATTR_MAX_MSG_SIZE and
 * MCAPI_NODE_ATTR_EAGER_MAX (extensions) of this node and of another node.
 *
 *   max_msg small    node <0,1>: max 1 MiB, eager 4 KiB; sends 1 MiB (rendezvous), 2 KiB
 *                    (eager), 1 MiB + 1 (refused) and, by mcapi_msg_send_i, 512 KiB from
 *                    a buffer it frees only once the request completed (on shm the
 *                    receiver reads it in place) to the big node
 *   max_msg big      node <0,2>: defaults; reads the small node's attributes, receives
 *                    by mcapi_msg_recv_i posted before the messages come (mcapi_wait, a
 *                    mcapi_test loop, mcapi_wait_any)
 *   max_msg params   bad parameter blocks: mcapi_initialize refuses them, changes nothing
 */
#include "check.h"

#define DOMAIN 0
#define SMALL_NODE 1
#define BIG_NODE 2
#define PORT 5
#define WAIT_MS 30000
#define SMALL_MAX (1u << 20)
#define SMALL_EAGER 4096u
#define LENT (512u << 10)

static mcapi_uint_t node_attribute(mcapi_node_t node, mcapi_uint_t attribute) {
    mcapi_status_t status;
    mcapi_uint_t value = 0;
    mcapi_node_get_attribute(DOMAIN, node, attribute, &value, sizeof value, &status);
    EXPECT_OK(status);
    return value;
}

static void fill(unsigned char* data, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) data[i] = (unsigned char)(i * 31u + seed);
}

static void check_content(const unsigned char* data, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) {
        if (data[i] != (unsigned char)(i * 31u + seed)) {
            fprintf(stderr, "byte %zu of %zu differs\n", i, len);
            exit(1);
        }
    }
}

static mcapi_endpoint_t remote_endpoint(mcapi_node_t node) {
    mcapi_status_t status;
    mcapi_endpoint_t ep = mcapi_endpoint_get(DOMAIN, node, PORT, WAIT_MS, &status);
    EXPECT_OK(status);
    return ep;
}

static void small(void) {
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_param_t param;
    mcapi_param_init(&param, &status);
    EXPECT_OK(status);
    param.max_msg_size = SMALL_MAX;
    param.eager_max = SMALL_EAGER;
    mcapi_initialize(DOMAIN, SMALL_NODE, NULL, &param, &info, &status);
    EXPECT_OK(status);
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_MAX_MSG_SIZE) == SMALL_MAX);
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_EAGER_MAX) == SMALL_EAGER);
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_TYPE) == MCAPI_NODE_ATTR_TYPE_REGULAR);

    /* Read-only, and sized as mcapi_uint_t. */
    mcapi_node_attributes_t attributes;
    mcapi_uint_t value = 4096;
    mcapi_node_init_attributes(&attributes, &status);
    EXPECT_OK(status);
    mcapi_node_set_attribute(&attributes, MCAPI_NODE_ATTR_MAX_MSG_SIZE, &value, sizeof value,
                             &status);
    EXPECT_STATUS(status, MCAPI_ERR_ATTR_READONLY);
    mcapi_node_set_attribute(&attributes, MCAPI_NODE_ATTR_EAGER_MAX, &value, sizeof value,
                             &status);
    EXPECT_STATUS(status, MCAPI_ERR_ATTR_READONLY);
    size_t wide = 0;
    mcapi_node_get_attribute(DOMAIN, SMALL_NODE, MCAPI_NODE_ATTR_MAX_MSG_SIZE, &wide,
                             sizeof wide, &status);
    EXPECT_STATUS(status, MCAPI_ERR_ATTR_SIZE);
    EXPECT(wide == 0);

    mcapi_endpoint_t me = mcapi_endpoint_create(PORT, &status);
    EXPECT_OK(status);
    mcapi_endpoint_t big = remote_endpoint(BIG_NODE);
    EXPECT(node_attribute(BIG_NODE, MCAPI_NODE_ATTR_MAX_MSG_SIZE) == MCAPI_MAX_MSG_SIZE);

    unsigned char* data = malloc(SMALL_MAX + 1);
    EXPECT(data != NULL);
    /* Above this node's maximum: refused, nothing sent. */
    mcapi_msg_send(me, big, data, SMALL_MAX + 1, 1, &status);
    EXPECT_STATUS(status, MCAPI_ERR_MSG_SIZE);
    fill(data, SMALL_MAX, 7);
    mcapi_msg_send(me, big, data, SMALL_MAX, 1, &status); /* above 4 KiB: rendezvous */
    EXPECT_OK(status);
    fill(data, 2048, 9);
    mcapi_msg_send(me, big, data, 2048, 1, &status); /* eager */
    EXPECT_OK(status);
    /* Non-blocking: the buffer is the request's until it completes (spec 3.5.4). */
    unsigned char* lent = malloc(LENT);
    EXPECT(lent != NULL);
    fill(lent, LENT, 11);
    mcapi_request_t request;
    mcapi_msg_send_i(me, big, lent, LENT, 1, &request, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    size_t size = 0;
    mcapi_wait(&request, &size, WAIT_MS, &status);
    EXPECT_OK(status);
    EXPECT(size == LENT);
    free(lent);
    char reply[8];
    mcapi_msg_recv(me, reply, sizeof reply, &size, &status);
    EXPECT_OK(status);
    EXPECT(size == 3 && memcmp(reply, "ok", 3) == 0);
    free(data);
    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("max_msg small: all checks passed\n");
}

static void big_node(void) {
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_initialize(DOMAIN, BIG_NODE, NULL, NULL, &info, &status);
    EXPECT_OK(status);
    EXPECT(node_attribute(BIG_NODE, MCAPI_NODE_ATTR_MAX_MSG_SIZE) == MCAPI_MAX_MSG_SIZE);
    mcapi_uint_t eager = node_attribute(BIG_NODE, MCAPI_NODE_ATTR_EAGER_MAX);
    EXPECT(eager >= 1 && eager <= 65536);
    mcapi_endpoint_t me = mcapi_endpoint_create(PORT, &status);
    EXPECT_OK(status);
    /* Receives posted with their buffers (a rendezvous message goes straight into its
       request's buffer as it arrives), completed by wait, a test loop and wait_any. */
    unsigned char* data = malloc(SMALL_MAX);
    unsigned char* eager_data = malloc(2048);
    EXPECT(data != NULL && eager_data != NULL);
    mcapi_request_t first, second, third;
    mcapi_msg_recv_i(me, data, SMALL_MAX, &first, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_msg_recv_i(me, eager_data, 2048, &second, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_endpoint_t small_ep = remote_endpoint(SMALL_NODE);
    /* Another node's values, asked over its control plane. */
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_MAX_MSG_SIZE) == SMALL_MAX);
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_EAGER_MAX) == SMALL_EAGER);

    size_t size = 0;
    mcapi_wait(&first, &size, WAIT_MS, &status);
    EXPECT_OK(status);
    EXPECT(size == SMALL_MAX);
    check_content(data, size, 7);
    while (!mcapi_test(&second, &size, &status)) EXPECT_STATUS(status, MCAPI_PENDING);
    EXPECT_OK(status);
    EXPECT(size == 2048);
    check_content(eager_data, size, 9);
    mcapi_msg_recv_i(me, data, SMALL_MAX, &third, &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_request_t* any[1] = {&third};
    EXPECT(mcapi_wait_any(1, any, &size, WAIT_MS, &status) == 0);
    EXPECT_OK(status);
    EXPECT(size == LENT);
    check_content(data, size, 11);
    free(eager_data);
    free(data);
    mcapi_msg_send(me, small_ep, "ok", 3, 1, &status);
    EXPECT_OK(status);
    /* The small node finalizes once it has the reply; wait until it is gone. */
    mcapi_endpoint_delete(me, &status);
    EXPECT_OK(status);
    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("max_msg big: all checks passed\n");
}

static void bad_params(void) {
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_param_t param;
    unsigned long long bad_max[] = {(unsigned long long)MCAPI_MAX_MSG_SIZE + 1, ~0ull};
    unsigned long long bad_eager[] = {65537, ~0ull};
    for (int i = 0; i < 2; i++) {
        mcapi_param_init(&param, &status);
        param.max_msg_size = bad_max[i];
        mcapi_initialize(DOMAIN, SMALL_NODE, NULL, &param, &info, &status);
        EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
        mcapi_param_init(&param, &status);
        param.eager_max = bad_eager[i];
        mcapi_initialize(DOMAIN, SMALL_NODE, NULL, &param, &info, &status);
        EXPECT_STATUS(status, MCAPI_ERR_PARAMETER);
    }
    /* Nothing was initialized: a good block works now, and the extremes are accepted. */
    mcapi_param_init(&param, &status);
    param.max_msg_size = MCAPI_MAX_MSG_SIZE;
    param.eager_max = 1;
    mcapi_initialize(DOMAIN, SMALL_NODE, NULL, &param, &info, &status);
    EXPECT_OK(status);
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_MAX_MSG_SIZE) == MCAPI_MAX_MSG_SIZE);
    EXPECT(node_attribute(SMALL_NODE, MCAPI_NODE_ATTR_EAGER_MAX) == 1);
    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("max_msg params: all checks passed\n");
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "small") == 0) {
        small();
    } else if (argc == 2 && strcmp(argv[1], "big") == 0) {
        big_node();
    } else if (argc == 2 && strcmp(argv[1], "params") == 0) {
        bad_params();
    } else {
        fprintf(stderr, "usage: max_msg small|big|params\n");
        return 2;
    }
    return 0;
}
