/* The smallest MCAPI program, built against an installed libmcapi through pkg-config:
 * one node sends a message to itself. */
#include <mcapi.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    mcapi_status_t status;
    mcapi_info_t info;
    char buffer[32];
    size_t size = 0;
    mcapi_initialize(0, 1, NULL, NULL, &info, &status);
    if (status != MCAPI_SUCCESS) {
        return 1;
    }
    mcapi_endpoint_t ep = mcapi_endpoint_create(MCAPI_PORT_ANY, &status);
    mcapi_msg_send(ep, ep, "installed", 9, 0, &status);
    mcapi_msg_recv(ep, buffer, sizeof buffer, &size, &status);
    if (status != MCAPI_SUCCESS || size != 9 || memcmp(buffer, "installed", 9) != 0) {
        return 1;
    }
    mcapi_finalize(&status);
    printf("app: MCAPI %x, implementation %06x: ok\n", (unsigned)info.mcapi_version,
           (unsigned)info.implementation_version);
    return status == MCAPI_SUCCESS ? 0 : 1;
}
