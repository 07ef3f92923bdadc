/* Assertions for the C tests of libmcapi: a failed check prints where and why and exits 1. */
#ifndef MCAPI_TEST_CHECK_H
#define MCAPI_TEST_CHECK_H

#include <mcapi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name of a status code, in `text` (MCAPI_MAX_STATUS_MSG_LEN bytes). */
static inline const char* status_name(mcapi_status_t status, char* text) {
    const char* name = mcapi_display_status(status, text, MCAPI_MAX_STATUS_MSG_LEN);
    return name ? name : "(not a status)";
}

/* The call's status must be `want`. */
#define EXPECT_STATUS(status, want)                                                         \
    do {                                                                                    \
        mcapi_status_t got_ = (status);                                                     \
        if (got_ != (mcapi_status_t)(want)) {                                               \
            char got_text_[MCAPI_MAX_STATUS_MSG_LEN], want_text_[MCAPI_MAX_STATUS_MSG_LEN]; \
            fprintf(stderr, "%s:%d: status %s, expected %s\n", __FILE__, __LINE__,          \
                    status_name(got_, got_text_),                                           \
                    status_name((mcapi_status_t)(want), want_text_));                       \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#define EXPECT_OK(status) EXPECT_STATUS(status, MCAPI_SUCCESS)

#define EXPECT(cond)                                                                        \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);        \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

#endif
