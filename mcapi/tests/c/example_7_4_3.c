/*
 * Spec 7.4.3: the multimedia use case, a general purpose processor (GPP) that has a DSP run
 * a FIR filter, each its own process and node:
 *
 *   example_7_4_3 gpp    node <0,GPP_1>: connects three channels, sends the data, the
 *                        "code" (the filter's taps) and the commands, checks the result
 *   example_7_4_3 dsp    node <0,DSP_1>: opens its ends and runs the command loop
 *
 * Channels: commands GPP -> DSP (scalar, 32-bit), data and code GPP -> DSP (packets), the
 * result DSP -> GPP (packets). The DSP filters the samples it received with the taps it
 * received, without copying either out of the receive pool (zero copy, released at the
 * end as the spec does), and the GPP compares the result with its own computation.
 *
 * The code follows 7.4.3 (gp_proc.c, dsp.c, shared.h); what had to change, and why:
 * - mcapi_initialize takes the node attributes (NULL) as 2.000's synopsis has it; the
 *   mcapi_param_t stays a variable never set, as in the spec (it means defaults here).
 * - The DSP initializes as node DSP_1 (64), the node the GPP looks for (dsp.c says 0, the
 *   GPP's own node).
 * - mcapi_endpoint_get takes its timeout (the spec omits it).
 * - The result channel is connected with the DSP's endpoint as the sender: the spec's
 *   connect(data_recv_endpoint, remote_data_recv_endpoint) names the GPP's receiving
 *   endpoint first, which would make both opens fail with MCAPI_ERR_CHAN_DIRECTION.
 * - Every request is waited on: the connects (they complete at once) and the opens before
 *   the first send or receive (a handle is usable once its open completed), the closes
 *   before the endpoints are deleted.
 * - Received sizes are size_t (the spec passes int*); receive_dsp_cmd returns the command;
 *   the DSP_EXECUTE case, cut off in the spec, runs the filter and sends the result.
 * - The GPP releases the result packet and both nodes finalize.
 */
#include "check.h"

/* The nodes pass an mcapi_param_t they never set, as 7.4.3 does (it means defaults here);
 * GCC warns about it since the parameter is MCAPI_IN (const). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* ---- shared.h ---- */
#define CHECK_STATUS(status) EXPECT_OK(status)
enum { DSP_READY, DSP_DATA, DSP_CODE, DSP_TERMINATE, DSP_EXECUTE, COMPLETED };
#define DOMAIN_0 0
#define PORT_COMMAND 0
#define PORT_DATA 1
#define PORT_DATA_RECV 2
/* Predefined Node numbering */
#define GPP_1 0  /* 0-63 reserved for homogenous MC */
#define DSP_1 64 /* 64+ used for DSP nodes */
#define WAIT_MS 30000

/* The "code" sent to the DSP: a FIR filter's taps. */
#define MAX_TAPS 16
typedef struct {
    char op[4]; /* "FIR" */
    mcapi_uint32_t taps;
    mcapi_int32_t coefficient[MAX_TAPS];
} dsp_code_t;
#define SAMPLES 1024

static void wait_request(mcapi_request_t* request) {
    mcapi_status_t status;
    size_t size;
    EXPECT(mcapi_wait(request, &size, WAIT_MS, &status) == MCAPI_TRUE);
    CHECK_STATUS(status);
}

/* y[n] = sum over k of c[k] * x[n - k] (x before the first sample is 0). */
static void fir(const dsp_code_t* code, const mcapi_int16_t* x, size_t n, mcapi_int32_t* y) {
    size_t i, k;
    for (i = 0; i < n; i++) {
        mcapi_int32_t sum = 0;
        for (k = 0; k < code->taps && k <= i; k++) {
            sum += code->coefficient[k] * x[i - k];
        }
        y[i] = sum;
    }
}

/* ---- gp_proc.c: General Purpose Processor Code ---- */

static mcapi_endpoint_t command_endpoint;
static mcapi_endpoint_t data_endpoint;
static mcapi_endpoint_t remote_command_endpoint;
static mcapi_endpoint_t remote_data_endpoint;
static mcapi_endpoint_t data_recv_endpoint;
static mcapi_endpoint_t remote_data_recv_endpoint;
static mcapi_pktchan_send_hndl_t data_chan;
static mcapi_sclchan_send_hndl_t command_chan;
static mcapi_pktchan_recv_hndl_t data_recv_chan;

static void initialize_comms(void) {
    mcapi_node_t gp_node = GPP_1;
    mcapi_param_t mcapi_parameters;
    mcapi_info_t mcapi_info;
    mcapi_status_t status;
    mcapi_request_t request, opens[3];
    mcapi_timeout_t timeout = WAIT_MS;

    mcapi_initialize(DOMAIN_0, gp_node, NULL, &mcapi_parameters, &mcapi_info, &status);
    CHECK_STATUS(status);
    command_endpoint = mcapi_endpoint_create(PORT_COMMAND, &status);
    CHECK_STATUS(status);
    data_endpoint = mcapi_endpoint_create(PORT_DATA, &status);
    CHECK_STATUS(status);
    data_recv_endpoint = mcapi_endpoint_create(PORT_DATA_RECV, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_set_attribute(data_recv_endpoint, MCAPI_ENDP_ATTR_TIMEOUT, &timeout,
                                 sizeof timeout, &status);
    CHECK_STATUS(status);
    remote_command_endpoint = mcapi_endpoint_get(DOMAIN_0, DSP_1, PORT_COMMAND, timeout, &status);
    CHECK_STATUS(status);
    remote_data_endpoint = mcapi_endpoint_get(DOMAIN_0, DSP_1, PORT_DATA, timeout, &status);
    CHECK_STATUS(status);
    remote_data_recv_endpoint =
        mcapi_endpoint_get(DOMAIN_0, DSP_1, PORT_DATA_RECV, timeout, &status);
    CHECK_STATUS(status);
    mcapi_pktchan_connect_i(data_endpoint, remote_data_endpoint, &request, &status);
    CHECK_STATUS(status);
    wait_request(&request);
    mcapi_sclchan_connect_i(command_endpoint, remote_command_endpoint, &request, &status);
    CHECK_STATUS(status);
    wait_request(&request);
    mcapi_pktchan_connect_i(remote_data_recv_endpoint, data_recv_endpoint, &request, &status);
    CHECK_STATUS(status);
    wait_request(&request);
    mcapi_pktchan_send_open_i(&data_chan, data_endpoint, &opens[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_sclchan_send_open_i(&command_chan, command_endpoint, &opens[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_pktchan_recv_open_i(&data_recv_chan, data_recv_endpoint, &opens[2], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_request(&opens[0]);
    wait_request(&opens[1]);
    wait_request(&opens[2]);
}

static void send_data(void* data, size_t size) {
    mcapi_status_t status;
    mcapi_pktchan_send(data_chan, data, size, &status);
    CHECK_STATUS(status);
}

static void send_dsp_cmd(int cmd) {
    mcapi_status_t status;
    mcapi_sclchan_send_uint32(command_chan, (mcapi_uint32_t)cmd, &status);
    CHECK_STATUS(status);
}

static void read_data(void** dst, size_t* size) {
    mcapi_status_t status;
    mcapi_pktchan_recv(data_recv_chan, dst, size, &status);
    CHECK_STATUS(status);
}

static void shutdown_comms(void) {
    mcapi_status_t status;
    mcapi_request_t request[3];
    mcapi_pktchan_recv_close_i(data_recv_chan, &request[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_pktchan_send_close_i(data_chan, &request[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_sclchan_send_close_i(command_chan, &request[2], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_request(&request[0]);
    wait_request(&request[1]);
    wait_request(&request[2]);
    mcapi_endpoint_delete(command_endpoint, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_delete(data_endpoint, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_delete(data_recv_endpoint, &status);
    CHECK_STATUS(status);
}

static int perform_multimedia_function(void* code, size_t code_size, void* data,
                                       size_t data_size, mcapi_int32_t* out) {
    void* result;
    size_t size = 0;
    mcapi_status_t status;
    initialize_comms();
    send_dsp_cmd(DSP_DATA);
    send_data(data, data_size);
    send_dsp_cmd(DSP_CODE);
    send_data(code, code_size);
    send_dsp_cmd(DSP_EXECUTE);
    read_data(&result, &size);
    EXPECT(size == data_size / sizeof(mcapi_int16_t) * sizeof(mcapi_int32_t));
    memcpy(out, result, size);
    mcapi_pktchan_release(result, &status);
    CHECK_STATUS(status);
    send_dsp_cmd(DSP_TERMINATE);
    shutdown_comms();
    return COMPLETED;
}

static int gpp(void) {
    static mcapi_int16_t samples[SAMPLES];
    static mcapi_int32_t result[SAMPLES], expected[SAMPLES];
    dsp_code_t code;
    mcapi_status_t status;
    size_t i;
    memset(&code, 0, sizeof code);
    memcpy(code.op, "FIR", 4);
    code.taps = 5;
    for (i = 0; i < code.taps; i++) {
        code.coefficient[i] = (mcapi_int32_t)(i + 1) * ((i % 2) ? -1 : 1);
    }
    for (i = 0; i < SAMPLES; i++) {
        samples[i] = (mcapi_int16_t)((i * 37) % 2001 - 1000);
    }
    EXPECT(perform_multimedia_function(&code, sizeof code, samples, sizeof samples, result) ==
           COMPLETED);
    fir(&code, samples, SAMPLES, expected);
    EXPECT(memcmp(result, expected, sizeof expected) == 0);
    mcapi_finalize(&status);
    CHECK_STATUS(status);
    printf("gpp: the DSP filtered %d samples with %u taps correctly\n", SAMPLES,
           (unsigned)code.taps);
    return 0;
}

/* ---- dsp.c: DSP Code ---- */

static mcapi_endpoint_t dsp_command_endpoint;
static mcapi_endpoint_t dsp_data_endpoint;
static mcapi_endpoint_t dsp_data_send_endpoint;
static mcapi_pktchan_recv_hndl_t dsp_data_chan;
static mcapi_sclchan_recv_hndl_t dsp_command_chan;
static mcapi_pktchan_send_hndl_t data_send_chan;
static void* code_buffer;
static void* data_buffer;
static size_t code_size;
static size_t data_size;
static mcapi_int32_t result_buffer[SAMPLES];
static size_t result_size;

static mcapi_status_t dsp_initialize(void) {
    mcapi_domain_t domain = DOMAIN_0;
    mcapi_node_t dsp_node = DSP_1;
    mcapi_param_t mcapi_parameters;
    mcapi_info_t mcapi_info;
    mcapi_status_t status;
    mcapi_request_t request[3];
    mcapi_timeout_t timeout = WAIT_MS;

    mcapi_initialize(domain, dsp_node, NULL, &mcapi_parameters, &mcapi_info, &status);
    CHECK_STATUS(status);
    /* Timeouts are set before the GPP can find the last endpoint and connect: the
     * attributes of a connected endpoint are fixed. */
    dsp_command_endpoint = mcapi_endpoint_create(PORT_COMMAND, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_set_attribute(dsp_command_endpoint, MCAPI_ENDP_ATTR_TIMEOUT, &timeout,
                                 sizeof timeout, &status);
    CHECK_STATUS(status);
    dsp_data_endpoint = mcapi_endpoint_create(PORT_DATA, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_set_attribute(dsp_data_endpoint, MCAPI_ENDP_ATTR_TIMEOUT, &timeout,
                                 sizeof timeout, &status);
    CHECK_STATUS(status);
    dsp_data_send_endpoint = mcapi_endpoint_create(PORT_DATA_RECV, &status);
    CHECK_STATUS(status);
    mcapi_pktchan_recv_open_i(&dsp_data_chan, dsp_data_endpoint, &request[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_sclchan_recv_open_i(&dsp_command_chan, dsp_command_endpoint, &request[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_pktchan_send_open_i(&data_send_chan, dsp_data_send_endpoint, &request[2], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_request(&request[0]);
    wait_request(&request[1]);
    wait_request(&request[2]);
    return MCAPI_SUCCESS;
}

static mcapi_status_t dsp_shutdown(void) {
    mcapi_status_t status;
    mcapi_request_t request[3];
    mcapi_pktchan_release(data_buffer, &status);
    CHECK_STATUS(status);
    mcapi_pktchan_release(code_buffer, &status);
    CHECK_STATUS(status);
    mcapi_pktchan_recv_close_i(dsp_data_chan, &request[0], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_sclchan_recv_close_i(dsp_command_chan, &request[1], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    mcapi_pktchan_send_close_i(data_send_chan, &request[2], &status);
    EXPECT(status == MCAPI_SUCCESS || status == MCAPI_PENDING);
    wait_request(&request[0]);
    wait_request(&request[1]);
    wait_request(&request[2]);
    mcapi_endpoint_delete(dsp_command_endpoint, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_delete(dsp_data_endpoint, &status);
    CHECK_STATUS(status);
    mcapi_endpoint_delete(dsp_data_send_endpoint, &status);
    CHECK_STATUS(status);
    return status;
}

static int receive_dsp_cmd(void) {
    mcapi_uint32_t cmd;
    mcapi_status_t status;
    cmd = mcapi_sclchan_recv_uint32(dsp_command_chan, &status);
    CHECK_STATUS(status);
    return (int)cmd;
}

static int dsp_command_loop(void) {
    int command = DSP_READY;
    mcapi_status_t status;
    dsp_initialize();
    while (command != DSP_TERMINATE) {
        switch (command) {
        case DSP_DATA:
            mcapi_pktchan_recv(dsp_data_chan, &data_buffer, &data_size, &status);
            CHECK_STATUS(status);
            break;
        case DSP_CODE:
            mcapi_pktchan_recv(dsp_data_chan, &code_buffer, &code_size, &status);
            CHECK_STATUS(status);
            /* Copy code to from buffer to local execute memory: run it in place here. */
            EXPECT(code_size == sizeof(dsp_code_t));
            EXPECT(memcmp(((const dsp_code_t*)code_buffer)->op, "FIR", 4) == 0);
            break;
        case DSP_EXECUTE:
            /* Tell DSP to Execute - Assume code writes to result_buffer */
            EXPECT(data_buffer != NULL && code_buffer != NULL);
            EXPECT(data_size <= sizeof(mcapi_int16_t) * SAMPLES);
            fir((const dsp_code_t*)code_buffer, (const mcapi_int16_t*)data_buffer,
                data_size / sizeof(mcapi_int16_t), result_buffer);
            result_size = data_size / sizeof(mcapi_int16_t) * sizeof(mcapi_int32_t);
            mcapi_pktchan_send(data_send_chan, result_buffer, result_size, &status);
            CHECK_STATUS(status);
            break;
        case DSP_READY:
            break;
        default:
            EXPECT(!"unknown command");
        }
        command = receive_dsp_cmd();
    }
    dsp_shutdown();
    mcapi_finalize(&status);
    CHECK_STATUS(status);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "gpp") == 0) {
        return gpp();
    }
    if (argc == 2 && strcmp(argv[1], "dsp") == 0) {
        return dsp_command_loop();
    }
    fprintf(stderr, "usage: %s gpp|dsp\n", argv[0]);
    return 2;
}
