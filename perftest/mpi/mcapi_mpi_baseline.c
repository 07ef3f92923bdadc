/*
 * The MPI baseline of `perftest compare`: msg-lat's ping-pong and msg-bw's windowed
 * streaming between ranks 0 and 1, with the same sizes, iterations, warmup, window, time
 * limit and rounds as the libfabric and MCAPI runs. perftest compiles it with mpicc at run
 * time and starts it with mpirun -n 2; the transport is whatever mpirun pinned.
 *
 *   mcapi_mpi_baseline lat|bw SIZES ITERATIONS WARMUP WINDOW MAX_TIME_S ROUNDS
 *
 * PERFTEST_MPI_CPUS=CLIENT,SERVER pins rank 0 (the client: it sends and times) and rank 1
 * (the server) to those cores, as perftest's --cpu pins its two processes.
 *
 * SIZES is a comma-separated list of byte counts. Rank 0 prints one JSON line per size:
 *   {"size":8,"rounds":[{"iterations_done":N,"time_s":T,"lat_us_min":...}, ...]}
 * Latencies are half round trips in microseconds (lat only).
 *
 * As in perftest, the warmup runs before the clock starts and a round stops at the time
 * limit; the receiver learns of an early stop from a message with STOP_TAG, outside the
 * timed loop, so that data messages carry nothing but payload. Receives are posted before
 * the sends they answer, and every wait polls as MCAPI's blocking calls do: it spins for
 * SPIN_S, then yields the core between polls. Open MPI's blocking calls only spin, which on
 * a machine with more busy processes than cores costs a scheduler time slice per message
 * (and a count of polls would spin far longer than perftest's: an MPI_Testall is dearer
 * than a completion-queue read).
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA_TAG 1
#define STOP_TAG 2
#define ACK_TAG 3
#define ACK_LEN 4
/* Latency samples kept per round: the time limit ends a round long before this. */
#define MAX_SAMPLES (1L << 24)
/* Receive memory a window's receives cycle through, as perftest's raw and MCAPI receivers
 * do (RECV_MEMORY_CAP): beyond it they share their bytes. */
#define MAX_WINDOW_BYTES (4L << 20)
/* Buffers start on a page, as perftest's do: shm copies page by page. */
#define PAGE 4096
/* Spinning before yielding: MCAPI's default (MCAPI_SPIN_US). */
#define SPIN_S 50e-6
/* Empty polls between two looks at the clock. */
#define CLOCK_MASK 0x3fu

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "mcapi_mpi_baseline: error: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Completes `n` requests: spins, then yields between polls. */
static void wait_all(int n, MPI_Request *reqs, MPI_Status *st)
{
    unsigned spins = 0;
    int done = 0, yielding = 0;
    double until = 0;
    for (;;) {
        MPI_Testall(n, reqs, &done, st ? st : MPI_STATUSES_IGNORE);
        if (done)
            return;
        if (yielding) {
            sched_yield();
        } else if ((++spins & CLOCK_MASK) == 0) {
            /* The clock only once a wait lasts: short waits never read it. */
            double t = now_s();
            if (until == 0)
                until = t + SPIN_S;
            else if (t >= until)
                yielding = 1;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted values. */
static double pct(const double *v, long n, double q)
{
    long i = (long)(q * (double)n + 0.999999) - 1;
    if (i < 0)
        i = 0;
    if (i >= n)
        i = n - 1;
    return v[i];
}

struct plan {
    long iterations, warmup, window, rounds;
    double max_time;
};

/* One ping-pong round; rank 0 prints its numbers (into `out`). */
/* Receives the reply into `rbuf` (posted first) to a message sent from `sbuf`. */
static void round_trip(char *sbuf, char *rbuf, int size)
{
    MPI_Request r[2];
    MPI_Irecv(rbuf, size, MPI_BYTE, 1, DATA_TAG, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(sbuf, size, MPI_BYTE, 1, DATA_TAG, MPI_COMM_WORLD, &r[1]);
    wait_all(2, r, NULL);
}

static void lat_round(int rank, char *sbuf, char *rbuf, int size, const struct plan *p,
                      double *rtt, char *out, size_t out_len)
{
    long total = p->warmup + p->iterations;
    MPI_Request r;
    MPI_Status st;
    if (rank == 1) {
        for (long i = 0; i < total; i++) {
            MPI_Irecv(rbuf, size, MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &r);
            wait_all(1, &r, &st);
            if (st.MPI_TAG == STOP_TAG)
                break;
            MPI_Isend(sbuf, size, MPI_BYTE, 0, DATA_TAG, MPI_COMM_WORLD, &r);
            wait_all(1, &r, NULL);
        }
        return;
    }
    for (long i = 0; i < p->warmup; i++)
        round_trip(sbuf, rbuf, size);
    double start = now_s(), deadline = start + p->max_time, last = start;
    long done = 0, limit = p->iterations < MAX_SAMPLES ? p->iterations : MAX_SAMPLES;
    while (done < limit) {
        round_trip(sbuf, rbuf, size);
        double t = now_s();
        rtt[done++] = t - last;
        last = t;
        if (t >= deadline)
            break;
    }
    if (done < p->iterations)
        MPI_Send(sbuf, 0, MPI_BYTE, 1, STOP_TAG, MPI_COMM_WORLD);
    qsort(rtt, (size_t)done, sizeof *rtt, cmp_double);
    /* Half round trips, in microseconds. */
    double k = 0.5e6;
    snprintf(out, out_len,
             "{\"iterations_done\":%ld,\"time_s\":%.9f,\"lat_us_min\":%.4f,"
             "\"lat_us_p50\":%.4f,\"lat_us_p99\":%.4f,\"lat_us_p999\":%.4f,"
             "\"lat_us_max\":%.4f}",
             done, last - start, rtt[0] * k, pct(rtt, done, 0.5) * k, pct(rtt, done, 0.99) * k,
             pct(rtt, done, 0.999) * k, rtt[done - 1] * k);
}

/* Messages in the next window: the warmup in windows, then the timed messages likewise. */
static long next_window(long *warm, long *timed, long window)
{
    long *pool = *warm > 0 ? warm : timed;
    long n = *pool < window ? *pool : window;
    *pool -= n;
    return n;
}

/* One streaming round: windows of non-blocking sends, each acknowledged by the receiver. */
/* Sends a window of `n` messages from `sbuf`; its acknowledgement's receive is posted first. */
static void send_window(char *sbuf, int size, long n, MPI_Request *reqs)
{
    char ack[ACK_LEN];
    MPI_Irecv(ack, ACK_LEN, MPI_BYTE, 1, ACK_TAG, MPI_COMM_WORLD, &reqs[n]);
    for (long i = 0; i < n; i++)
        MPI_Isend(sbuf, size, MPI_BYTE, 1, DATA_TAG, MPI_COMM_WORLD, &reqs[i]);
    wait_all((int)n + 1, reqs, NULL);
}

static void bw_round(int rank, char *sbuf, char *rbuf, long slots, int size,
                     const struct plan *p, MPI_Request *reqs, char *out, size_t out_len)
{
    long warm = p->warmup, timed = p->iterations;
    if (rank == 1) {
        char ack[ACK_LEN] = {0};
        long n;
        while ((n = next_window(&warm, &timed, p->window)) > 0) {
            for (long i = 0; i < n; i++)
                MPI_Irecv(rbuf + (i % slots) * size, size, MPI_BYTE, 0, MPI_ANY_TAG,
                          MPI_COMM_WORLD, &reqs[i]);
            MPI_Status st;
            /* Messages match the receives in order: a STOP comes first or not at all. */
            wait_all(1, &reqs[0], &st);
            if (st.MPI_TAG == STOP_TAG) {
                for (long i = 1; i < n; i++) {
                    MPI_Cancel(&reqs[i]);
                    MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
                }
                return;
            }
            wait_all((int)(n - 1), reqs + 1, NULL);
            MPI_Isend(ack, ACK_LEN, MPI_BYTE, 0, ACK_TAG, MPI_COMM_WORLD, &reqs[0]);
            wait_all(1, &reqs[0], NULL);
        }
        return;
    }
    long n;
    while (warm > 0 && (n = next_window(&warm, &timed, p->window)) > 0)
        send_window(sbuf, size, n, reqs);
    double start = now_s(), deadline = start + p->max_time, end = start;
    long done = 0;
    while ((n = next_window(&warm, &timed, p->window)) > 0) {
        send_window(sbuf, size, n, reqs);
        done += n;
        end = now_s();
        if (end >= deadline)
            break;
    }
    if (done < p->iterations)
        MPI_Send(sbuf, 0, MPI_BYTE, 1, STOP_TAG, MPI_COMM_WORLD);
    snprintf(out, out_len, "{\"iterations_done\":%ld,\"time_s\":%.9f}", done, end - start);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc != 8)
        die("usage: mcapi_mpi_baseline lat|bw SIZES ITERATIONS WARMUP WINDOW MAX_TIME_S ROUNDS");
    if (ranks != 2)
        die("run with exactly two ranks (mpirun -n 2)");
    const char *cpus = getenv("PERFTEST_MPI_CPUS");
    if (cpus) {
        int core[2];
        cpu_set_t set;
        if (sscanf(cpus, "%d,%d", &core[0], &core[1]) != 2 || core[rank] < 0 ||
            core[rank] >= CPU_SETSIZE)
            die("PERFTEST_MPI_CPUS is CLIENT,SERVER (two core numbers)");
        CPU_ZERO(&set);
        CPU_SET(core[rank], &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            die("cannot pin to the core PERFTEST_MPI_CPUS names");
    }
    int lat = strcmp(argv[1], "lat") == 0;
    if (!lat && strcmp(argv[1], "bw") != 0)
        die("the pattern is lat or bw");
    struct plan p = {atol(argv[3]), atol(argv[4]), atol(argv[5]), atol(argv[7]), atof(argv[6])};
    if (p.iterations < 1 || p.warmup < 0 || p.window < 1 || p.rounds < 1 || !(p.max_time > 0))
        die("bad iterations, warmup, window, time limit or rounds");

    long sizes[256], nsizes = 0, largest = 0;
    for (char *s = strtok(argv[2], ","); s; s = strtok(NULL, ",")) {
        if (nsizes == 256)
            die("too many sizes");
        sizes[nsizes] = atol(s);
        if (sizes[nsizes] < 0 || sizes[nsizes] > (1L << 30))
            die("bad size");
        if (sizes[nsizes] > largest)
            largest = sizes[nsizes];
        nsizes++;
    }

    long slots = 1;
    if (!lat && largest > 0) {
        slots = MAX_WINDOW_BYTES / largest;
        slots = slots < 1 ? 1 : slots > p.window ? p.window : slots;
    }
    size_t rbytes = (size_t)(largest > 0 ? largest : 1) * (size_t)slots;
    void *sp = NULL, *rp = NULL;
    if (posix_memalign(&sp, PAGE, (size_t)(largest > 0 ? largest : 1)) != 0 ||
        posix_memalign(&rp, PAGE, rbytes) != 0)
        die("out of memory");
    char *sbuf = sp, *rbuf = rp;
    long samples = p.iterations < MAX_SAMPLES ? p.iterations : MAX_SAMPLES;
    double *rtt = lat && rank == 0 ? malloc(sizeof(double) * (size_t)samples) : NULL;
    /* A window's sends and its acknowledgement. */
    MPI_Request *reqs = lat ? NULL : malloc(sizeof(MPI_Request) * (size_t)(p.window + 1));
    /* One JSON object per round, plus the line's framing. */
    size_t line_len = (size_t)p.rounds * 256 + 64;
    char *line = malloc(line_len);
    if (!sbuf || !rbuf || (lat && rank == 0 && !rtt) || (!lat && !reqs) || !line)
        die("out of memory");
    memset(sbuf, 'm', (size_t)(largest > 0 ? largest : 1));
    memset(rbuf, 0, rbytes);

    for (long s = 0; s < nsizes; s++) {
        int size = (int)sizes[s];
        size_t at = (size_t)snprintf(line, line_len, "{\"size\":%d,\"rounds\":[", size);
        for (long r = 0; r < p.rounds; r++) {
            char one[256] = "";
            /* Both ranks start each round together. */
            MPI_Barrier(MPI_COMM_WORLD);
            if (lat)
                lat_round(rank, sbuf, rbuf, size, &p, rtt, one, sizeof one);
            else
                bw_round(rank, sbuf, rbuf, slots, size, &p, reqs, one, sizeof one);
            at += (size_t)snprintf(line + at, line_len - at, "%s%s", r ? "," : "", one);
        }
        if (rank == 0) {
            printf("%s]}\n", line);
            fflush(stdout);
        }
    }
    free(line);
    free(reqs);
    free(rtt);
    free(rbuf);
    free(sbuf);
    MPI_Finalize();
    return 0;
}
