/*
 * halo: a 1-D halo exchange on a ring of N ranks, an HPC-style MCAPI job for a launcher.
 *
 *   make -C examples                      # cc halo.c $(pkg-config --cflags --libs mcapi)
 *   mpirun -n 4 examples/halo             # one host (shm)
 *   mpirun -n 4 -x MCAPI_PROVIDER=tcp examples/halo
 *   mpirun -n 8 --host a:4,b:4 examples/halo 1000 64   # two hosts
 *   srun --mpi=pmix -n 4 examples/halo
 *
 * Arguments: [ITERATIONS (default 100)] [CELLS per rank (default 16)].
 *
 * Each rank is MCAPI node <0, rank> (mcapi_ext_launcher_rank, an extension of this
 * implementation: docs/launchers.md); the nodes find each other through the launcher's
 * PMIx server, with no topology file. Rank r owns cells r*CELLS .. r*CELLS+CELLS-1 of a
 * periodic ring of N*CELLS unsigned 64-bit integers, initially x[g] = g*g + 1, and applies
 * ITERATIONS times the stencil
 *
 *   x'[g] = 3*x[g-1] + x[g] + 5*x[g+1]          (indices mod N*CELLS, arithmetic mod 2^64)
 *
 * Its boundary cells go to its neighbours over one packet channel per neighbour and
 * direction (2 channels out and 2 in per rank; each packet carries its iteration, which
 * the receiver checks), and its halos come from them the same way. At the end:
 *
 * - every rank recomputes the whole ring serially and compares its own cells (a swapped,
 *   lost or stale halo shows there);
 * - every rank sends its cells' sum to rank 0 in an MCAPI message; rank 0 compares the total
 *   with the closed form 9^ITERATIONS * sum(x[g] at the start) (each step multiplies the
 *   ring's sum by 3+1+5; a power of 9 is odd, so the checksum cannot collapse to 0), prints
 *   one line and sends the verdict to every rank in a message;
 * - the channels close, and a last round of messages through rank 0 keeps every node up
 *   until all have closed theirs.
 *
 * Exit code 0 when both checks pass on every rank, 1 otherwise, 2 when not started by a
 * launcher (or with fewer than 2 ranks).
 */
#include <mcapi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DOMAIN 0
#define PORT_MSG 1     /* messages: sums to rank 0, the verdict back */
#define PORT_TX_RIGHT 10 /* packet channel to the right neighbour's PORT_RX_LEFT */
#define PORT_TX_LEFT 11  /* packet channel to the left neighbour's PORT_RX_RIGHT */
#define PORT_RX_LEFT 20  /* halos from the left neighbour */
#define PORT_RX_RIGHT 21 /* halos from the right neighbour */
#define WAIT_MS 60000    /* for a peer to appear, a channel to open */

typedef struct {
    uint64_t iteration;
    uint64_t value;
} halo_packet;

/* The messages between rank 0 and the others, in this order. */
enum { KIND_SUM = 1, KIND_VERDICT, KIND_CLOSED, KIND_BYE };
typedef struct {
    uint32_t kind;
    uint32_t rank;
    uint32_t cells_ok; /* KIND_SUM: this rank's cells are right; KIND_VERDICT: all is */
    uint32_t unused;
    uint64_t sum; /* KIND_SUM: of this rank's cells */
} control_message;

static unsigned my_rank;

static void check(mcapi_status_t st, const char* what) {
    char text[MCAPI_MAX_STATUS_MSG_LEN];
    if (st != MCAPI_SUCCESS) {
        fprintf(stderr, "halo rank %u: %s: %s\n", my_rank, what,
                mcapi_display_status(st, text, sizeof text) ? text : "unknown status");
        exit(1);
    }
}

/* A non-blocking call started: MCAPI_SUCCESS or MCAPI_PENDING. */
static void started(mcapi_status_t st, const char* what) {
    if (st != MCAPI_PENDING) {
        check(st, what);
    }
}

static void wait_for(mcapi_request_t* r, const char* what) {
    mcapi_status_t st;
    size_t size;
    if (!mcapi_wait(r, &size, WAIT_MS, &st) && st == MCAPI_SUCCESS) {
        st = MCAPI_TIMEOUT;
    }
    check(st, what);
}

/* Sends a control message from `from` to rank `to`'s message endpoint. */
static void send_to(mcapi_endpoint_t from, unsigned to, uint32_t kind, uint32_t ok,
                    uint64_t sum) {
    mcapi_status_t st;
    control_message m;
    mcapi_endpoint_t dest = mcapi_endpoint_get(DOMAIN, to, PORT_MSG, WAIT_MS, &st);
    check(st, "endpoint_get(a rank's message endpoint)");
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.rank = my_rank;
    m.cells_ok = ok;
    m.sum = sum;
    mcapi_msg_send(from, dest, &m, sizeof m, 0, &st);
    check(st, "msg_send");
}

/* The next control message, which must be of `kind`. */
static control_message receive(mcapi_endpoint_t ep, uint32_t kind) {
    mcapi_status_t st;
    control_message m;
    size_t received;
    mcapi_msg_recv(ep, &m, sizeof m, &received, &st);
    check(st, "msg_recv");
    if (received != sizeof m || m.kind != kind) {
        fprintf(stderr, "halo rank %u: expected a message of kind %u, got %zu bytes of kind %u\n",
                my_rank, (unsigned)kind, received, (unsigned)m.kind);
        exit(1);
    }
    return m;
}

static void close_channels(mcapi_pktchan_send_hndl_t s1, mcapi_pktchan_send_hndl_t s2,
                           mcapi_pktchan_recv_hndl_t r1, mcapi_pktchan_recv_hndl_t r2) {
    mcapi_status_t st;
    mcapi_request_t req[4];
    int i;
    mcapi_pktchan_send_close_i(s1, &req[0], &st);
    started(st, "pktchan_send_close_i");
    mcapi_pktchan_send_close_i(s2, &req[1], &st);
    started(st, "pktchan_send_close_i");
    mcapi_pktchan_recv_close_i(r1, &req[2], &st);
    started(st, "pktchan_recv_close_i");
    mcapi_pktchan_recv_close_i(r2, &req[3], &st);
    started(st, "pktchan_recv_close_i");
    for (i = 0; i < 4; i++) {
        wait_for(&req[i], "closing the channels");
    }
}

static uint64_t initial(uint64_t g) { return g * g + 1; }

/* One step of the stencil over the ring `x` of `n` cells into `out`. */
static void step(const uint64_t* x, uint64_t* out, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        out[i] = 3 * x[(i + n - 1) % n] + x[i] + 5 * x[(i + 1) % n];
    }
}

static uint64_t power(uint64_t base, unsigned long exp) {
    uint64_t r = 1;
    while (exp--) {
        r *= base;
    }
    return r;
}

int main(int argc, char** argv) {
    unsigned long iterations = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
    size_t cells = argc > 2 ? strtoul(argv[2], NULL, 10) : 16;
    mcapi_status_t st;
    mcapi_info_t info;
    unsigned ranks, left, right, r;
    mcapi_endpoint_t msg_ep, tx_right, tx_left, rx_left, rx_right, to_right, to_left;
    mcapi_pktchan_send_hndl_t send_right, send_left;
    mcapi_pktchan_recv_hndl_t recv_left, recv_right;
    mcapi_request_t req[4];
    uint64_t *x, *next, *ring, *ring_next, sum = 0;
    unsigned long it;
    size_t i, n, received;
    int cells_ok = 1, all_ok;

    my_rank = mcapi_ext_launcher_rank(&st);
    if (st != MCAPI_SUCCESS) {
        fprintf(stderr, "halo: not started by a PMIx launcher: mpirun -n 4 %s\n", argv[0]);
        return 2;
    }
    ranks = mcapi_ext_launcher_size(&st);
    check(st, "mcapi_ext_launcher_size");
    if (ranks < 2 || cells < 1) {
        fprintf(stderr, "halo: needs at least 2 ranks and 1 cell per rank\n");
        return 2;
    }
    left = (my_rank + ranks - 1) % ranks;
    right = (my_rank + 1) % ranks;

    mcapi_initialize(DOMAIN, my_rank, NULL, NULL, &info, &st);
    check(st, "mcapi_initialize");
    msg_ep = mcapi_endpoint_create(PORT_MSG, &st);
    check(st, "endpoint_create(msg)");
    tx_right = mcapi_endpoint_create(PORT_TX_RIGHT, &st);
    check(st, "endpoint_create(tx right)");
    tx_left = mcapi_endpoint_create(PORT_TX_LEFT, &st);
    check(st, "endpoint_create(tx left)");
    rx_left = mcapi_endpoint_create(PORT_RX_LEFT, &st);
    check(st, "endpoint_create(rx left)");
    rx_right = mcapi_endpoint_create(PORT_RX_RIGHT, &st);
    check(st, "endpoint_create(rx right)");

    /* Each rank connects its two outgoing channels (the sender's side connects). */
    to_right = mcapi_endpoint_get(DOMAIN, right, PORT_RX_LEFT, WAIT_MS, &st);
    check(st, "endpoint_get(right neighbour)");
    to_left = mcapi_endpoint_get(DOMAIN, left, PORT_RX_RIGHT, WAIT_MS, &st);
    check(st, "endpoint_get(left neighbour)");
    mcapi_pktchan_connect_i(tx_right, to_right, &req[0], &st);
    started(st, "pktchan_connect_i(right)");
    mcapi_pktchan_connect_i(tx_left, to_left, &req[1], &st);
    started(st, "pktchan_connect_i(left)");
    wait_for(&req[0], "connect to the right neighbour");
    wait_for(&req[1], "connect to the left neighbour");
    /* The four ends open together: a send side is open once its receive side is. */
    mcapi_pktchan_send_open_i(&send_right, tx_right, &req[0], &st);
    started(st, "pktchan_send_open_i(right)");
    mcapi_pktchan_send_open_i(&send_left, tx_left, &req[1], &st);
    started(st, "pktchan_send_open_i(left)");
    mcapi_pktchan_recv_open_i(&recv_left, rx_left, &req[2], &st);
    started(st, "pktchan_recv_open_i(left)");
    mcapi_pktchan_recv_open_i(&recv_right, rx_right, &req[3], &st);
    started(st, "pktchan_recv_open_i(right)");
    for (i = 0; i < 4; i++) {
        wait_for(&req[i], "opening the channels");
    }

    /* x[0] and x[cells + 1] are the halos. */
    x = calloc(cells + 2, sizeof *x);
    next = calloc(cells + 2, sizeof *next);
    if (!x || !next) {
        fprintf(stderr, "halo rank %u: out of memory\n", my_rank);
        return 1;
    }
    for (i = 0; i < cells; i++) {
        x[i + 1] = initial((uint64_t)my_rank * cells + i);
    }
    for (it = 0; it < iterations; it++) {
        halo_packet out, *in;
        out.iteration = it;
        out.value = x[1];
        mcapi_pktchan_send(send_left, &out, sizeof out, &st);
        check(st, "pktchan_send(left)");
        out.value = x[cells];
        mcapi_pktchan_send(send_right, &out, sizeof out, &st);
        check(st, "pktchan_send(right)");

        mcapi_pktchan_recv(recv_left, (void**)&in, &received, &st);
        check(st, "pktchan_recv(left)");
        if (received != sizeof *in || in->iteration != it) {
            fprintf(stderr, "halo rank %u: iteration %lu: a stale packet from the left\n",
                    my_rank, it);
            return 1;
        }
        x[0] = in->value;
        mcapi_pktchan_release(in, &st);
        check(st, "pktchan_release");
        mcapi_pktchan_recv(recv_right, (void**)&in, &received, &st);
        check(st, "pktchan_recv(right)");
        if (received != sizeof *in || in->iteration != it) {
            fprintf(stderr, "halo rank %u: iteration %lu: a stale packet from the right\n",
                    my_rank, it);
            return 1;
        }
        x[cells + 1] = in->value;
        mcapi_pktchan_release(in, &st);
        check(st, "pktchan_release");

        for (i = 1; i <= cells; i++) {
            next[i] = 3 * x[i - 1] + x[i] + 5 * x[i + 1];
        }
        memcpy(x + 1, next + 1, cells * sizeof *x);
    }

    /* The whole ring, serially: this rank's cells must match. */
    n = (size_t)ranks * cells;
    ring = malloc(n * sizeof *ring);
    ring_next = malloc(n * sizeof *ring_next);
    if (!ring || !ring_next) {
        fprintf(stderr, "halo rank %u: out of memory\n", my_rank);
        return 1;
    }
    for (i = 0; i < n; i++) {
        ring[i] = initial(i);
    }
    for (it = 0; it < iterations; it++) {
        uint64_t* t;
        step(ring, ring_next, n);
        t = ring;
        ring = ring_next;
        ring_next = t;
    }
    for (i = 0; i < cells; i++) {
        sum += x[i + 1];
        if (x[i + 1] != ring[(size_t)my_rank * cells + i]) {
            if (cells_ok) {
                fprintf(stderr, "halo rank %u: cell %zu differs from the serial run\n", my_rank,
                        (size_t)my_rank * cells + i);
            }
            cells_ok = 0;
        }
    }

    /* The sums to rank 0, the verdict back (messages); then, every rank past its last
     * iteration, the channels close, and a last exchange with rank 0 ("closed", "bye") makes
     * sure no rank finalizes while a neighbour still closes a channel with it. */
    if (my_rank == 0) {
        uint64_t total = sum, start = 0, expected;
        int ok = cells_ok;
        for (r = 1; r < ranks; r++) {
            control_message m = receive(msg_ep, KIND_SUM);
            total += m.sum;
            ok = ok && m.cells_ok;
        }
        for (i = 0; i < n; i++) {
            start += initial(i);
        }
        expected = power(9, iterations) * start;
        all_ok = ok && total == expected;
        printf("halo: %u ranks x %zu cells, %lu iterations over %s: checksum %016llx, "
               "closed form %016llx: %s\n",
               ranks, cells, iterations,
               getenv("MCAPI_PROVIDER") ? getenv("MCAPI_PROVIDER") : "the default provider",
               (unsigned long long)total, (unsigned long long)expected,
               all_ok ? "ok" : (ok ? "WRONG CHECKSUM" : "WRONG CELLS"));
        fflush(stdout);
        for (r = 1; r < ranks; r++) {
            send_to(msg_ep, r, KIND_VERDICT, (uint32_t)all_ok, 0);
        }
        close_channels(send_right, send_left, recv_left, recv_right);
        for (r = 1; r < ranks; r++) {
            receive(msg_ep, KIND_CLOSED);
        }
        for (r = 1; r < ranks; r++) {
            send_to(msg_ep, r, KIND_BYE, 0, 0);
        }
    } else {
        send_to(msg_ep, 0, KIND_SUM, (uint32_t)cells_ok, sum);
        all_ok = receive(msg_ep, KIND_VERDICT).cells_ok == 1;
        close_channels(send_right, send_left, recv_left, recv_right);
        send_to(msg_ep, 0, KIND_CLOSED, 0, 0);
        receive(msg_ep, KIND_BYE);
    }
    mcapi_finalize(&st);
    check(st, "mcapi_finalize");
    free(x);
    free(next);
    free(ring);
    free(ring_next);
    return all_ok && cells_ok ? 0 : 1;
}
