/*
 * mcapi.h - MCAPI 2.000 (Multicore Communications API), libmcapi over libfabric.
 *
 * Signatures follow spec chapter 4; where the spec shows none, the form its text and
 * examples imply (see docs/c-abi.md, which also lists the deviations: mcapi_wait_any takes
 * an array of request pointers). Status codes, attribute numbers and limits are checked
 * against the Rust side by mcapi/tests/c_abi.rs.
 */
#ifndef MCAPI_H
#define MCAPI_H

#include "mca.h"
#include "mcapi_impl_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Types (3.16). */
typedef mca_int_t mcapi_int_t;
typedef mca_int8_t mcapi_int8_t;
typedef mca_int16_t mcapi_int16_t;
typedef mca_int32_t mcapi_int32_t;
typedef mca_int64_t mcapi_int64_t;
typedef mca_uint_t mcapi_uint_t;
typedef mca_uint8_t mcapi_uint8_t;
typedef mca_uint16_t mcapi_uint16_t;
typedef mca_uint32_t mcapi_uint32_t;
typedef mca_uint64_t mcapi_uint64_t;
typedef mca_boolean_t mcapi_boolean_t;
typedef mca_domain_t mcapi_domain_t;
typedef mca_node_t mcapi_node_t;
typedef uint32_t mcapi_port_t;
typedef mca_status_t mcapi_status_t;
typedef mca_timeout_t mcapi_timeout_t;
typedef mca_uint_t mcapi_priority_t;

#define MCAPI_TRUE MCA_TRUE
#define MCAPI_FALSE MCA_FALSE
#define MCAPI_NULL MCA_NULL
#define MCAPI_IN MCA_IN
#define MCAPI_OUT MCA_OUT

#define MCAPI_VERSION 0x2000 /* 2.000: the three rightmost hex digits are the minor */

/* Timeouts are in milliseconds. */
#define MCAPI_TIMEOUT_INFINITE MCA_INFINITE
#define MCAPI_INFINITE MCA_INFINITE
#define MCAPI_TIMEOUT_IMMEDIATE 0U

/* Sentinels. */
#define MCAPI_PORT_ANY (~0U)             /* mcapi_endpoint_create: any free port */
#define MCAPI_DOMAIN_INVALID (~0U)       /* mcapi_domain_id_get on error */
#define MCAPI_NODE_INVALID (~0U)         /* mcapi_node_id_get on error */
#define MCAPI_RETURN_VALUE_INVALID (~0U) /* mcapi_wait_any on error */

/* Status codes (3.16.15): MCAPI_SUCCESS is 1 and the codes follow in the table's order;
 * codes that chapter 4's ERRORS tables use but 3.16.15 omits come after it. */
enum mcapi_status_codes {
    MCAPI_SUCCESS = 1,
    MCAPI_PENDING = 2,
    MCAPI_TIMEOUT = 3,
    MCAPI_ERR_PARAMETER = 4,
    MCAPI_ERR_DOMAIN_INVALID = 5,
    MCAPI_ERR_NODE_INVALID = 6,
    MCAPI_ERR_NODE_INITFAILED = 7,
    MCAPI_ERR_NODE_INITIALIZED = 8,
    MCAPI_ERR_NODE_NOTINIT = 9,
    MCAPI_ERR_NODE_FINALFAILED = 10,
    MCAPI_ERR_PORT_INVALID = 11,
    MCAPI_ERR_ENDP_INVALID = 12,
    MCAPI_ERR_ENDP_EXISTS = 13,
    MCAPI_ERR_ENDP_GET_LIMIT = 14,
    MCAPI_ERR_ENDP_NOTOWNER = 15,
    MCAPI_ERR_ENDP_REMOTE = 16,
    MCAPI_ERR_ATTR_INCOMPATIBLE = 17,
    MCAPI_ERR_ATTR_SIZE = 18,
    MCAPI_ERR_ATTR_NUM = 19,
    MCAPI_ERR_ATTR_VALUE = 20,
    MCAPI_ERR_ATTR_NOTSUPPORTED = 21,
    MCAPI_ERR_ATTR_READONLY = 22,
    MCAPI_ERR_MSG_SIZE = 23,
    MCAPI_ERR_MSG_TRUNCATED = 24,
    MCAPI_ERR_CHAN_OPEN = 25,
    MCAPI_ERR_CHAN_TYPE = 26,
    MCAPI_ERR_CHAN_DIRECTION = 27,
    MCAPI_ERR_CHAN_CONNECTED = 28,
    MCAPI_ERR_CHAN_OPENPENDING = 29,
    MCAPI_ERR_CHAN_CLOSEPENDING = 30,
    MCAPI_ERR_CHAN_NOTOPEN = 31,
    MCAPI_ERR_CHAN_INVALID = 32,
    MCAPI_ERR_PKT_SIZE = 33,
    MCAPI_ERR_TRANSMISSION = 34,
    MCAPI_ERR_PRIORITY = 35,
    MCAPI_ERR_BUF_INVALID = 36,
    MCAPI_ERR_MEM_LIMIT = 37,
    MCAPI_ERR_REQUEST_INVALID = 38,
    MCAPI_ERR_REQUEST_LIMIT = 39,
    MCAPI_ERR_REQUEST_CANCELLED = 40,
    MCAPI_ERR_WAIT_PENDING = 41,
    MCAPI_ERR_GENERAL = 42,
    /* Used by the ERRORS tables of chapter 4, missing from 3.16.15. */
    MCAPI_ERR_NODE_CONFFAILED = 43,
    MCAPI_ERR_ENDP_GET_INVALID = 44,
    MCAPI_ERR_ENDP_DELETED = 45,
    /* Extension, not in MCAPI 2.000: the MCA reference implementation's code for an
       endpoint_create beyond MCAPI_MAX_ENDPOINTS, returned only in its compatibility
       mode (MCAPI_COMPAT=mca); MCAPI_ERR_PORT_INVALID otherwise (spec 4.2.1). */
    MCAPI_ERR_ENDP_LIMIT = 46,
    MCAPI_STATUSCODE_END = 47 /* not a status: one past the last code */
};

/* Spellings of the MCA reference headers. */
#define MCAPI_ERR_MSG_LIMIT MCAPI_ERR_MSG_SIZE
#define MCAPI_ERR_PKT_LIMIT MCAPI_ERR_PKT_SIZE
#define MCAPI_MAX_STATUS_SIZE MCAPI_MAX_STATUS_MSG_LEN
#define MCAPI_MAX_PRORITY 0 /* "the highest priority", as spelled in spec 3.16.13.5 */

/* Endpoint attributes (3.16.13), numbered in the order listed there. */
enum mcapi_endp_attrs {
    MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE = 1, /* size_t, 1..MCAPI_MAX_PKT_SIZE (channels) */
    MCAPI_ENDP_ATTR_BUFFER_TYPE = 2,      /* mcapi_uint_t, FIFO only (STATE: NOTSUPPORTED) */
    MCAPI_ENDP_ATTR_MEMORY_TYPE = 3,      /* mcapi_uint_t, local only (others: NOTSUPPORTED) */
    MCAPI_ENDP_ATTR_NUM_PRIORITIES = 4,   /* mcapi_uint_t, read-only */
    MCAPI_ENDP_ATTR_PRIORITY = 5,         /* mcapi_uint_t, 0..MCAPI_MAX_PRIORITY */
    MCAPI_ENDP_ATTR_NUM_SEND_BUFFERS = 6, /* mcapi_uint_t, read-only, live */
    MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS = 7, /* mcapi_uint_t, read-only, live */
    MCAPI_ENDP_ATTR_STATUS = 8,           /* mcapi_uint_t flags, read-only */
    MCAPI_ENDP_ATTR_TIMEOUT = 9           /* mcapi_timeout_t (ms), default infinite */
};

typedef size_t mcapi_endp_attr_max_payload_size_t;
typedef mcapi_uint_t mcapi_endp_attr_buffer_type_t;
typedef mcapi_uint_t mcapi_endp_attr_memory_type_t;
typedef mcapi_uint_t mcapi_endp_attr_num_priorities_t;
typedef mcapi_uint_t mcapi_endp_attr_priority_t;
typedef mcapi_uint_t mcapi_endp_attr_num_send_buffers_t;
typedef mcapi_uint_t mcapi_endp_attr_num_recv_buffers_t;
typedef mcapi_uint_t mcapi_endp_attr_status_t;
typedef mcapi_timeout_t mcapi_endp_attr_timeout_t;

/* MCAPI_ENDP_ATTR_BUFFER_TYPE values. */
#define MCAPI_ENDP_ATTR_FIFO_BUFFER 0U
#define MCAPI_ENDP_ATTR_STATE_BUFFER 1U
/* MCAPI_ENDP_ATTR_MEMORY_TYPE values. */
#define MCAPI_ENDP_ATTR_LOCAL_MEMORY 0U
#define MCAPI_ENDP_ATTR_SHARED_MEMORY 1U
#define MCAPI_ENDP_ATTR_REMOTE_MEMORY 2U
/* MCAPI_ENDP_ATTR_STATUS flags (lower 16 bits; the upper 16 are unused here). */
#define MCAPI_ENDP_ATTR_STATUS_CONNECTED 0x01U
#define MCAPI_ENDP_ATTR_STATUS_OPEN 0x02U
#define MCAPI_ENDP_ATTR_STATUS_OPEN_PENDING 0x04U
#define MCAPI_ENDP_ATTR_STATUS_CLOSE_PENDING 0x08U
#define MCAPI_ENDP_ATTR_STATUS_PKTCHAN 0x10U
#define MCAPI_ENDP_ATTR_STATUS_SCLCHAN 0x20U
#define MCAPI_ENDP_ATTR_STATUS_SEND 0x40U
#define MCAPI_ENDP_ATTR_STATUS_RECEIVE 0x80U

/* Node attributes (4.1.6). */
#define MCAPI_NODE_ATTR_TYPE 1U
#define MCAPI_NODE_ATTR_TYPE_REGULAR 0U

/* What mcapi_initialize reports (3.17.5.1.2). */
typedef struct mcapi_info {
    mcapi_uint_t mcapi_version;          /* MCAPI_VERSION */
    mcapi_uint_t organization_id;        /* MCAPI_ORG_ID */
    mcapi_uint_t implementation_version; /* MCAPI_IMPL_VERSION */
    mcapi_uint_t number_of_domains;      /* from the topology file; 0: unknown */
    mcapi_uint_t number_of_nodes;        /* of this domain, from the topology file; 0: unknown */
    mcapi_uint_t number_of_ports;        /* ports of the local node */
} mcapi_info_t;

/* 4.1 Initialization and node attributes. */
void mcapi_initialize(MCAPI_IN mcapi_domain_t domain_id, MCAPI_IN mcapi_node_t node_id,
                      MCAPI_IN mcapi_node_attributes_t* mcapi_node_attributes,
                      MCAPI_IN mcapi_param_t* mcapi_parameters, MCAPI_OUT mcapi_info_t* mcapi_info,
                      MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_finalize(MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_domain_t mcapi_domain_id_get(MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_node_t mcapi_node_id_get(MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_node_init_attributes(MCAPI_OUT mcapi_node_attributes_t* mcapi_node_attributes,
                                MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_node_set_attribute(MCAPI_OUT mcapi_node_attributes_t* mcapi_node_attributes,
                              MCAPI_IN mcapi_uint_t attribute_num, MCAPI_IN void* attribute,
                              MCAPI_IN size_t attribute_size,
                              MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_node_get_attribute(MCAPI_IN mcapi_domain_t domain_id, MCAPI_IN mcapi_node_t node_id,
                              MCAPI_IN mcapi_uint_t attribute_num, MCAPI_OUT void* attribute,
                              MCAPI_IN size_t attribute_size,
                              MCAPI_OUT mcapi_status_t* mcapi_status);

/* 4.2 Endpoints. */
mcapi_endpoint_t mcapi_endpoint_create(MCAPI_IN mcapi_port_t port_id,
                                       MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_endpoint_get_i(MCAPI_IN mcapi_domain_t domain_id, MCAPI_IN mcapi_node_t node_id,
                          MCAPI_IN mcapi_port_t port_id, MCAPI_OUT mcapi_endpoint_t* endpoint,
                          MCAPI_OUT mcapi_request_t* request,
                          MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_endpoint_t mcapi_endpoint_get(MCAPI_IN mcapi_domain_t domain_id,
                                    MCAPI_IN mcapi_node_t node_id, MCAPI_IN mcapi_port_t port_id,
                                    MCAPI_IN mcapi_timeout_t timeout,
                                    MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_endpoint_delete(MCAPI_IN mcapi_endpoint_t endpoint,
                           MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_endpoint_get_attribute(MCAPI_IN mcapi_endpoint_t endpoint,
                                  MCAPI_IN mcapi_uint_t attribute_num, MCAPI_OUT void* attribute,
                                  MCAPI_IN size_t attribute_size,
                                  MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_endpoint_set_attribute(MCAPI_IN mcapi_endpoint_t endpoint,
                                  MCAPI_IN mcapi_uint_t attribute_num, MCAPI_IN void* attribute,
                                  MCAPI_IN size_t attribute_size,
                                  MCAPI_OUT mcapi_status_t* mcapi_status);

/* 4.3 Messages. */
void mcapi_msg_send_i(MCAPI_IN mcapi_endpoint_t send_endpoint,
                      MCAPI_IN mcapi_endpoint_t receive_endpoint, MCAPI_IN void* buffer,
                      MCAPI_IN size_t buffer_size, MCAPI_IN mcapi_priority_t priority,
                      MCAPI_OUT mcapi_request_t* request, MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_msg_send(MCAPI_IN mcapi_endpoint_t send_endpoint,
                    MCAPI_IN mcapi_endpoint_t receive_endpoint, MCAPI_IN void* buffer,
                    MCAPI_IN size_t buffer_size, MCAPI_IN mcapi_priority_t priority,
                    MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_msg_recv_i(MCAPI_IN mcapi_endpoint_t receive_endpoint, MCAPI_OUT void* buffer,
                      MCAPI_IN size_t buffer_size, MCAPI_OUT mcapi_request_t* request,
                      MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_msg_recv(MCAPI_IN mcapi_endpoint_t receive_endpoint, MCAPI_OUT void* buffer,
                    MCAPI_IN size_t buffer_size, MCAPI_OUT size_t* received_size,
                    MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint_t mcapi_msg_available(MCAPI_IN mcapi_endpoint_t receive_endpoint,
                                 MCAPI_OUT mcapi_status_t* mcapi_status);

/* 4.4 Packet channels. Open handles are written at once and usable once the request
 * completed. A received packet is a pointer into the channel's receive pool (no copy),
 * valid until mcapi_pktchan_release; mcapi_pktchan_recv_i writes it to *buffer when the
 * request completes (mcapi_test, mcapi_wait, mcapi_wait_any). */
void mcapi_pktchan_connect_i(MCAPI_IN mcapi_endpoint_t send_endpoint,
                             MCAPI_IN mcapi_endpoint_t receive_endpoint,
                             MCAPI_OUT mcapi_request_t* request,
                             MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_recv_open_i(MCAPI_OUT mcapi_pktchan_recv_hndl_t* receive_handle,
                               MCAPI_IN mcapi_endpoint_t receive_endpoint,
                               MCAPI_OUT mcapi_request_t* request,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_send_open_i(MCAPI_OUT mcapi_pktchan_send_hndl_t* send_handle,
                               MCAPI_IN mcapi_endpoint_t send_endpoint,
                               MCAPI_OUT mcapi_request_t* request,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_send_i(MCAPI_IN mcapi_pktchan_send_hndl_t send_handle, MCAPI_IN void* buffer,
                          MCAPI_IN size_t size, MCAPI_OUT mcapi_request_t* request,
                          MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_send(MCAPI_IN mcapi_pktchan_send_hndl_t send_handle, MCAPI_IN void* buffer,
                        MCAPI_IN size_t size, MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_recv_i(MCAPI_IN mcapi_pktchan_recv_hndl_t receive_handle,
                          MCAPI_OUT void** buffer, MCAPI_OUT mcapi_request_t* request,
                          MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_recv(MCAPI_IN mcapi_pktchan_recv_hndl_t receive_handle,
                        MCAPI_OUT void** buffer, MCAPI_OUT size_t* received_size,
                        MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint_t mcapi_pktchan_available(MCAPI_IN mcapi_pktchan_recv_hndl_t receive_handle,
                                     MCAPI_OUT mcapi_status_t* mcapi_status);
/* The buffer is a plain void* (not const): it is the packet the call gives back. */
void mcapi_pktchan_release(void* buffer, MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_boolean_t mcapi_pktchan_release_test(void* buffer, MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_recv_close_i(MCAPI_IN mcapi_pktchan_recv_hndl_t receive_handle,
                                MCAPI_OUT mcapi_request_t* request,
                                MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_pktchan_send_close_i(MCAPI_IN mcapi_pktchan_send_hndl_t send_handle,
                                MCAPI_OUT mcapi_request_t* request,
                                MCAPI_OUT mcapi_status_t* mcapi_status);

/* 4.5 Scalar channels. A scalar is received with the width it was sent with; another
 * width gives MCAPI_ERR_GENERAL and leaves it queued. */
void mcapi_sclchan_connect_i(MCAPI_IN mcapi_endpoint_t send_endpoint,
                             MCAPI_IN mcapi_endpoint_t receive_endpoint,
                             MCAPI_OUT mcapi_request_t* request,
                             MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_recv_open_i(MCAPI_OUT mcapi_sclchan_recv_hndl_t* receive_handle,
                               MCAPI_IN mcapi_endpoint_t receive_endpoint,
                               MCAPI_OUT mcapi_request_t* request,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_send_open_i(MCAPI_OUT mcapi_sclchan_send_hndl_t* send_handle,
                               MCAPI_IN mcapi_endpoint_t send_endpoint,
                               MCAPI_OUT mcapi_request_t* request,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_send_uint64(MCAPI_IN mcapi_sclchan_send_hndl_t send_handle,
                               MCAPI_IN mcapi_uint64_t dataword,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_send_uint32(MCAPI_IN mcapi_sclchan_send_hndl_t send_handle,
                               MCAPI_IN mcapi_uint32_t dataword,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_send_uint16(MCAPI_IN mcapi_sclchan_send_hndl_t send_handle,
                               MCAPI_IN mcapi_uint16_t dataword,
                               MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_send_uint8(MCAPI_IN mcapi_sclchan_send_hndl_t send_handle,
                              MCAPI_IN mcapi_uint8_t dataword,
                              MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint64_t mcapi_sclchan_recv_uint64(MCAPI_IN mcapi_sclchan_recv_hndl_t receive_handle,
                                         MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint32_t mcapi_sclchan_recv_uint32(MCAPI_IN mcapi_sclchan_recv_hndl_t receive_handle,
                                         MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint16_t mcapi_sclchan_recv_uint16(MCAPI_IN mcapi_sclchan_recv_hndl_t receive_handle,
                                         MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint8_t mcapi_sclchan_recv_uint8(MCAPI_IN mcapi_sclchan_recv_hndl_t receive_handle,
                                       MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_uint_t mcapi_sclchan_available(MCAPI_IN mcapi_sclchan_recv_hndl_t receive_handle,
                                     MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_recv_close_i(MCAPI_IN mcapi_sclchan_recv_hndl_t receive_handle,
                                MCAPI_OUT mcapi_request_t* request,
                                MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_sclchan_send_close_i(MCAPI_IN mcapi_sclchan_send_hndl_t send_handle,
                                MCAPI_OUT mcapi_request_t* request,
                                MCAPI_OUT mcapi_status_t* mcapi_status);

/* 4.6 Non-blocking operations. */
mcapi_boolean_t mcapi_test(mcapi_request_t* request, MCAPI_OUT size_t* size,
                           MCAPI_OUT mcapi_status_t* mcapi_status);
mcapi_boolean_t mcapi_wait(MCAPI_IN mcapi_request_t* request, MCAPI_OUT size_t* size,
                           MCAPI_IN mcapi_timeout_t timeout,
                           MCAPI_OUT mcapi_status_t* mcapi_status);
/* requests: an array of `number` request pointers (as the MCA headers have it). */
mcapi_uint_t mcapi_wait_any(MCAPI_IN size_t number, mcapi_request_t** requests,
                            MCAPI_OUT size_t* size, MCAPI_IN mcapi_timeout_t timeout,
                            MCAPI_OUT mcapi_status_t* mcapi_status);
void mcapi_cancel(mcapi_request_t* request, MCAPI_OUT mcapi_status_t* mcapi_status);

/* 4.7 Support. */
char* mcapi_display_status(MCAPI_IN mcapi_status_t mcapi_status, MCAPI_OUT char* status_message,
                           MCAPI_IN size_t size);

#ifdef __cplusplus
}
#endif

#endif /* MCAPI_H */
