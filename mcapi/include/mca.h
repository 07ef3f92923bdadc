/*
 * mca.h - Multicore Association common types and constants (MCAPI 2.000, spec 3.16-3.17.1).
 *
 * Part of libmcapi (MCAPI over libfabric). Values are checked against the Rust side by
 * mcapi/tests/c_abi.rs; see docs/c-abi.md.
 */
#ifndef MCA_H
#define MCA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fixed-width integers and booleans. */
typedef int8_t mca_int8_t;
typedef int16_t mca_int16_t;
typedef int32_t mca_int32_t;
typedef int64_t mca_int64_t;
typedef int32_t mca_int_t;
typedef uint8_t mca_uint8_t;
typedef uint16_t mca_uint16_t;
typedef uint32_t mca_uint32_t;
typedef uint64_t mca_uint64_t;
typedef uint32_t mca_uint_t;
typedef uint8_t mca_boolean_t;

/* Ids, status, timeouts and requests shared by the MCA APIs. */
typedef uint32_t mca_domain_t;
typedef uint32_t mca_node_t;
typedef uint32_t mca_status_t;  /* an MCAPI status code (mcapi.h) */
typedef uint32_t mca_timeout_t; /* milliseconds */
typedef uint64_t mca_request_t; /* an opaque, self-validating handle */

#define MCA_TRUE ((mca_boolean_t)1)
#define MCA_FALSE ((mca_boolean_t)0)
#define MCA_NULL 0
/* Wait forever (as a timeout); every bit set, so (mca_timeout_t)~0 as well. */
#define MCA_INFINITE (~0U)
#define MCA_RETURN_VALUE_INVALID (~0U)

/* Function argument direction, for readability only (3.16.16). Input pointers are const. */
#define MCA_IN const
#define MCA_OUT

#ifdef __cplusplus
}
#endif

#endif /* MCA_H */
