/*
 * Spec 7.2: discovery and bootstrapping of dynamic endpoints through a root node.
 *
 *   example_7_2 root WORKERS    node <0,0>, the only statically known endpoint (port 1)
 *   example_7_2 worker NODE     node <0,NODE>, NODE = 1..WORKERS, each its own process
 *
 * Each worker creates an endpoint with MCAPI_PORT_ANY and registers it with the root by
 * message. Once all have registered, the root sends every worker the directory of endpoint
 * values; each worker then greets the next worker (in a ring) through the endpoint value
 * from the directory, never calling mcapi_endpoint_get for it, and reports to the root.
 * The root says goodbye to everyone and waits until their nodes are gone.
 */
#include "check.h"

#include <time.h>

#define DOMAIN 0
#define ROOT_NODE 0
#define ROOT_PORT 1
#define MAX_WORKERS 8
#define WAIT_MS 30000

enum kind { REGISTER = 1, DIRECTORY, GREETING, DONE, BYE };

struct message {
    mcapi_uint32_t kind;
    mcapi_uint32_t node;  /* the sender */
    mcapi_uint32_t count; /* DIRECTORY: entries */
    mcapi_endpoint_t endpoint;
    mcapi_endpoint_t directory[MAX_WORKERS + 1]; /* indexed by node */
};

static void send_message(mcapi_endpoint_t from, mcapi_endpoint_t to, const struct message* m) {
    mcapi_status_t status;
    mcapi_msg_send(from, to, m, sizeof *m, 1, &status);
    if (status != MCAPI_SUCCESS) {
        fprintf(stderr, "node %u: sending message kind %u failed\n", (unsigned)m->node,
                (unsigned)m->kind);
    }
    EXPECT_OK(status);
}

static void receive_message(mcapi_endpoint_t at, struct message* m) {
    mcapi_status_t status;
    size_t size;
    mcapi_msg_recv(at, m, sizeof *m, &size, &status);
    EXPECT_OK(status);
    EXPECT(size == sizeof *m);
}

static void initialize(mcapi_node_t node) {
    mcapi_status_t status;
    mcapi_info_t info;
    mcapi_initialize(DOMAIN, node, NULL, NULL, &info, &status);
    EXPECT_OK(status);
}

static mcapi_endpoint_t endpoint_with_timeout(mcapi_port_t port) {
    mcapi_status_t status;
    mcapi_timeout_t timeout = WAIT_MS;
    mcapi_endpoint_t endpoint = mcapi_endpoint_create(port, &status);
    EXPECT_OK(status);
    mcapi_endpoint_set_attribute(endpoint, MCAPI_ENDP_ATTR_TIMEOUT, &timeout, sizeof timeout,
                                 &status);
    EXPECT_OK(status);
    return endpoint;
}

static int root(unsigned workers) {
    mcapi_status_t status;
    struct message m, directory;
    unsigned registered = 0, done = 0, node, tries;
    mcapi_endpoint_t me;
    EXPECT(workers >= 1 && workers <= MAX_WORKERS);
    initialize(ROOT_NODE);
    me = endpoint_with_timeout(ROOT_PORT);

    memset(&directory, 0, sizeof directory);
    directory.kind = DIRECTORY;
    directory.node = ROOT_NODE;
    directory.count = workers;
    while (registered < workers) {
        receive_message(me, &m);
        EXPECT(m.kind == REGISTER && m.node >= 1 && m.node <= workers);
        EXPECT(directory.directory[m.node] == 0);
        directory.directory[m.node] = m.endpoint;
        registered++;
    }
    for (node = 1; node <= workers; node++) {
        send_message(me, directory.directory[node], &directory);
    }
    while (done < workers) {
        receive_message(me, &m);
        EXPECT(m.kind == DONE);
        done++;
    }
    memset(&m, 0, sizeof m);
    m.kind = BYE;
    for (node = 1; node <= workers; node++) {
        send_message(me, directory.directory[node], &m);
    }
    /* A node that is gone answers no attribute query: then the goodbyes were received. */
    for (node = 1; node <= workers; node++) {
        mcapi_uint_t type;
        for (tries = 0; tries < 300; tries++) {
            mcapi_node_get_attribute(DOMAIN, node, MCAPI_NODE_ATTR_TYPE, &type, sizeof type,
                                     &status);
            if (status != MCAPI_SUCCESS) {
                break;
            }
            {
                struct timespec t = {0, 100000000L};
                nanosleep(&t, NULL);
            }
        }
        EXPECT(status != MCAPI_SUCCESS);
    }
    mcapi_finalize(&status);
    EXPECT_OK(status);
    printf("root: %u workers discovered each other\n", workers);
    return 0;
}

static int worker(mcapi_node_t node) {
    mcapi_status_t status;
    struct message m, directory, greeting_from;
    int have_directory = 0, greeted = 0;
    mcapi_endpoint_t me, root_endpoint;
    initialize(node);
    me = endpoint_with_timeout(MCAPI_PORT_ANY);
    root_endpoint = mcapi_endpoint_get(DOMAIN, ROOT_NODE, ROOT_PORT, WAIT_MS, &status);
    EXPECT_OK(status);

    memset(&m, 0, sizeof m);
    m.kind = REGISTER;
    m.node = node;
    m.endpoint = me;
    send_message(me, root_endpoint, &m);

    /* The greeting of the previous worker may come before the directory. */
    while (!have_directory || !greeted) {
        receive_message(me, &m);
        if (m.kind == DIRECTORY) {
            struct message greeting;
            mcapi_uint32_t next;
            EXPECT(!have_directory && m.count >= 1 && m.count <= MAX_WORKERS);
            EXPECT(m.directory[node] == me);
            directory = m;
            have_directory = 1;
            next = node % directory.count + 1;
            memset(&greeting, 0, sizeof greeting);
            greeting.kind = GREETING;
            greeting.node = node;
            greeting.endpoint = me;
            send_message(me, directory.directory[next], &greeting);
        } else {
            EXPECT(m.kind == GREETING && !greeted);
            greeted = 1;
            greeting_from = m;
        }
    }
    /* From the previous worker in the ring, at the endpoint the directory names. */
    EXPECT(greeting_from.node == (node + directory.count - 2) % directory.count + 1);
    EXPECT(greeting_from.endpoint == directory.directory[greeting_from.node]);
    memset(&m, 0, sizeof m);
    m.kind = DONE;
    m.node = node;
    send_message(me, root_endpoint, &m);
    receive_message(me, &m);
    EXPECT(m.kind == BYE);
    mcapi_finalize(&status);
    EXPECT_OK(status);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "root") == 0) {
        return root((unsigned)atoi(argv[2]));
    }
    if (argc == 3 && strcmp(argv[1], "worker") == 0) {
        return worker((mcapi_node_t)atoi(argv[2]));
    }
    fprintf(stderr, "usage: %s root WORKERS | worker NODE\n", argv[0]);
    return 2;
}
