/*
 * Spec 7.5: packet processing, a load balancer and its workers, each its own process and
 * node (the spec spawns threads; here the workers are processes started beside it):
 *
 *   example_7_5 balancer WORKERS ITEMS   node <0,0>: dispatches ITEMS work requests to
 *                                        each worker, dropping packets for a busy worker
 *   example_7_5 worker NUM ITEMS         node <0,1+NUM>: processes work until the invalid
 *                                        request, checking it got ITEMS valid ones
 *
 * Each worker has a packet channel for work requests from the balancer and a scalar
 * channel for acks back; the balancer connects both (to endpoints it creates with
 * MCAPI_PORT_ANY and the workers' static ports) and sends work only to a worker whose ack
 * is available.
 *
 * The code follows 7.5.1 (common.h, load_balancer.c, worker.c); what had to change, and
 * why:
 * - mcapi_initialize takes the node attributes (NULL) as 2.000's synopsis has it; the
 *   mcapi_param_t stays a variable never set, as in the spec (it means defaults here).
 * - mcapi_endpoint_get takes its timeout (the spec omits it); mcapi_strerror is
 *   mcapi_display_status.
 * - The balancer waits for its opens before dispatching (a handle is usable once its open
 *   completed; the spec fires the opens and goes on), and the ack handles are
 *   mcapi_sclchan_recv_hndl_t (the spec declares them as packet handles).
 * - get_next_packet() makes up packets for the workers in turn until every worker got
 *   ITEMS of them (the spec's packets come from a network, forever); drop_packet() counts
 *   and yields the core.
 * - worker.c's shutdown() is worker_shutdown(): a global function named shutdown would
 *   replace the C library's shutdown(2) for the whole process, libfabric's sockets
 *   included.
 * - Both sides wait for their closes (the spec fires them and returns) and finalize.
 */
#include "check.h"

#include <sched.h>
#include <stdbool.h>

/* The nodes pass an mcapi_param_t they never set, as 7.5 does (it means defaults here);
 * GCC warns about it since the parameter is MCAPI_IN (const). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* ---- common.h ---- */
static char* mcapi_strerror(int s) {
    static char text[MCAPI_MAX_STATUS_MSG_LEN];
    char* name = mcapi_display_status((mcapi_status_t)s, text, sizeof text);
    return name ? name : (char*)"(not a status)";
}

enum { WORKER_REQUEST_PORT_ID, WORKER_ACK_PORT_ID };

#define DOMAIN_0 0
#define NODE_LOAD_BALANCER 0
#define WAIT_MS 30000

#define CHECK_STATUS(S)                                                                    \
    do {                                                                                   \
        if (S != MCAPI_SUCCESS) {                                                          \
            printf("line %d: failed with MCAPI status %d (%s)\n", __LINE__, (int)S,       \
                   mcapi_strerror((int)S));                                               \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

typedef struct {
    unsigned char is_valid;
    int worker;
} PacketInfo;

static unsigned items; /* work requests per worker */

/* ---- load_balancer.c ---- */

#define MAX_WORKERS 8
static int NUM_WORKERS;

static mcapi_pktchan_send_hndl_t work_requests_out_hndl[MAX_WORKERS];
static mcapi_sclchan_recv_hndl_t acks_in_hndl[MAX_WORKERS];
static unsigned dispatched[MAX_WORKERS], dropped;
static int next_worker;

/* Packets for the workers in turn, until each has been sent `items`. */
static int get_next_packet(PacketInfo* packet_info) {
    int tries;
    for (tries = 0; tries < NUM_WORKERS; tries++) {
        int worker = next_worker;
        next_worker = (next_worker + 1) % NUM_WORKERS;
        if (dispatched[worker] < items) {
            packet_info->is_valid = true;
            packet_info->worker = worker;
            return 1;
        }
    }
    return 0;
}

static void drop_packet(PacketInfo* packet_info) {
    EXPECT(packet_info->is_valid);
    dropped++;
    sched_yield(); /* the workers share the cores */
}

static void create_and_init_workers(void) {
    int i;
    mcapi_request_t request;
    mcapi_request_t opens[2 * MAX_WORKERS];
    size_t size;
    mcapi_timeout_t timeout = WAIT_MS;

    for (i = 0; i < NUM_WORKERS; i++) {
        mcapi_status_t status;
        // (The worker processes were started beside this one.)
        int worker_node = i + 1;
        // Create a send endpoint to send packets to the worker; get the
        // worker's receive endpoint via mcapi_endpoint_get()
        mcapi_endpoint_t work_request_out_endpoint = mcapi_endpoint_create(MCAPI_PORT_ANY, &status);
        CHECK_STATUS(status);
        mcapi_endpoint_t work_request_remote_endpoint =
            mcapi_endpoint_get(DOMAIN_0, worker_node, WORKER_REQUEST_PORT_ID, timeout, &status);
        CHECK_STATUS(status);
        // Bind the channel and open our local send port.
        mcapi_pktchan_connect_i(work_request_out_endpoint, work_request_remote_endpoint, &request,
                                &status);
        CHECK_STATUS(status);
        EXPECT(mcapi_wait(&request, &size, WAIT_MS, &status) == MCAPI_TRUE);
        mcapi_pktchan_send_open_i(&work_requests_out_hndl[i], work_request_out_endpoint,
                                  &opens[2 * i], &status);
        EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
        // Repeat the process to create an ack scalar channel from the
        // worker back to us.
        mcapi_endpoint_t ack_in_endpoint = mcapi_endpoint_create(MCAPI_PORT_ANY, &status);
        CHECK_STATUS(status);
        mcapi_endpoint_set_attribute(ack_in_endpoint, MCAPI_ENDP_ATTR_TIMEOUT, &timeout,
                                     sizeof timeout, &status);
        CHECK_STATUS(status);
        mcapi_endpoint_t ack_remote_endpoint =
            mcapi_endpoint_get(DOMAIN_0, worker_node, WORKER_ACK_PORT_ID, timeout, &status);
        CHECK_STATUS(status);
        mcapi_sclchan_connect_i(ack_remote_endpoint, ack_in_endpoint, &request, &status);
        CHECK_STATUS(status);
        EXPECT(mcapi_wait(&request, &size, WAIT_MS, &status) == MCAPI_TRUE);
        mcapi_sclchan_recv_open_i(&acks_in_hndl[i], ack_in_endpoint, &opens[2 * i + 1],
                                  &status);
        EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    }
    for (i = 0; i < 2 * NUM_WORKERS; i++) {
        mcapi_status_t status;
        EXPECT(mcapi_wait(&opens[i], &size, WAIT_MS, &status) == MCAPI_TRUE);
        CHECK_STATUS(status);
    }
}

static void dispatch_packets(void) {
    PacketInfo packet_info;
    mcapi_status_t status;

    while (get_next_packet(&packet_info)) {
        // Because we maintain "session state" across packets, each
        // incoming packet is associated with a particular worker.
        int worker = packet_info.worker;
        // Each worker sends back acks when it is ready for more work.
        mcapi_uint_t available = mcapi_sclchan_available(acks_in_hndl[worker], &status);
        CHECK_STATUS(status);
        if (available) {
            // An ack is available; pull it off and send more work
            int unused_result = mcapi_sclchan_recv_uint8(acks_in_hndl[worker], &status);
            CHECK_STATUS(status);
            EXPECT(unused_result == 1);
            mcapi_pktchan_send(work_requests_out_hndl[worker], &packet_info, sizeof(packet_info),
                               &status);
            CHECK_STATUS(status);
            dispatched[worker]++;
        } else {
            // No ack available; drop the packet (or queue, or do some other
            // form of exception processing) and move on.
            drop_packet(&packet_info);
        }
    }
}

static void shutdown_lb(void) {
    mcapi_status_t status;
    mcapi_request_t request[2 * MAX_WORKERS];
    size_t size;
    int i;

    // Shutdown each worker in turn
    for (i = 0; i < NUM_WORKERS; i++) {
        // Send an "invalid" packet to trigger worker shutdown
        PacketInfo invalid_work;
        memset(&invalid_work, 0, sizeof invalid_work);
        invalid_work.is_valid = false;
        mcapi_pktchan_send(work_requests_out_hndl[i], &invalid_work, sizeof(invalid_work),
                           &status);
        CHECK_STATUS(status);
        // Close our ports
        mcapi_pktchan_send_close_i(work_requests_out_hndl[i], &request[2 * i], &status);
        EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
        mcapi_sclchan_recv_close_i(acks_in_hndl[i], &request[2 * i + 1], &status);
        EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    }
    for (i = 0; i < 2 * NUM_WORKERS; i++) {
        EXPECT(mcapi_wait(&request[i], &size, WAIT_MS, &status) == MCAPI_TRUE);
        CHECK_STATUS(status);
    }
}

static int load_balancer(void) {
    mcapi_param_t mcapi_parameters;
    mcapi_info_t mcapi_info;
    mcapi_status_t status;
    int i;

    mcapi_initialize(DOMAIN_0, NODE_LOAD_BALANCER, NULL, &mcapi_parameters, &mcapi_info,
                     &status);
    CHECK_STATUS(status);
    create_and_init_workers();
    dispatch_packets();
    shutdown_lb();
    mcapi_finalize(&status);
    CHECK_STATUS(status);
    for (i = 0; i < NUM_WORKERS; i++) {
        EXPECT(dispatched[i] == items);
    }
    printf("load balancer: %u work requests to each of %d workers, %u packets dropped\n", items,
           NUM_WORKERS, dropped);
    return 0;
}

/* ---- worker.c ---- */

static int worker_id;
static unsigned processed;
static mcapi_pktchan_recv_hndl_t work_request_in;
static mcapi_sclchan_send_hndl_t ack_out;

static void some_function_or_another(PacketInfo* packet_info) {
    EXPECT(packet_info->worker == worker_id);
    processed++;
}

static void bind_channels(void) {
    mcapi_status_t status;
    mcapi_request_t request[2];
    size_t size;

    // Create a packet receive endpoint for incoming work requests; use
    // a static port number so that load balancer can look it up via
    // mcapi_endpoint_get().
    mcapi_endpoint_t work_request_in_endpoint =
        mcapi_endpoint_create(WORKER_REQUEST_PORT_ID, &status);
    CHECK_STATUS(status);
    // The load balancer will bind a channel to that endpoint; we use
    // the open function to synchronize and initialize our local packet
    // receive port.
    mcapi_pktchan_recv_open_i(&work_request_in, work_request_in_endpoint, &request[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    // Repeat the process to create a scalar channel from us back to the
    // load balancer.
    mcapi_endpoint_t ack_out_endpoint = mcapi_endpoint_create(WORKER_ACK_PORT_ID, &status);
    CHECK_STATUS(status);
    mcapi_sclchan_send_open_i(&ack_out, ack_out_endpoint, &request[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    EXPECT(mcapi_wait(&request[0], &size, WAIT_MS, &status) == MCAPI_TRUE);
    CHECK_STATUS(status);
    EXPECT(mcapi_wait(&request[1], &size, WAIT_MS, &status) == MCAPI_TRUE);
    CHECK_STATUS(status);
}

static void do_work(void) {
    mcapi_status_t status;
    size_t size;

    // The first thing we do is send an ack so that the load balancer
    // knows we're ready for work.
    mcapi_sclchan_send_uint8(ack_out, 1 /* Any value would do. */, &status);
    CHECK_STATUS(status);
    while (1) {
        // receive a work request from the load balancer
        PacketInfo* work_info;
        mcapi_pktchan_recv(work_request_in, (void*)&work_info, &size, &status);
        CHECK_STATUS(status);
        EXPECT(size == sizeof *work_info);

        // if the work request is marked "invalid", we're done
        if (work_info->is_valid == false) {
            mcapi_pktchan_release(work_info, &status);
            CHECK_STATUS(status);
            break;
        }

        // do the work
        some_function_or_another(work_info);

        // we're done; return the buffer and send an ack
        mcapi_pktchan_release(work_info, &status);
        CHECK_STATUS(status);
        mcapi_sclchan_send_uint8(ack_out, 1 /* Any value would do. */, &status);
        // (Unchecked in the spec: after the last work item the balancer may have closed its
        // end already, a scalar send then fails with MCAPI_ERR_GENERAL.)
        EXPECT(status == MCAPI_SUCCESS || (status == MCAPI_ERR_GENERAL && processed == items));
    }
}

static void worker_shutdown(void) {
    mcapi_status_t status;
    mcapi_request_t request[2];
    size_t size;

    // close our channels
    mcapi_pktchan_recv_close_i(work_request_in, &request[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_sclchan_send_close_i(ack_out, &request[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    EXPECT(mcapi_wait(&request[0], &size, WAIT_MS, &status) == MCAPI_TRUE);
    CHECK_STATUS(status);
    EXPECT(mcapi_wait(&request[1], &size, WAIT_MS, &status) == MCAPI_TRUE);
    CHECK_STATUS(status);
}

static int worker_spawn_function(int worker_num) {
    mcapi_param_t mcapi_parameters;
    mcapi_info_t mcapi_info;
    mcapi_status_t status;

    worker_id = worker_num;
    mcapi_initialize(DOMAIN_0, (1 + worker_num), NULL, &mcapi_parameters, &mcapi_info, &status);
    CHECK_STATUS(status);
    bind_channels();
    do_work();
    worker_shutdown();
    mcapi_finalize(&status);
    CHECK_STATUS(status);
    EXPECT(processed == items);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 4 && strcmp(argv[1], "balancer") == 0) {
        NUM_WORKERS = atoi(argv[2]);
        items = (unsigned)atoi(argv[3]);
        EXPECT(NUM_WORKERS >= 1 && NUM_WORKERS <= MAX_WORKERS);
        return load_balancer();
    }
    if (argc == 4 && strcmp(argv[1], "worker") == 0) {
        items = (unsigned)atoi(argv[3]);
        return worker_spawn_function(atoi(argv[2]));
    }
    fprintf(stderr, "usage: %s balancer WORKERS ITEMS | worker NUM ITEMS\n", argv[0]);
    return 2;
}
