// The headers from C++: they compile warning-free and link through extern "C".
#include <mcapi.h>

#include <cstdio>
#include <cstring>

int main() {
    char text[MCAPI_MAX_STATUS_MSG_LEN];
    mcapi_status_t status = MCAPI_SUCCESS;
    mcapi_request_t request = 0;
    mcapi_request_t* requests[1] = {&request};
    size_t size = 0;
    // Not initialized: the calls report it, through C linkage.
    if (mcapi_node_id_get(&status) != MCAPI_NODE_INVALID || status != MCAPI_ERR_NODE_NOTINIT) {
        return 1;
    }
    if (mcapi_wait_any(1, requests, &size, MCAPI_TIMEOUT_IMMEDIATE, &status) !=
        MCAPI_RETURN_VALUE_INVALID) {
        return 1;
    }
    const char* name = mcapi_display_status(MCAPI_ERR_REQUEST_CANCELLED, text, sizeof text);
    if (name == nullptr || std::strcmp(name, "MCAPI_ERR_REQUEST_CANCELLED") != 0) {
        return 1;
    }
    std::printf("c++: %s\n", name);
    return 0;
}
