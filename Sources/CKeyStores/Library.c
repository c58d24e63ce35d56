#define _GNU_SOURCE // asprintf
#include "Library.h"

#include <dlfcn.h>
#include <stdio.h>

bool tb_library_open(const char *soname, const char *const *names, void **const *slots, size_t count, void **library,
                     char **message) {
    *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (*library == NULL) {
        if (asprintf(message, "%s is not installed or does not load: %s", soname, dlerror()) < 0) *message = NULL;
        return false;
    }
    for (size_t index = 0; index < count; index++) {
        *slots[index] = dlsym(*library, names[index]);
        if (*slots[index] == NULL) {
            if (asprintf(message, "%s has no %s: another version than the one tokenbroker was built for is installed",
                         soname, names[index]) < 0)
                *message = NULL;
            tb_library_close(library, slots, count);
            return false;
        }
    }
    return true;
}

void tb_library_close(void **library, void **const *slots, size_t count) {
    for (size_t index = 0; index < count; index++) *slots[index] = NULL;
    if (*library != NULL) dlclose(*library);
    *library = NULL;
}
