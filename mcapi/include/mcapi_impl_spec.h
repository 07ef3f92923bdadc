/*
 * mcapi_impl_spec.h - implementation-specific types and constants of libmcapi
 * (MCAPI 2.000 over libfabric). Included by mcapi.h.
 *
 * Values are checked against the Rust side by mcapi/tests/c_abi.rs; what they mean is in
 * docs/c-abi.md and docs/implementation-defined.md.
 */
#ifndef MCAPI_IMPL_SPEC_H
#define MCAPI_IMPL_SPEC_H

#include "mca.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles: plain 64-bit values, comparable with ==, validated on every use (a garbage,
 * stale or deleted handle is reported as invalid, never mistaken for another object).
 * An endpoint value names <domain, node, port> and means the same on every node, so it
 * can be sent to another node in a message. */
typedef uint64_t mcapi_endpoint_t;
typedef uint64_t mcapi_pktchan_recv_hndl_t;
typedef uint64_t mcapi_pktchan_send_hndl_t;
typedef uint64_t mcapi_sclchan_recv_hndl_t;
typedef uint64_t mcapi_sclchan_send_hndl_t;
typedef mca_request_t mcapi_request_t;

/* Limits. */
#define MCAPI_MAX_MSG_SIZE 16777216  /* largest message (bytes): the ceiling; the configured one: MCAPI_NODE_ATTR_MAX_MSG_SIZE */
#define MCAPI_MAX_PKT_SIZE 4194304   /* largest packet (bytes) */
#define MCAPI_MAX_PRIORITY 7         /* largest valid priority value; 0 is the highest */
#define MCAPI_MAX_ENDPOINTS 512      /* endpoints per node, on every provider */
#define MCAPI_MAX_STATUS_MSG_LEN 32  /* mcapi_display_status buffer for any name */
#define MCAPI_MAX_REQUESTS 16777216  /* largest mcapi_param_t.request_table_size */
#define MCAPI_MAX_RECV_BUFFERS 16384 /* largest mcapi_param_t.recv_buffers */

/* Buffers aligned to a cache line: `char buf[256] MCAPI_DECL_ALIGNED;` */
#define MCAPI_BUF_ALIGN 64
#if defined(__GNUC__) || defined(__clang__)
#define MCAPI_DECL_ALIGNED __attribute__((aligned(MCAPI_BUF_ALIGN)))
#else
#define MCAPI_DECL_ALIGNED
#endif

/* mcapi_info_t values. */
#define MCAPI_ORG_ID 0 /* no MCA organization id assigned */
#define MCAPI_IMPL_VERSION 0x000100 /* 0xMMmmpp of the libmcapi version */

/* Implementation parameters of mcapi_initialize (spec 3.17.5.1.1).
 *
 * mcapi_param_init() sets every field to "no override" and writes the magic; set the fields
 * you want afterwards. mcapi_initialize reads the block only if the magic is there, so
 * NULL, a zero-filled block or a variable never initialized all mean defaults. A zero
 * number or an empty string keeps the environment's value (MCAPI_REQUESTS,
 * MCAPI_RECV_BUFFERS, MCAPI_PROVIDER, MCAPI_JOB, MCAPI_TOPOLOGY) or the default. */
#define MCAPI_COMPAT_SPEC 1 /* the letter of MCAPI 2.000 (the default) */
#define MCAPI_COMPAT_MCA 2  /* the MCA reference implementation's readings (docs/c-abi.md) */
#define MCAPI_PARAM_MAGIC 0x4d4341504950524dULL /* set by mcapi_param_init only */
typedef struct mcapi_param {
    uint64_t magic;
    mca_uint_t request_table_size; /* request slots of the node; default 1024 */
    mca_uint_t recv_buffers;       /* receive buffers per endpoint; default 64 */
    char provider[64];             /* libfabric provider: "shm", "tcp", "verbs;ofi_rxm"... */
    char job[64];                  /* job name; nodes of other jobs are invisible */
    char topology[256];            /* file of "domain node host[:port]" lines */
    mca_uint_t compat;             /* MCAPI_COMPAT_SPEC, MCAPI_COMPAT_MCA; 0: MCAPI_COMPAT */
    mca_uint_t reserved32;         /* zero */
    uint64_t max_msg_size;         /* largest message sent, 1..MCAPI_MAX_MSG_SIZE; 0: MCAPI_MAX_MSG_SIZE env */
    uint64_t eager_max;            /* largest message sent eagerly, 1..65536; 0: MCAPI_EAGER_MAX env */
    uint64_t reserved[5];          /* zero */
} mcapi_param_t;

/* Node attributes of the running node (EXTENSIONS, not part of MCAPI 2.000), read with
 * mcapi_node_get_attribute (mcapi_uint_t, of this node or another; read-only: set them with
 * mcapi_param_t or the environment): the largest message it sends (its configured maximum,
 * at most MCAPI_MAX_MSG_SIZE; larger sends are MCAPI_ERR_MSG_SIZE, while any message up to
 * MCAPI_MAX_MSG_SIZE is received), and the largest it sends eagerly (larger ones go by
 * rendezvous, docs/design.md "Large messages"). */
#define MCAPI_NODE_ATTR_MAX_MSG_SIZE 0x100U
#define MCAPI_NODE_ATTR_EAGER_MAX 0x101U

/* Node attributes (spec 4.1.5-4.1.7); set up with mcapi_node_init_attributes. */
#define MCAPI_NODE_ATTR_MAGIC 0x4d4e4154U /* set by mcapi_node_init_attributes only */
typedef struct mcapi_node_attributes {
    mca_uint_t magic;
    mca_uint_t node_type; /* MCAPI_NODE_ATTR_TYPE */
    mca_uint_t reserved[6];
} mcapi_node_attributes_t;

/* Sets up a parameter block (implementation-specific; see above). */
void mcapi_param_init(mcapi_param_t* mcapi_parameters, mca_status_t* mcapi_status);

/* EXTENSIONS, not part of MCAPI 2.000 (prefix mcapi_ext_): the process's rank and the
 * number of processes under a PMIx launcher (mpirun, srun --mpi=pmix), so a program can
 * take its rank as its node id (docs/launchers.md). Not under a launcher, or libmcapi
 * built without PMIx: 0 and MCAPI_ERR_GENERAL. */
mca_uint_t mcapi_ext_launcher_rank(mca_status_t* mcapi_status);
mca_uint_t mcapi_ext_launcher_size(mca_status_t* mcapi_status);

/* EXTENSIONS of the MCA reference implementation that its programs call (not part of
 * MCAPI 2.000; docs/c-abi.md, "Compatibility mode"):
 * mcapi_set_debug_level / mca_set_debug_level: this library's diagnostics on stderr, 0 off,
 * 1 errors, 2 warnings, 3 info, 4 debug, 5 and more everything (MCAPI_LOG, when set, wins).
 * mcapi_display_state: prints the calling thread's node (endpoints, queued messages,
 * requests in use) to stderr; the handle is not read. */
void mcapi_set_debug_level(int level);
void mca_set_debug_level(int level);
void mcapi_display_state(void* handle);

#ifdef __cplusplus
}
#endif

#endif /* MCAPI_IMPL_SPEC_H */
